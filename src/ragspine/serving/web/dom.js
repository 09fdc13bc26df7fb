// ragspine search page: DOM building and formatting helpers, shared by every module.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

export const $ = (id) => document.getElementById(id);
export const enc = encodeURIComponent;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** createElement with properties; children are Nodes or strings (appended as Text). */
export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k.startsWith("aria-") || k === "role" || k === "title" || k === "alt" || k === "for") {
      node.setAttribute(k, String(v));
    } else node[k] = v;
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

export function fmtScore(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "—";
  return Math.abs(v) < 1 ? v.toFixed(4) : v.toFixed(2);
}

export function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(0)} KB`;
  return `${(n / (1 << 20)).toFixed(1)} MB`;
}

export function pageList(pages) {
  return pages.length === 1 ? `Page ${pages[0]}` : `Pages ${pages.slice(0, -1).join(", ")} and ${pages[pages.length - 1]}`;
}
