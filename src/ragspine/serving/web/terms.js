// ragspine search page: the query's terms as the server's tokenizer makes them, marked in passages.
// Terms are marked by splitting text into Text nodes and <mark> elements, so there is nothing to
// escape and nothing to unescape.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { el } from "./dom.js";

// CJK ideographs as the server's tokenizer sees them (ragspine.retrieval.tokenizer).
const CJK = "\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\u{20000}-\\u{2ebef}";
const TOKEN_RE = new RegExp(`[a-z0-9]+|[${CJK}]+`, "gu");
const CJK_RE = new RegExp(`^[${CJK}]`, "u");

/** The query's terms as the server's tokenizer makes them: lower-cased ASCII words, CJK
 *  bigrams of runs of two or more ideographs, and single ideographs standing alone. */
export function queryTerms(query) {
  const words = new Set(), bigrams = new Set(), singles = new Set();
  for (const m of query.normalize("NFKC").toLowerCase().matchAll(TOKEN_RE)) {
    const run = m[0];
    if (CJK_RE.test(run)) {
      const cps = Array.from(run);
      if (cps.length === 1) singles.add(cps[0]);
      for (let i = 0; i + 1 < cps.length; i++) bigrams.add(cps[i] + cps[i + 1]);
    } else words.add(run);
  }
  return { words, bigrams, singles };
}

/** Character ranges [start, end) of ``text`` (UTF-16 offsets) that match a query term. */
function termRanges(text, terms) {
  // Fold per code point (NFKC + lower case) where that keeps the length, so offsets in the
  // folded text are offsets in the original: full-width ＡＢＣ１２３ match abc123.
  const folded = Array.from(text, (c) => {
    const f = c.normalize("NFKC").toLowerCase();
    return f.length === c.length ? f : c;
  }).join("");
  const ranges = [];
  for (const m of folded.matchAll(TOKEN_RE)) {
    const run = m[0], at = m.index;
    if (!CJK_RE.test(run)) {
      if (terms.words.has(run)) ranges.push([at, at + run.length]);
      continue;
    }
    const cps = Array.from(run);
    const offs = [];
    let o = at;
    for (const c of cps) { offs.push(o); o += c.length; }
    offs.push(o);
    const on = new Array(cps.length).fill(false);
    for (let i = 0; i < cps.length; i++) {
      if (terms.singles.has(cps[i])) on[i] = true;
      if (i + 1 < cps.length && terms.bigrams.has(cps[i] + cps[i + 1])) on[i] = on[i + 1] = true;
    }
    for (let i = 0; i < cps.length;) {
      if (!on[i]) { i++; continue; }
      let j = i;
      while (j < cps.length && on[j]) j++;
      ranges.push([offs[i], offs[j]]);
      i = j;
    }
  }
  return ranges;
}

/** A passage as one <span class="para"> per paragraph (the page text separates paragraphs
 *  with a blank line), query terms marked. Tokens never span a blank line, so marking each
 *  paragraph alone marks the same terms as marking the whole. */
export function passageNode(text, terms, cls) {
  return el("p", { class: cls }, text.split(/\n[ \t]*\n/).filter((t) => t.trim())
    .map((t) => el("span", { class: "para" }, marked(t, terms))));
}

/** ``text`` as Text nodes with the query terms wrapped in <mark>. */
function marked(text, terms) {
  const frag = document.createDocumentFragment();
  let pos = 0;
  for (const [a, b] of termRanges(text, terms)) {
    if (a > pos) frag.append(text.slice(pos, a));
    frag.append(el("mark", { text: text.slice(a, b) }));
    pos = b;
  }
  if (pos < text.length) frag.append(text.slice(pos));
  return frag;
}
