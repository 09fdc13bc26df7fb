// ragspine search page: a client of the public REST API only, no build step.
//
// Safety rule for this file: every string that comes from the API or the user reaches the DOM
// through textContent, Text nodes or attribute properties, never through innerHTML or
// insertAdjacentHTML. Query terms are marked by splitting text into Text nodes and <mark>
// elements, so there is nothing to escape and nothing to unescape.
(() => {
  "use strict";

  // -- constants --------------------------------------------------------------------------

  /** sessionStorage key of the API key (kept for this tab only). */
  const KEY_STORAGE = "ragspine.apiKey";
  /** Select value meaning "search every library this key may use". Not a valid library name. */
  const ALL_LIBRARIES = "*";
  /** Select value of the upload form's "new library" entry. */
  const NEW_LIBRARY = "*new*";
  /** How often a running ingest job is polled. */
  const POLL_MS = 250;
  /** Page images kept as blob: URLs. */
  const THUMB_CACHE_MAX = 400;
  /** Metadata fields shown first among the filter chips; the rest follow alphabetically. */
  const FIELD_ORDER = ["entity", "period", "topic", "geography", "language", "sensitivity"];
  /** Fields that are never chips: one value per document, nothing to narrow by. */
  const NO_CHIP_FIELDS = new Set(["title", "doc_id"]);
  const MAX_CHIPS_PER_FIELD = 24;
  /** Channel names as shown next to their scores. */
  const CHANNEL_LABELS = {
    bm25: "BM25 passage", bm25_page: "BM25 page", dense: "dense", visual: "visual",
    fused: "fused (RRF)", rerank: "rerank",
  };
  /** Similarity-map image of a page for a query, relative to the page's URL (issue 4). */
  const EXPLAIN_SUFFIX = "similarity-map";
  // CJK ideographs as the server's tokenizer sees them (ragspine.retrieval.tokenizer).
  const CJK = "\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\u{20000}-\\u{2ebef}";
  const TOKEN_RE = new RegExp(`[a-z0-9]+|[${CJK}]+`, "gu");
  const CJK_RE = new RegExp(`^[${CJK}]`, "u");

  // -- state ------------------------------------------------------------------------------

  const state = {
    libraries: [],            // [{name, documents, pages}]
    docs: new Map(),          // "lib\0doc" -> document entry (+ .library)
    filters: new Map(),       // field -> Map(valueKey -> raw value)
    lastRequest: null,        // the body of the last search sent
    pageModel: false,         // /readyz reports a page model: the explain toggle exists
    searchSeq: 0,
  };
  const viewer = { hit: null, doc: null, page: 0, terms: null };
  let pendingFile = null;

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const docKey = (lib, doc) => `${lib}\u0000${doc}`;

  // -- DOM helpers ------------------------------------------------------------------------

  /** createElement with properties; children are Nodes or strings (appended as Text). */
  function el(tag, props, ...children) {
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

  function fmtScore(v) {
    if (typeof v !== "number" || !Number.isFinite(v)) return "—";
    return Math.abs(v) < 1 ? v.toFixed(4) : v.toFixed(2);
  }

  function fmtBytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1 << 20) return `${(n / 1024).toFixed(0)} KB`;
    return `${(n / (1 << 20)).toFixed(1)} MB`;
  }

  function pageList(pages) {
    return pages.length === 1 ? `Page ${pages[0]}` : `Pages ${pages.slice(0, -1).join(", ")} and ${pages[pages.length - 1]}`;
  }

  // -- API --------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, title, detail, type) {
      super(detail);
      this.status = status;
      this.title = title;
      this.detail = detail;
      this.type = type || "";
    }
  }

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  function authHeaders() {
    const k = apiKey();
    return k ? { Authorization: `Bearer ${k}` } : {};
  }

  async function problemOf(resp) {
    let data = null;
    if ((resp.headers.get("content-type") || "").includes("json")) {
      try { data = await resp.json(); } catch { data = null; }
    }
    const detail = data && typeof data.detail === "string" && data.detail ? data.detail
      : `the server answered ${resp.status} ${resp.statusText}`.trim();
    const title = data && typeof data.title === "string" && data.title ? data.title : "Request failed";
    return new ApiError(resp.status, title, detail, data && data.type);
  }

  async function api(path, opts = {}) {
    const headers = { Accept: "application/json", ...authHeaders() };
    let body = opts.body;
    if (opts.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.json);
    }
    let resp;
    try {
      resp = await fetch(path, { method: opts.method || "GET", headers, body });
    } catch (e) {
      throw new ApiError(0, "Network error", `the server could not be reached (${e.message})`);
    }
    if (!resp.ok) throw await problemOf(resp);
    if (resp.status === 204) return null;
    return resp.json();
  }

  /** POST a multipart form with upload progress (fetch cannot report it). */
  function xhrUpload(path, form, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", path);
      xhr.setRequestHeader("Accept", "application/json");
      for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
      xhr.responseType = "text";
      xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
      xhr.onerror = () => reject(new ApiError(0, "Network error", "the upload could not reach the server"));
      xhr.onload = () => {
        let data = null;
        try { data = JSON.parse(xhr.responseText); } catch { data = null; }
        if (xhr.status >= 200 && xhr.status < 300 && data) { resolve(data); return; }
        const detail = data && typeof data.detail === "string" ? data.detail : `the server answered ${xhr.status}`;
        reject(new ApiError(xhr.status, (data && data.title) || "Upload failed", detail, data && data.type));
      };
      xhr.send(form);
    });
  }

  function thumbURL(lib, doc, page) {
    return `/v1/libraries/${enc(lib)}/documents/${enc(doc)}/pages/${page}/thumbnail`;
  }

  // -- page images (fetched with the API key, shown as blob: URLs) -------------------------

  const thumbCache = new Map(); // url -> Promise<string | null>  (null: 404, page not available)

  function loadImage(url) {
    const hit = thumbCache.get(url);
    if (hit) {
      thumbCache.delete(url); // most recently used last
      thumbCache.set(url, hit);
      return hit;
    }
    const p = fetch(url, { headers: authHeaders() }).then(async (r) => {
      if (r.status === 404) return null;
      if (!r.ok) throw await problemOf(r);
      return URL.createObjectURL(await r.blob());
    });
    p.catch(() => thumbCache.delete(url));
    thumbCache.set(url, p);
    while (thumbCache.size > THUMB_CACHE_MAX) {
      const [oldUrl, old] = thumbCache.entries().next().value;
      thumbCache.delete(oldUrl);
      old.then((u) => u && URL.revokeObjectURL(u)).catch(() => {});
    }
    return p;
  }

  function dropImageCache() {
    for (const p of thumbCache.values()) p.then((u) => u && URL.revokeObjectURL(u)).catch(() => {});
    thumbCache.clear();
  }

  /** [width, height] in PDF points of a page, from the document entry; null if unknown. */
  function pageSize(doc, page) {
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
  function pageFrame({ url, page, size, bbox, cls, extraOverlay }) {
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

  // -- query-term marking -----------------------------------------------------------------

  /** The query's terms as the server's tokenizer makes them: lower-cased ASCII words, CJK
   *  bigrams of runs of two or more ideographs, and single ideographs standing alone. */
  function queryTerms(query) {
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
  function passageNode(text, terms, cls) {
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

  // -- notices ----------------------------------------------------------------------------

  function clearNotices() { $("notices").replaceChildren(); }

  function notice(kind, title, ...body) {
    const box = el("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" },
      el("strong", { class: "notice-title", text: title }), " ", ...body);
    $("notices").append(box);
    return box;
  }

  function showError(err) {
    const e = err instanceof ApiError ? err : new ApiError(0, "Unexpected error", String(err && err.message || err));
    const box = notice("error", e.title, el("span", { class: "detail", text: e.detail }));
    box.dataset.status = String(e.status);
    if (e.status === 401 || e.status === 403) {
      box.append(el("span", { class: "hint", text: " Set an API key (top right) that may use this library." }));
      $("key-panel").open = true;
      $("api-key").focus();
    }
  }

  // -- libraries, documents and filter chips -----------------------------------------------

  function selectedLibraries() {
    const v = $("library").value;
    if (v === ALL_LIBRARIES) return state.libraries.map((l) => l.name);
    return v ? [v] : [];
  }

  function fillLibrarySelects(preferred) {
    const sel = $("library"), up = $("up-library");
    const current = preferred || sel.value;
    const upCurrent = up.value;
    const names = state.libraries.map((l) => l.name);
    sel.replaceChildren(...state.libraries.map((l) =>
      el("option", { value: l.name, text: `${l.name} (${l.documents} doc${l.documents === 1 ? "" : "s"})` })));
    if (names.length > 1) sel.append(el("option", { value: ALL_LIBRARIES, text: "All libraries" }));
    if (!names.length) sel.append(el("option", { value: "", text: "(no libraries)", disabled: true }));
    sel.value = (current === ALL_LIBRARIES && names.length > 1) || names.includes(current) ? current
      : names.includes("demo") ? "demo" : (names[0] || "");
    up.replaceChildren(...names.map((n) => el("option", { value: n, text: n })),
      el("option", { value: NEW_LIBRARY, text: "New library…" }));
    up.value = names.includes(upCurrent) ? upCurrent
      : names.includes(sel.value) ? sel.value : (names[0] || NEW_LIBRARY);
    $("up-new-library").hidden = up.value !== NEW_LIBRARY;
  }

  async function refreshLibraries(preferred) {
    const data = await api("/v1/libraries");
    state.libraries = Array.isArray(data.libraries) ? data.libraries : [];
    fillLibrarySelects(preferred);
  }

  async function refreshDocs() {
    const libs = selectedLibraries();
    const lists = await Promise.all(libs.map((lib) =>
      api(`/v1/libraries/${enc(lib)}/documents`)
        .then((d) => (d.documents || []).map((x) => ({ ...x, library: lib })))
        .catch((e) => { showError(e); return []; })));
    state.docs = new Map();
    for (const d of lists.flat()) state.docs.set(docKey(d.library, d.doc_id), d);
    renderFilters();
  }

  async function docEntry(lib, doc) {
    const k = docKey(lib, doc);
    if (!state.docs.has(k)) {
      try {
        const d = await api(`/v1/libraries/${enc(lib)}/documents/${enc(doc)}`);
        state.docs.set(k, { ...d, library: lib });
      } catch { return null; }
    }
    return state.docs.get(k);
  }

  const valueKey = (v) => `${typeof v}:${String(v)}`;
  const valueLabel = (v) => (typeof v === "boolean" ? (v ? "yes" : "no") : String(v));
  const fieldLabel = (f) => f.replace(/_/g, " ");

  /** field -> Map(valueKey -> {value, count}) over the documents of the selected libraries.
   *  Float fields have no chips (the API refuses exact float matches). */
  function chipFields() {
    const fields = new Map(), floats = new Set();
    for (const d of state.docs.values()) {
      for (const [field, raw] of Object.entries(d.metadata || {})) {
        if (NO_CHIP_FIELDS.has(field)) continue;
        const seen = new Set();
        for (const v of Array.isArray(raw) ? raw : [raw]) {
          if (typeof v === "number" && !Number.isInteger(v)) floats.add(field);
          if (!["string", "number", "boolean"].includes(typeof v)) continue;
          const k = valueKey(v);
          if (seen.has(k)) continue;
          seen.add(k);
          if (!fields.has(field)) fields.set(field, new Map());
          const m = fields.get(field);
          m.set(k, { value: v, count: (m.has(k) ? m.get(k).count : 0) + 1 });
        }
      }
    }
    for (const f of floats) fields.delete(f);
    return fields;
  }

  function renderFilters() {
    const box = $("filters");
    const fields = chipFields();
    // Selections on fields or values no longer present are dropped, never silently kept.
    for (const [field, sel] of state.filters) {
      for (const k of sel.keys()) if (!fields.get(field) || !fields.get(field).has(k)) sel.delete(k);
      if (!sel.size) state.filters.delete(field);
    }
    const order = (f) => (FIELD_ORDER.includes(f) ? FIELD_ORDER.indexOf(f) : FIELD_ORDER.length);
    const names = [...fields.keys()]
      .filter((f) => fields.get(f).size >= 2 || state.filters.has(f))
      .sort((a, b) => order(a) - order(b) || a.localeCompare(b));
    const groups = names.map((field) => {
      const sel = state.filters.get(field) || new Map();
      const values = [...fields.get(field).entries()]
        .sort((a, b) => String(a[1].value).localeCompare(String(b[1].value), undefined, { numeric: true }))
        .slice(0, MAX_CHIPS_PER_FIELD);
      return el("div", { class: "chip-group", role: "group", "aria-label": fieldLabel(field) },
        el("span", { class: "chip-field", text: fieldLabel(field) }),
        values.map(([k, { value, count }]) => el("button", {
          type: "button", class: "chip", "aria-pressed": sel.has(k) ? "true" : "false",
          dataset: { field, value: String(value) }, title: `${count} document${count === 1 ? "" : "s"}`,
          onclick: () => toggleFilter(field, k, value),
        }, valueLabel(value))));
    });
    if (state.filters.size) {
      groups.push(el("button", { type: "button", class: "chip clear", onclick: clearFilters }, "Clear filters"));
    }
    box.replaceChildren(...groups);
    box.hidden = !groups.length;
  }

  function toggleFilter(field, key, value) {
    const sel = state.filters.get(field) || new Map();
    if (sel.has(key)) sel.delete(key); else sel.set(key, value);
    if (sel.size) state.filters.set(field, sel); else state.filters.delete(field);
    renderFilters();
    if (state.lastRequest) runSearch();
  }

  function clearFilters() {
    state.filters.clear();
    renderFilters();
    if (state.lastRequest) runSearch();
  }

  /** One predicate per field: eq for one value, in for several (fields are ANDed). */
  function buildFilters() {
    const out = [];
    for (const [field, sel] of state.filters) {
      const values = [...sel.values()];
      out.push(values.length === 1 ? { field, op: "eq", value: values[0] } : { field, op: "in", value: values });
    }
    return out;
  }

  // -- search -----------------------------------------------------------------------------

  function setResultsState(s) { $("results").dataset.state = s; }

  async function runSearch() {
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
    const terms = queryTerms(req.query);
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
      box.replaceChildren(el("div", { class: "empty" }, el("h2", { text: "No results" }),
        el("p", {}, `Nothing in ${req.libraries.join(", ")} matches “${req.query}”${req.filters.length ? " with these filters" : ""}.`), tips));
      setResultsState("empty");
      return;
    }
    box.replaceChildren(...hits.map((h, i) => hitCard(h, i, terms)));
    setResultsState("done");
  }

  function scoreList(scores) {
    const items = Object.entries(scores || {}).filter(([, v]) => typeof v === "number");
    return el("dl", { class: "scores" }, items.map(([k, v]) => el("div", { class: "score", dataset: { channel: k } },
      el("dt", { text: CHANNEL_LABELS[k] || k }), el("dd", { text: fmtScore(v) }))));
  }

  function hitCard(h, i, terms) {
    const doc = state.docs.get(docKey(h.library_id, h.doc_id));
    const meta = h.metadata || {};
    const badges = ["entity", "period", "language"].filter((k) => meta[k] !== undefined && meta[k] !== null)
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
          el("span", { class: "page-no", text: `page ${h.page}${doc && doc.pages_total ? ` of ${doc.pages_total}` : ""}` }),
          el("span", { class: "doc-id", text: `${h.library_id} / ${h.doc_id}` }), badges),
        passageNode(String(h.text || ""), terms, "passage"),
        scoreList(h.scores)));
  }

  // -- page viewer ------------------------------------------------------------------------

  async function openViewer(hit, terms) {
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
      ? explainOverlay(`${url.slice(0, -"thumbnail".length)}${EXPLAIN_SUFFIX}?query=${enc(state.lastRequest.query)}`) : null;
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

  // -- upload -----------------------------------------------------------------------------

  function isPdf(f) {
    return f && (f.type === "application/pdf" || /\.pdf$/i.test(f.name || ""));
  }

  function setFile(f) {
    const status = $("upload-status");
    if (!isPdf(f)) {
      status.textContent = f ? `“${f.name}” is not a PDF` : "";
      return;
    }
    pendingFile = f;
    $("file-name").textContent = `${f.name} · ${fmtBytes(f.size)}`;
    $("drop-zone").classList.add("has-file");
    status.textContent = "";
    $("upload-result").replaceChildren();
  }

  function openUpload() {
    const dlg = $("upload");
    if (!dlg.open) dlg.showModal();
  }

  /** "3, 5, 7-9" -> {3: "RESTRICTED", 5: ..., 7: ..., 8: ..., 9: ...} */
  function restrictedPages(text) {
    const out = {};
    for (const part of text.split(/[\s,;]+/).filter(Boolean)) {
      const m = /^(\d+)(?:-(\d+))?$/.exec(part);
      if (!m) throw new Error(`RESTRICTED pages: “${part}” is not a page number or range like 7-9`);
      const a = Number(m[1]), b = Number(m[2] || m[1]);
      if (a < 1 || b < a || b - a > 10000) throw new Error(`RESTRICTED pages: “${part}” is not a valid range (pages start at 1)`);
      for (let p = a; p <= b; p++) out[p] = "RESTRICTED";
    }
    return out;
  }

  function buildMetadata() {
    let meta = {};
    const extra = $("up-extra").value.trim();
    if (extra) {
      try { meta = JSON.parse(extra); } catch (e) { throw new Error(`More metadata is not valid JSON: ${e.message}`); }
      if (!meta || typeof meta !== "object" || Array.isArray(meta)) throw new Error("More metadata must be a JSON object");
    }
    for (const f of ["title", "entity", "topic", "language", "geography"]) {
      const v = $(`up-${f}`).value.trim();
      if (v) meta[f] = v;
    }
    const period = $("up-period").value.trim();
    if (period) meta.period = /^\d{1,9}$/.test(period) ? Number(period) : period;
    const sens = $("up-sensitivity").value;
    if (sens) meta.sensitivity = sens;
    const pages = restrictedPages($("up-restricted-pages").value);
    if (Object.keys(pages).length) meta.page_sensitivity = { ...(meta.page_sensitivity || {}), ...pages };
    return meta;
  }

  function progress(value, max) {
    const bar = $("upload-progress");
    bar.hidden = false;
    if (max > 0) { bar.max = max; bar.value = value; } else bar.removeAttribute("value");
  }

  async function pollJob(id) {
    for (;;) {
      const job = await api(`/v1/jobs/${enc(id)}`);
      if (job.pages_total) {
        progress(job.pages_done, job.pages_total);
        $("upload-status").textContent = `Indexing: page ${job.pages_done} of ${job.pages_total}`;
      } else {
        progress(0, 0);
        $("upload-status").textContent = job.state === "queued" ? "Queued…" : "Reading the PDF…";
      }
      if (job.state === "succeeded" || job.state === "failed") return job;
      await sleep(POLL_MS);
    }
  }

  function renderJob(job) {
    const out = $("upload-result");
    out.dataset.state = job.state;
    if (job.state === "failed") {
      const e = job.error || {};
      out.replaceChildren(el("div", { class: "notice error", role: "alert" },
        el("strong", { class: "notice-title", text: e.title || "Ingest failed" }),
        el("span", { class: "detail", text: e.detail || "the ingest failed" })));
      return;
    }
    const r = job.result || {};
    const lines = [];
    if (r.status === "dropped_by_policy") {
      lines.push(el("p", { class: "ok", text: "The document is RESTRICTED: nothing was indexed." }));
    } else if (r.status === "ocr_pending") {
      lines.push(el("p", { class: "ok", text: `Every page of “${r.doc_id}” needs OCR: nothing is searchable until it is read.` }));
    } else if (r.status === "unchanged") {
      lines.push(el("p", { class: "ok", text: `“${r.doc_id}” is already indexed with the same content: nothing changed.` }));
    } else {
      lines.push(el("p", { class: "ok", text: `Indexed “${r.doc_id}” into ${r.library}: ${r.pages_indexed} of ${r.pages_total} pages, ${r.chunks} passages.` }));
    }
    const dropped = Array.isArray(job.pages_dropped) ? job.pages_dropped : [];
    if (dropped.length) {
      lines.push(el("p", { class: "dropped", dataset: { pages: dropped.join(",") } },
        `${pageList(dropped)} ${dropped.length === 1 ? "was" : "were"} dropped by the RESTRICTED policy and will not be searchable.`));
    }
    for (const w of r.warnings || []) lines.push(el("p", { class: "warn-line", text: String(w) }));
    // Two-phase ingest: the pages above are live; the pages that need OCR follow.
    out.dataset.ocr = job.ocr || "none";
    if (job.ocr === "pending") {
      const owed = Array.isArray(r.ocr_pending_pages) ? r.ocr_pending_pages : [];
      const read = job.ocr_pages_total ? ` (${job.ocr_pages_done} of ${job.ocr_pages_total} read)` : "";
      const what = owed.length ? pageList(owed).toLowerCase() : "the remaining pages";
      lines.push(el("p", { class: "ocr-line", text: `OCR of ${what} follows${read}; the pages above are searchable now.` }));
    } else if (job.ocr === "done" && job.ocr_result) {
      const o = job.ocr_result;
      lines.push(el("p", { class: "ocr-line ok", text: `OCR done: ${o.pages_indexed} of ${o.pages_total} pages searchable, ${o.pages_ocr} read by OCR.` }));
    } else if (job.ocr === "failed") {
      const e = job.ocr_error || {};
      lines.push(el("p", { class: "ocr-line warn-line", text: `OCR failed: ${e.detail || "see the server log"}. The pages above stay searchable.` }));
    }
    out.replaceChildren(...lines);
  }

  /** After a job succeeded on its first phase: follow its OCR until it ends. */
  async function followOcr(job) {
    while (job.ocr === "pending") {
      await sleep(POLL_MS);
      job = await api(`/v1/jobs/${enc(job.id)}`);
      renderJob(job);
    }
    return job;
  }

  async function submitUpload(e) {
    e.preventDefault();
    const status = $("upload-status");
    const out = $("upload-result");
    out.replaceChildren();
    delete out.dataset.state;
    if (!pendingFile) { status.textContent = "Choose or drop a PDF first."; return; }
    let meta;
    try { meta = buildMetadata(); } catch (err) { status.textContent = err.message; return; }
    const button = $("upload-submit");
    button.disabled = true;
    try {
      let lib = $("up-library").value;
      if (lib === NEW_LIBRARY) {
        lib = $("up-new-library").value.trim();
        status.textContent = `Creating library ${lib}…`;
        await api("/v1/libraries", { method: "POST", json: { name: lib } });
      }
      const form = new FormData();
      form.append("file", pendingFile, pendingFile.name);
      form.append("metadata", JSON.stringify(meta));
      status.textContent = "Uploading…";
      progress(0, pendingFile.size);
      const job = await xhrUpload(`/v1/libraries/${enc(lib)}/documents`, form, (done, total) => {
        progress(done, total);
        status.textContent = `Uploading: ${Math.round((100 * done) / total)}%`;
      });
      const final = await pollJob(job.id);
      status.textContent = final.state === "succeeded" ? "Done." : "Failed.";
      renderJob(final);
      if (final.state === "succeeded") {
        await refreshLibraries();
        await refreshDocs();
        if (final.ocr === "pending") {
          await followOcr(final);
          await refreshDocs();
        }
      }
    } catch (err) {
      const ae = err instanceof ApiError ? err : new ApiError(0, "Upload failed", String(err.message || err));
      status.textContent = "Failed.";
      out.dataset.state = "failed";
      out.replaceChildren(el("div", { class: "notice error", role: "alert" },
        el("strong", { class: "notice-title", text: ae.title }), el("span", { class: "detail", text: ae.detail })));
    } finally {
      button.disabled = false;
      $("upload-progress").hidden = true;
    }
  }

  // -- readiness (page model -> explain toggle) --------------------------------------------

  /** The explain toggle needs a page model; it exists only when /readyz says one is loaded
   *  (``checks.page_model`` starting with "ok"). */
  async function checkReady() {
    let pm = null;
    try {
      const r = await fetch("/readyz", { headers: { Accept: "application/json" } });
      const data = await r.json();
      pm = data && data.checks ? data.checks.page_model : null;
    } catch { pm = null; }
    state.pageModel = typeof pm === "string" && /^ok\b/i.test(pm);
    // A second toggle sits in the viewer: the modal dialog makes the toolbar's unreachable.
    $("explain").hidden = $("viewer-explain").hidden = !state.pageModel;
  }

  // -- wiring -----------------------------------------------------------------------------

  function showKeyState() {
    $("key-summary").textContent = apiKey() ? "API key ✓" : "API key";
  }

  async function reloadAll() {
    clearNotices();
    try {
      await refreshLibraries();
      await refreshDocs();
    } catch (err) { showError(err); }
  }

  function bind() {
    $("search-form").addEventListener("submit", (e) => { e.preventDefault(); runSearch(); });
    $("library").addEventListener("change", async () => {
      state.filters.clear();
      await refreshDocs();
      if (state.lastRequest) runSearch();
    });
    $("mode").addEventListener("change", () => { if (state.lastRequest) runSearch(); });
    $("top-k").addEventListener("change", () => { if (state.lastRequest) runSearch(); });
    $("key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const k = $("api-key").value.trim();
      if (k) sessionStorage.setItem(KEY_STORAGE, k); else sessionStorage.removeItem(KEY_STORAGE);
      $("key-panel").open = false;
      showKeyState();
      dropImageCache();
      reloadAll();
    });
    $("key-clear").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      $("api-key").value = "";
      showKeyState();
      dropImageCache();
      reloadAll();
    });

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

    $("upload-open").addEventListener("click", openUpload);
    $("upload-close").addEventListener("click", () => $("upload").close());
    $("upload-form").addEventListener("submit", submitUpload);
    $("file").addEventListener("change", (e) => setFile(e.target.files[0]));
    $("up-library").addEventListener("change", () => {
      $("up-new-library").hidden = $("up-library").value !== NEW_LIBRARY;
    });
    const zone = $("drop-zone");
    zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (e) => {
      e.preventDefault();
      zone.classList.remove("over");
      setFile(e.dataTransfer && e.dataTransfer.files[0]);
    });
    // A PDF dragged anywhere onto the page opens the upload form with it.
    const veil = $("drag-veil");
    const carriesFiles = (e) => e.dataTransfer && [...(e.dataTransfer.types || [])].includes("Files");
    document.addEventListener("dragover", (e) => {
      if (!carriesFiles(e)) return;
      e.preventDefault(); // else the browser would leave the page to show the dropped file
      if (!$("upload").open) veil.hidden = false;
    });
    veil.addEventListener("dragleave", () => { veil.hidden = true; });
    document.addEventListener("drop", (e) => {
      veil.hidden = true;
      if (e.defaultPrevented || !carriesFiles(e)) return;
      e.preventDefault();
      openUpload();
      setFile(e.dataTransfer.files[0]);
    });
  }

  async function init() {
    bind();
    $("api-key").value = apiKey();
    showKeyState();
    const params = new URLSearchParams(location.search);
    if (params.get("q")) $("q").value = params.get("q");
    const mode = params.get("mode");
    if (mode && [...$("mode").options].some((o) => o.value === mode)) $("mode").value = mode;
    await checkReady();
    try {
      await refreshLibraries(params.get("lib") || undefined);
      await refreshDocs();
    } catch (err) { showError(err); }
    if ($("q").value.trim()) await runSearch();
    document.body.dataset.ready = "true";
  }

  init();
})();
