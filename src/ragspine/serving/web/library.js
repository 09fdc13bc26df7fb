// ragspine search page: libraries, their documents, and the metadata filter chips.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $, el, enc } from "./dom.js";
import { api } from "./api.js";
import { showError } from "./notices.js";
import { runSearch } from "./search.js";
import { docKey, state } from "./state.js";

/** Select value meaning "search every library this key may use". Not a valid library name. */
const ALL_LIBRARIES = "*";
/** Select value of the upload form's "new library" entry. */
export const NEW_LIBRARY = "*new*";
/** Metadata fields shown first among the filter chips; the rest follow alphabetically. */
const FIELD_ORDER = ["entity", "period", "topic", "geography", "language", "sensitivity"];
/** Fields that are never chips: one value per document, nothing to narrow by. */
const NO_CHIP_FIELDS = new Set(["title", "doc_id"]);
const MAX_CHIPS_PER_FIELD = 24;

export function selectedLibraries() {
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

export async function refreshLibraries(preferred) {
  const data = await api("/v1/libraries");
  state.libraries = Array.isArray(data.libraries) ? data.libraries : [];
  fillLibrarySelects(preferred);
}

export async function refreshDocs() {
  const libs = selectedLibraries();
  const lists = await Promise.all(libs.map((lib) =>
    api(`/v1/libraries/${enc(lib)}/documents`)
      .then((d) => (d.documents || []).map((x) => ({ ...x, library: lib })))
      .catch((e) => { showError(e); return []; })));
  state.docs = new Map();
  for (const d of lists.flat()) state.docs.set(docKey(d.library, d.doc_id), d);
  renderFilters();
}

export async function docEntry(lib, doc) {
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
export const valueLabel = (v) => (typeof v === "boolean" ? (v ? "yes" : "no") : String(v));
export const fieldLabel = (f) => f.replace(/_/g, " ");

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

export function toggleFilter(field, key, value) {
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
export function buildFilters() {
  const out = [];
  for (const [field, sel] of state.filters) {
    const values = [...sel.values()];
    out.push(values.length === 1 ? { field, op: "eq", value: values[0] } : { field, op: "in", value: values });
  }
  return out;
}
