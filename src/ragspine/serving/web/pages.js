// ragspine search page: a page image in a frame of the page's shape, the cited region outlined.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { el } from "./dom.js";
import { loadImage } from "./api.js";

/** [width, height] in PDF points of a page, from the document entry; null if unknown. */
export function pageSize(doc, page) {
  if (!doc || !Array.isArray(doc.page_numbers) || !Array.isArray(doc.page_sizes)) return null;
  const i = doc.page_numbers.indexOf(page);
  const s = i >= 0 ? doc.page_sizes[i] : null;
  return Array.isArray(s) && s[0] > 0 && s[1] > 0 ? s : null;
}

/** Position a box given in PDF points (origin top-left) over a page of pw x ph points. The
 *  frame has the page's aspect ratio and the image fills it, so percentages of the page size
 *  are exact at any display size. */
function placeBox(box, bbox, pw, ph) {
  const cx = (v) => Math.min(Math.max(Number(v) || 0, 0), pw);
  const cy = (v) => Math.min(Math.max(Number(v) || 0, 0), ph);
  const [x0, y0, x1, y1] = [cx(bbox[0]), cy(bbox[1]), cx(bbox[2]), cy(bbox[3])];
  box.style.left = `${(x0 / pw) * 100}%`;
  box.style.top = `${(y0 / ph) * 100}%`;
  box.style.width = `${(Math.max(x1 - x0, 0) / pw) * 100}%`;
  box.style.height = `${(Math.max(y1 - y0, 0) / ph) * 100}%`;
}

/** A page image in a frame of the page's shape, with the cited region outlined when given.
 *  Scale: the page size in points comes from the document entry; without it (documents
 *  indexed before page_sizes existed) the image's natural size is taken as points, which is
 *  exact at the default RAGSPINE_THUMBNAIL_DPI of 72. */
export function pageFrame({ url, page, size, bbox, cls, extraOverlay }) {
  const frame = el("div", { class: `page-frame ${cls || ""}`, dataset: { page: String(page), state: "loading" } });
  if (size) frame.style.aspectRatio = `${size[0]} / ${size[1]}`;
  const img = el("img", { alt: `page ${page}`, draggable: false });
  frame.append(img);
  const box = bbox ? el("div", { class: "bbox", "aria-hidden": "true" }) : null;
  if (box) frame.append(box);
  const missing = (text) => {
    frame.dataset.state = "missing";
    frame.replaceChildren(el("div", { class: "missing", text }));
  };
  loadImage(url).then((src) => {
    if (!src) { missing("page not available"); return; }
    img.addEventListener("load", () => {
      const [pw, ph] = size || [img.naturalWidth, img.naturalHeight];
      if (!size) frame.style.aspectRatio = `${pw} / ${ph}`;
      frame.dataset.scale = String(img.naturalWidth / pw); // image pixels per PDF point
      if (box) placeBox(box, bbox, pw, ph);
      if (extraOverlay) extraOverlay(frame);
      frame.dataset.state = "ready";
    }, { once: true });
    img.addEventListener("error", () => missing("the page image could not be shown"), { once: true });
    img.src = src;
  }).catch((err) => missing(err.status === 401 || err.status === 403 ? err.detail : "the page image could not be loaded"));
  return frame;
}
