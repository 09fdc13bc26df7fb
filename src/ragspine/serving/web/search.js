// ragspine search page: running a search and showing its hits.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $, el, fmtScore } from "./dom.js";
import { api, thumbURL } from "./api.js";
import { buildFilters, docEntry, fieldLabel, selectedLibraries, toggleFilter, valueLabel } from "./library.js";
import { clearNotices, notice, showError } from "./notices.js";
import { pageFrame, pageSize } from "./pages.js";
import { docKey, state } from "./state.js";
import { passageNode, queryTerms } from "./terms.js";
import { openViewer } from "./viewer.js";

/** Channel names as shown next to their scores. */
const CHANNEL_LABELS = {
  bm25: "BM25 passage", bm25_page: "BM25 page", dense: "dense", visual: "visual",
  document: "document", fused: "fused", rerank: "rerank",
};

function setResultsState(s) { $("results").dataset.state = s; }

export async function runSearch() {
  const query = $("q").value.trim();
  if (!query) return;
  const libraries = selectedLibraries();
  clearNotices();
  if (!libraries.length) {
    notice("error", "No library", el("span", { class: "detail", text: "there is no library to search yet: upload a PDF first" }));
    return;
  }
  const body = {
    query, libraries, mode: $("mode").value, top_k: Number($("top-k").value), filters: buildFilters(),
  };
  state.lastRequest = body;
  const seq = ++state.searchSeq;
  const params = new URLSearchParams({ q: query, lib: $("library").value, mode: body.mode });
  history.replaceState(null, "", `?${params}`);
  $("search-button").disabled = true;
  setResultsState("loading");
  try {
    const res = await api("/v1/search", { method: "POST", json: body });
    if (seq !== state.searchSeq) return;
    await Promise.all([...new Set((res.hits || []).map((h) => docKey(h.library_id, h.doc_id)))]
      .map((k) => { const [l, d] = k.split("\u0000"); return docEntry(l, d); }));
    if (seq !== state.searchSeq) return;
    renderResults(res, body);
  } catch (err) {
    if (seq !== state.searchSeq) return;
    $("results").replaceChildren();
    $("toolbar").hidden = true;
    showError(err);
    setResultsState("error");
  } finally {
    if (seq === state.searchSeq) $("search-button").disabled = false;
  }
}

function renderResults(res, req) {
  $("welcome").hidden = true;
  const hits = Array.isArray(res.hits) ? res.hits : [];
  // What the channels searched: the question without its instructions about the answer's form.
  state.lastSearched = res.searched || req.query;
  const terms = queryTerms(state.lastSearched);
  if (res.degraded) {
    const reasons = (res.degraded_reasons || []).map((r) => {
      const s = String(r), i = s.indexOf(":");
      return el("li", {}, i > 0 ? [el("code", { text: s.slice(0, i) }), s.slice(i)] : s);
    });
    notice("warn", "Degraded answer", el("span", { class: "detail", text: "part of the search was unavailable; the results below come from what was left." }),
      el("ul", { class: "reasons" }, reasons)).dataset.kind = "degraded";
  }
  if (res.filters_relaxed) {
    notice("warn", "Filters relaxed", el("span", { class: "detail", text: "nothing matched the filters, so these results ignore them." }));
  }
  const took = res.timings_ms && typeof res.timings_ms.total === "number" ? ` · ${Math.round(res.timings_ms.total)} ms` : "";
  $("summary").textContent = `${hits.length} result${hits.length === 1 ? "" : "s"} for “${req.query}” · mode ${res.mode}${took}`;
  // The fusion that ranked the hits, as the answer names it (rrf(k=60; ...), convex(...), + document prior).
  $("summary").title = res.fusion ? `ranked by ${res.fusion}` : "";
  $("summary").dataset.fusion = res.fusion || "";
  const ranked = $("ranked-by");
  if (ranked) ranked.textContent = res.fusion ? `ranked by ${res.fusion}` : "";
  $("toolbar").hidden = false;
  const box = $("results");
  if (!hits.length) {
    const tips = [];
    if (req.filters.length) {
      tips.push(el("p", {}, "Try removing a filter:"), el("div", { class: "chip-row" },
        [...state.filters.entries()].flatMap(([field, sel]) => [...sel.entries()].map(([k, v]) =>
          el("button", { type: "button", class: "chip removable", dataset: { field, value: String(v) },
            onclick: () => toggleFilter(field, k, v) }, `${fieldLabel(field)}: ${valueLabel(v)} ✕`)))));
    } else {
      tips.push(el("p", {}, "Try other words, another mode, or another library."));
    }
    // A miss says why: no query word occurs in the library and no meaning match stood out.
    const miss = (res.notes || []).find((n) => String(n).startsWith("miss:"));
    if (miss) tips.unshift(el("p", { class: "miss-note", text: String(miss).slice(5).trim() }));
    box.replaceChildren(el("div", { class: "empty" }, el("h2", { text: "No results" }),
      el("p", {}, `Nothing in ${req.libraries.join(", ")} matches “${req.query}”${req.filters.length ? " with these filters" : ""}.`), tips));
    setResultsState("empty");
    return;
  }
  box.replaceChildren(...hits.map((h, i) => hitCard(h, i, terms)));
  setResultsState("done");
}

