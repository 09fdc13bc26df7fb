// ragspine search page: notices above the results (errors, degraded answers, relaxed filters).
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

import { $, el } from "./dom.js";
import { ApiError } from "./api.js";

export function clearNotices() { $("notices").replaceChildren(); }

export function notice(kind, title, ...body) {
  const box = el("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" },
    el("strong", { class: "notice-title", text: title }), " ", ...body);
  $("notices").append(box);
  return box;
}

export function showError(err) {
  const e = err instanceof ApiError ? err : new ApiError(0, "Unexpected error", String(err && err.message || err));
  const box = notice("error", e.title, el("span", { class: "detail", text: e.detail }));
  box.dataset.status = String(e.status);
  if (e.status === 401 || e.status === 403) {
    box.append(el("span", { class: "hint", text: " Set an API key (top right) that may use this library." }));
    $("key-panel").open = true;
    $("api-key").focus();
  }
}
