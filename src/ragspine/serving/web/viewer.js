// ragspine search page: the page viewer (a hit's page large, its neighbours, the cited passage).
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $, el, enc } from "./dom.js";
import { loadImage, thumbURL } from "./api.js";
import { pageFrame, pageSize } from "./pages.js";
import { scoreList } from "./search.js";
import { state } from "./state.js";
import { docEntry } from "./library.js";
import { passageNode } from "./terms.js";

/** Similarity-map image of a page for a query, relative to the page's URL (issue 4). */
const EXPLAIN_SUFFIX = "similarity-map";
const viewer = { hit: null, doc: null, page: 0, terms: null };

export async function openViewer(hit, terms) {
  viewer.hit = hit;
  viewer.terms = terms;
  viewer.doc = await docEntry(hit.library_id, hit.doc_id);
  showPage(hit.page);
  const dlg = $("viewer");
  if (!dlg.open) dlg.showModal();
}

function explainOverlay(url) {
  return (frame) => {
    loadImage(url).then((src) => {
      if (src) frame.append(el("img", { class: "explain-map", src, alt: "similarity map" }));
      else frame.append(el("div", { class: "explain-note", text: "no similarity map for this page" }));
    }).catch((e) => frame.append(el("div", { class: "explain-note", text: e.detail || "similarity map unavailable" })));
  };
}

function neighbour(button, page, label) {
  const { hit, doc } = viewer;
  const total = doc && doc.pages_total ? doc.pages_total : hit.page;
  if (page < 1 || page > total) { // keep the grid slot so the page stays centred
    button.replaceChildren();
    button.disabled = true;
    button.classList.add("none");
    return;
  }
  button.classList.remove("none");
  button.disabled = false;
  button.dataset.page = String(page);
  button.replaceChildren(
    pageFrame({ url: thumbURL(hit.library_id, hit.doc_id, page), page, size: pageSize(doc, page), cls: "mini" }),
    el("span", { class: "neighbour-label", text: `${label} page ${page}` }));
}

function showPage(n) {
  const { hit, doc } = viewer;
  viewer.page = n;
  const total = doc && doc.pages_total ? doc.pages_total : null;
  const cited = n === hit.page;
  $("viewer-title").textContent = hit.title || hit.doc_id;
  $("viewer-sub").textContent = `${hit.library_id} / ${hit.doc_id} · page ${n}${total ? ` of ${total}` : ""}${cited ? " · cited page" : ""}`;
  const url = thumbURL(hit.library_id, hit.doc_id, n);
  const explain = state.pageModel && $("explain-toggle").checked && state.lastRequest
    ? explainOverlay(`${url.slice(0, -"thumbnail".length)}${EXPLAIN_SUFFIX}?query=${enc(state.lastSearched || state.lastRequest.query)}`) : null;
  $("viewer-page").replaceChildren(pageFrame({
    url, page: n, size: pageSize(doc, n), bbox: cited ? hit.bbox : null, cls: "large", extraOverlay: explain,
  }));
  neighbour($("viewer-prev"), n - 1, "‹");
  neighbour($("viewer-next"), n + 1, "›");
  const passage = $("viewer-passage");
  if (cited) {
    passage.replaceChildren(el("h3", { text: "Cited passage" }),
      passageNode(String(hit.text || ""), viewer.terms, "passage full"), scoreList(hit.scores));
  } else {
    passage.replaceChildren(el("p", { class: "sub" }, `The cited passage is on page ${hit.page}.`));
  }
}

function step(delta) {
  const b = $(delta < 0 ? "viewer-prev" : "viewer-next");
  if (!b.disabled) showPage(viewer.page + delta);
}

/** The viewer's controls: close, previous / next page (buttons and arrow keys), the explain toggles. */
export function bindViewer() {
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("viewer-prev").addEventListener("click", () => step(-1));
  $("viewer-next").addEventListener("click", () => step(1));
  $("viewer").addEventListener("keydown", (e) => {
    if (e.key === "ArrowLeft") step(-1);
    else if (e.key === "ArrowRight") step(1);
  });
  $("viewer").addEventListener("click", (e) => { if (e.target === $("viewer")) $("viewer").close(); });
  for (const id of ["explain-toggle", "viewer-explain-toggle"]) {
    $(id).addEventListener("change", (e) => {
      $("explain-toggle").checked = $("viewer-explain-toggle").checked = e.target.checked;
      if ($("viewer").open) showPage(viewer.page);
    });
  }
}
