"""The GPU path's table, from what ``bench/gpu_checks.sh`` wrote, judged against its targets.

    python3 bench/gpu_table.py DIR        # DIR: the steps' JSON (gpu_checks.sh's work folder)

Reads ``encode.json`` and ``encode2.json`` (``bench/encode.py``: the four page-model
architectures), ``encode_prep.json`` (ColPali's pages prepared in processes), ``serve.json``
(``bench/serve_load.py --threads``: queries a second through the server, and on what) and ``maxsim.json``
(``bench/maxsim_device.py``), whichever exist, and prints in Markdown:

1. per architecture, before (the H200 runs of 2026-12-04, docs/measured.md "GPU anchors") and
   now: the model alone, ``encode_pages`` and ``Engine.ingest`` in pages/s (with their ratio to
   the model alone), and one query's p50 on transformers' plain forward and on the path ragspine
   takes;
2. each target of the GPU work with its figure and ``met``, ``NOT met`` or ``not measured`` (a
   step that did not run or a figure it did not print is never counted as met);
3. where a page's and a query's time goes, what bounds each ingest, and the server's rows.

Standard library only: it runs on the device machine before and after any wheel is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ARCHS = ("colpali", "colqwen2", "colqwen2_5", "colidefics3")
NAMES = {"colpali": "ColPali", "colqwen2": "ColQwen2", "colqwen2_5": "ColQwen2.5",
         "colidefics3": "ColIdefics3"}
#: Before: ragspine's pipeline on one H200, 2026-12-04 (docs/measured.md, "GPU anchors").
BEFORE = {
    "model_only_pages_s": {"colpali": 82.6, "colqwen2": 44.5, "colqwen2_5": 10.5, "colidefics3": 85.0},
    "encode_pages_s": {"colpali": 70.6, "colqwen2": 34.0, "colqwen2_5": 10.4, "colidefics3": 18.9},
    "ingest_pages_s": {"colpali": 13.7, "colqwen2": 11.8, "colqwen2_5": 6.0, "colidefics3": 7.6},
    "query_ms_p50": {"colpali": 66.3, "colqwen2": 65.6, "colqwen2_5": 131.0, "colidefics3": 117.0},
}
INGEST_MIN_PAGES_S = 50.0  # ColPali, PDF to searchable
MIN_SHARE_OF_MODEL = 0.6  # ingest (ColPali, ColQwen2) and encode_pages (ColIdefics3) / model alone
QUERY_MAX_MS = 20.0  # one query's p50, ColPali and ColQwen2
SERVER_MIN_QPS = 150.0  # 8 clients through the server
QWEN25_MIN_PAGES_S = 30.0  # ColQwen2.5's model alone, vision windows batched
WINDOWS_MIN_COSINE = 0.999  # ...with the vectors of the split attention


SERVE_KEYS = frozenset({"rule", "clients", "ok", "qps", "p50_ms", "p99_ms", "errors"})


def load(folder: Path) -> dict[str, Any]:
    """Every step output found in ``folder``: encode rows by architecture, and the rest by name.
    A file of another shape, or a row without its keys, is left out (and named on stderr)."""
    rows: dict[str, dict[str, Any]] = {}
    for name in ("encode.json", "encode2.json"):
        for r in _read(folder / name, list) or []:
            if isinstance(r, dict) and "arch" in r:
                rows.setdefault(str(r["arch"]).split()[0], r)
    serve = _read(folder / "serve.json", dict) or {}
    serve_rows = [r for r in serve.get("rows", []) if isinstance(r, dict) and SERVE_KEYS <= r.keys()]
    maxsim = _read(folder / "maxsim.json", dict)
    prep = [r for r in _read(folder / "encode_prep.json", list) or [] if isinstance(r, dict) and "arch" in r]
    return {"archs": rows, "prep": prep, "serve": serve_rows,
            "serve_on_gpu": str(serve.get("device", "")).startswith("cuda") and serve.get("page_size") == "full",
            "maxsim": maxsim if maxsim and isinstance(maxsim.get("rows"), list) else None}


def _read(path: Path, kind: type) -> Any:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # a step killed while writing: judge without it
        print(f"(unreadable {path.name}: {exc})", file=sys.stderr)
        return None
    if not isinstance(data, kind):
        print(f"({path.name} is not a JSON {kind.__name__}: left out)", file=sys.stderr)
        return None
    return data


def ratio(a: Any, b: Any) -> float | None:
    """a / b unrounded (a target is judged on it), None without both."""
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def fig(value: Any, prefix: str = "") -> str:
    """A figure as shown: ratios to two places, the rest as the step wrote them."""
    return "-" if value is None else f"{prefix}{round(value, 2) if prefix == 'x' else value}"


def verdict(value: Any, ok: bool | None) -> str:
    if value is None or ok is None:
        return "not measured"
    return "met" if ok else "NOT met"


def on_gpu(row: dict[str, Any]) -> bool:
    """Whether an encode row can be judged: the real architecture (or a checkpoint) on CUDA. The
    2-layer test models on a CPU time the pipeline's overhead, not a model."""
    return str(row.get("device", "")).startswith("cuda") and "tiny architecture" not in str(row["arch"])


