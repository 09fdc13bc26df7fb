// ragspine search page: the REST API client (the key, problem+json errors, uploads) and the
// page images fetched with the key and shown as blob: URLs.
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { enc } from "./dom.js";

/** sessionStorage key of the API key (kept for this tab only). */
const KEY_STORAGE = "ragspine.apiKey";
/** Page images kept as blob: URLs. */
const THUMB_CACHE_MAX = 400;

export class ApiError extends Error {
  constructor(status, title, detail, type) {
    super(detail);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.type = type || "";
  }
}

export function apiKey() {
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

export async function api(path, opts = {}) {
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
export function xhrUpload(path, form, onProgress) {
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

export function thumbURL(lib, doc, page) {
  return `/v1/libraries/${enc(lib)}/documents/${enc(doc)}/pages/${page}/thumbnail`;
}

/** Keep ``k`` as this tab's API key; an empty ``k`` forgets it. */
export function setApiKey(k) {
  if (k) sessionStorage.setItem(KEY_STORAGE, k); else sessionStorage.removeItem(KEY_STORAGE);
}

// -- page images ------------------------------------------------------------------------

const thumbCache = new Map(); // url -> Promise<string | null>  (null: 404, page not available)

export function loadImage(url) {
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

export function dropImageCache() {
  for (const p of thumbCache.values()) p.then((u) => u && URL.revokeObjectURL(u)).catch(() => {});
  thumbCache.clear();
}
