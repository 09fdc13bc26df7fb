// ragspine search page: uploading a PDF with its metadata, and following its ingest job (both phases).
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $, el, enc, fmtBytes, pageList, sleep } from "./dom.js";
import { ApiError, api, xhrUpload } from "./api.js";
import { NEW_LIBRARY, refreshDocs, refreshLibraries } from "./library.js";

/** How often a running ingest job is polled. */
const POLL_MS = 250;
/** The PDF chosen or dropped, until it is uploaded. */
let pendingFile = null;

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

/** The upload dialog's controls, and a PDF dragged anywhere onto the page. */
export function bindUpload() {
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