def targets(got: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, figure, verdict) for each target of the GPU work; rows not measured on a GPU
    (``on_gpu``) count as not measured."""
    a = {arch: r for arch, r in got["archs"].items() if on_gpu(r)}

    def f(arch: str, key: str) -> Any:  # a figure, or None: a string or null is not one
        v = a.get(arch, {}).get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    out = []
    v = f("colpali", "ingest_pages_s")
    out.append((f"ColPali Engine.ingest >= {INGEST_MIN_PAGES_S:g} pages/s", fig(v),
                verdict(v, None if v is None else v >= INGEST_MIN_PAGES_S)))
    for arch in ("colpali", "colqwen2"):
        r = ratio(f(arch, "ingest_pages_s"), f(arch, "model_only_pages_s"))
        out.append((f"{NAMES[arch]} Engine.ingest >= {MIN_SHARE_OF_MODEL}x the model alone", fig(r, "x"),
                    verdict(r, None if r is None else r >= MIN_SHARE_OF_MODEL)))
    for arch in ("colpali", "colqwen2"):
        v = f(arch, "query_ms_p50")
        out.append((f"{NAMES[arch]} query p50 <= {QUERY_MAX_MS:g} ms",
                    fig(v) if v is None else f"{v} ms ({a[arch].get('query_path')})",
                    verdict(v, None if v is None else v <= QUERY_MAX_MS)))
    eight = [r for r in got["serve"] if r["clients"] == 8 and isinstance(r["qps"], (int, float))
             and isinstance(r["errors"], int)] if got["serve_on_gpu"] else []
    best = max(eight, key=lambda r: r["qps"], default=None)
    out.append((f"8 clients through the server >= {SERVER_MIN_QPS:g} q/s",
                ", ".join(f"{r['rule']} {r['qps']} q/s ({r['errors']} errors)" for r in eight) or "-",
                verdict(best, None if best is None else best["qps"] >= SERVER_MIN_QPS and best["errors"] == 0)))
    v = f("colqwen2_5", "model_only_pages_s")
    out.append((f"ColQwen2.5 model alone >= {QWEN25_MIN_PAGES_S:g} pages/s", fig(v),
                verdict(v, None if v is None else v >= QWEN25_MIN_PAGES_S)))
    v = f("colqwen2_5", "windows_min_cosine")
    out.append((f"ColQwen2.5 batched windows' vectors, cosine >= {WINDOWS_MIN_COSINE}", fig(v),
                verdict(v, None if v is None else v >= WINDOWS_MIN_COSINE)))
    r = ratio(f("colidefics3", "encode_pages_s"), f("colidefics3", "model_only_pages_s"))
    out.append((f"ColIdefics3 encode_pages >= {MIN_SHARE_OF_MODEL}x the model alone", fig(r, "x"),
                verdict(r, None if r is None else r >= MIN_SHARE_OF_MODEL)))
    return out


def render(got: dict[str, Any]) -> str:
    a = got["archs"]
    devices = sorted({str(r.get("device_name", r.get("device"))) for r in a.values()})
    lines = [f"device: {', '.join(devices) or 'none measured'}; before: one H200, 2026-12-04"]
    if any(not on_gpu(r) for r in a.values()) or (got["serve"] and not got["serve_on_gpu"]):
        lines.append("(rows of tiny models or of a CPU are shown, not judged: their targets read "
                     "'not measured')")
    lines += ["",
             "| | " + " | ".join(NAMES[x] for x in ARCHS) + " |", "|---" * (len(ARCHS) + 1) + "|"]

    def row(label: str, key: str, per_model: bool = False) -> None:
        cells = []
        for arch in ARCHS:
            now, before = a.get(arch, {}).get(key), BEFORE[key][arch] if key in BEFORE else None
            share = f" ({fig(ratio(now, a[arch].get('model_only_pages_s')), 'x')})" if per_model and now else ""
            cells.append(f"{before if before is not None else '-'} -> {now if now is not None else '-'}{share}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("model only, pages/s", "model_only_pages_s")
    row("encode_pages, pages/s (x model)", "encode_pages_s", per_model=True)
    row("Engine.ingest, pages/s (x model)", "ingest_pages_s", per_model=True)
    row("query p50 ms, ragspine's path", "query_ms_p50")
    lines.append("| query p50 ms, plain forward (now) | " + " | ".join(
        str(a.get(x, {}).get("query_ms_p50_plain", "-")) for x in ARCHS) + " |")
    lines.append("| query path | " + " | ".join(str(a.get(x, {}).get("query_path", "-")) for x in ARCHS) + " |")
    lines += ["", "| target | figure | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {v} | {ok} |" for t, v, ok in targets(got)]
    steps = ("processor", "to_device", "forward", "to_host")
    measured = [x for x in ARCHS if x in a]
    if measured:
        lines += ["", "| where the time goes, ms | " + " | ".join(
            f"page {s} | query {s}" for s in steps) + " |", "|---" * (2 * len(steps) + 1) + "|"]
        for x in measured:
            lines.append(f"| {NAMES[x]} | " + " | ".join(
                f"{a[x].get(f'page_{s}_ms', '-')} | {a[x].get(f'query_{s}_ms', '-')}" for s in steps) + " |")
        lines.append("")
        lines += [f"- {NAMES[x]} ingest: {a[x].get('ingest_stages') or '-'}" for x in measured]
    for r in got["prep"]:
        base = a.get(str(r["arch"]).split()[0], {})
        lines.append(f"- ColPali ingest with pages prepared in {r.get('prep_processes')} processes: "
                     f"{r.get('ingest_pages_s')} pages/s against {base.get('ingest_pages_s')} on the prep "
                     f"threads ({fig(ratio(r.get('ingest_pages_s'), base.get('ingest_pages_s')), 'x')})")
    if got["serve"]:
        lines += ["", "| server rule | clients | q/s | p50 ms | p99 ms | errors |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['rule']} | {r['clients']} | {r['qps']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} |"
                  for r in got["serve"]]
    if got["maxsim"]:
        lines.append("")
        lines += [f"- exact MaxSim over {r['pages']:,} pages: {r.get('all_p50_ms', r.get('skipped'))} ms p50"
                  for r in got["maxsim"]["rows"] if isinstance(r, dict) and isinstance(r.get("pages"), int)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: bench/gpu_table.py DIR (the folder holding the steps' JSON)", file=sys.stderr)
        return 2
    print(render(load(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
