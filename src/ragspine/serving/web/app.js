// ragspine search page: a client of the public REST API only, no build step. This module starts
// the page; the others are ES modules it imports (the CSP's script-src 'self' allows them).
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $ } from "./dom.js";
import { apiKey, dropImageCache, setApiKey } from "./api.js";
import { refreshDocs, refreshLibraries } from "./library.js";
import { clearNotices, showError } from "./notices.js";
import { runSearch } from "./search.js";
import { state } from "./state.js";
import { bindUpload } from "./upload.js";
import { bindViewer } from "./viewer.js";

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
    setApiKey($("api-key").value.trim());
    $("key-panel").open = false;
    showKeyState();
    dropImageCache();
    reloadAll();
  });
  $("key-clear").addEventListener("click", () => {
    setApiKey("");
    $("api-key").value = "";
    showKeyState();
    dropImageCache();
    reloadAll();
  });
  bindViewer();
  bindUpload();
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