export function scoreList(scores) {
  const items = Object.entries(scores || {}).filter(([, v]) => typeof v === "number");
  return el("dl", { class: "scores" }, items.map(([k, v]) => el("div", { class: "score", dataset: { channel: k } },
    el("dt", { text: CHANNEL_LABELS[k] || k }), el("dd", { text: fmtScore(v) }))));
}

function hitCard(h, i, terms) {
  const doc = state.docs.get(docKey(h.library_id, h.doc_id));
  const meta = h.metadata || {};
  const badges = ["entity", "issuer", "period", "doc_type", "language"].filter((k) => meta[k] !== undefined && meta[k] !== null)
    .filter((k, _, all) => k !== "issuer" || !all.includes("entity") || meta.issuer !== meta.entity)
    .map((k) => el("span", { class: "badge", text: String(meta[k]) }));
  if (doc && (doc.ocr === "pending" || doc.ocr === "failed")) {
    badges.push(el("span", { class: "badge ocr-badge", dataset: { ocr: doc.ocr },
      text: doc.ocr === "pending" ? "OCR pending" : "OCR failed", title: "some pages of this document are not searchable yet" }));
  }
  if (doc && doc.dense === "pending") {
    badges.push(el("span", { class: "badge dense-badge", text: "meaning pending",
      title: "found by its words; its passages' dense vectors are still being encoded" }));
  }
  const open = () => openViewer(h, terms);
  const frame = pageFrame({
    url: h.thumbnail_url || thumbURL(h.library_id, h.doc_id, h.page),
    page: h.page, size: pageSize(doc, h.page), bbox: h.bbox, cls: "thumb",
  });
  return el("article", { class: "hit", dataset: { doc: h.doc_id, library: h.library_id, page: String(h.page), rank: String(i + 1) } },
    el("button", { type: "button", class: "thumb-button", "aria-label": `Open page ${h.page} of ${h.title || h.doc_id}`, onclick: open }, frame),
    el("div", { class: "hit-body" },
      el("h3", { class: "hit-title" }, el("a", { href: "#", onclick: (e) => { e.preventDefault(); open(); } }, h.title || h.doc_id)),
      el("p", { class: "hit-meta" },
        el("span", { class: "page-no", text: `page ${h.page}${doc && doc.pages_total ? ` of ${doc.pages_total}` : ""}`
          + (Array.isArray(h.printed_pages) && h.printed_pages.length ? ` · printed ${h.printed_pages.join("–")}` : "") }),
        el("span", { class: "doc-id", text: `${h.library_id} / ${h.doc_id}` }), badges),
      passageNode(String(h.text || ""), terms, "passage"),
      scoreList(h.scores)));
}
