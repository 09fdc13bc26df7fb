"""OCR cost and gain on real long PDFs (MMLongBench dev: reports, slide decks, papers, manuals).

    .venv/bin/python bench/ocr.py [--docs 6] [--dpi 120] [--workers 1 2 4 8] [--no-baseline]
                                  [--backend auto] [--json]

Per page, in one run on the same machine:

* the baseline: what ingest pays per page without OCR (parse: text blocks and lines with
  boxes, plus the OCR plan that decides whether a page needs reading);
* the page's kind from the plan (``auto`` mode): ``born-digital`` (no region), ``chart``
  (raster images on a page with a text layer), ``scanned`` (no text layer: the page is read
  whole);
* OCR with the product's settings (``ragspine.indexing.ocr`` defaults, ``--dpi``): seconds per
  page of each kind, seconds per region read, pages/s of each kind, and the ratio of the whole
  document set's OCR time to its no-OCR baseline.

Throughput, all on the same pages in one run:

* the **baseline**: the engine as it was before worker processes and OpenVINO (onnxruntime, one
  process with a session on every core, pages read one after another): the same-run baseline
  every other figure is divided by (``--no-baseline`` skips it);
* for each ``--workers`` N: the product's path (``ragspine.indexing.ocr_pool``: N worker
  processes, one inference thread each, ``--backend``), the pages of every document submitted
  at once as concurrent ingests do. Each row gives pages/s, CPU seconds against wall seconds
  (the process and its workers: ``cpu_pct`` 200 is both cores busy), the peak resident memory
  summed over the process tree (sampled every 0.1 s), and the load average.
* detection against recognition: seconds inside each of the two models during the baseline.

Quality, on the queries whose evidence documents are in the set: page-level BM25 (ragspine's
tokenizer, k1 1.5, b 0.75) nDCG@10 with the text layer alone, with OCR text appended, and with
OCR text whose glued words were not split (the engine's raw lines: read from the same cache, so
the second reading costs no OCR), overall and per evidence type; and the share of OCR tokens of
16+ letters before and after splitting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_tree import TreeMemory  # noqa: E402


def bm25_ndcg(pages: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10 per query of a plain page-level BM25 (k1 1.5, b 0.75, ragspine's tokenizer)."""
    from ragspine.scoring import tokenize

    ids = list(pages)
    docs = [Counter(tokenize(pages[i])) for i in ids]
    lens = [sum(d.values()) for d in docs]
    avg = sum(lens) / max(len(lens), 1) or 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    n = len(docs)
    out = {}
    for qid, text in queries.items():
        q = Counter(tokenize(text))
        scores = []
        for i, d in enumerate(docs):
            s = 0.0
            for t, c in q.items():
                tf = d.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += c * idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * lens[i] / avg))
            scores.append((-s, ids[i]))
        ranked = [pid for s, pid in sorted(scores)[:10] if s < 0]
        rel = qrels[qid]
        dcg = sum(1 / math.log2(r + 2) for r, pid in enumerate(ranked) if rel.get(pid, 0) > 0)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(10, len(rel))))
        out[qid] = dcg / ideal if ideal else 0.0
    return out


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (the workers, once shut down)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_baseline(jobs: list[tuple[Path, list[int]]], opts: Any, dpi: int,
                 kinds: dict[str, str]) -> tuple[dict[str, Any], dict, dict]:
    """The engine before this change's choices: onnxruntime on every core, pages in turn.
    Returns its figures, page id -> OCR text, and page id -> text with glued words kept."""
    import numpy as np
    import pymupdf

    from ragspine.ocr import OcrCache, RapidOcrEngine, ocr_page
    from ragspine.ocr import page as ocr_page_module

    engine = RapidOcrEngine(backend="onnxruntime")
    engine.recognize(np.full((64, 256, 3), 255, dtype="uint8"))  # load the models first
    inner = engine._load()  # noqa: SLF001 (the bench times the two models inside RapidOCR)
    spent = {"detection": 0.0, "recognition": 0.0}

    def timed(fn: Any, name: str) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return call

    inner.text_det.infer = timed(inner.text_det.infer, "detection")
    inner.text_rec.session = timed(inner.text_rec.session, "recognition")
    raw_split = ocr_page_module.split_glued
    texts: dict[str, str] = {}
    unsplit: dict[str, str] = {}
    per_page: list[float] = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    long_tokens: Counter[str] = Counter()
    c0, t0 = cpu_seconds(), time.perf_counter()
    with TreeMemory() as mem:
        for path, numbers in jobs:
            doc = pymupdf.open(path)
            cache = OcrCache()
            kw = dict(mode=opts.mode, dpi=dpi, min_text_chars=opts.min_text_chars,
                      min_image_fraction=opts.min_image_fraction, band=opts.band, cache=cache)
            for n in numbers:
                t = time.perf_counter()
                res = ocr_page(doc.load_page(n - 1), engine, **kw)  # type: ignore[arg-type]
                per_page.append(time.perf_counter() - t)
                by_kind[kinds[f"{path.name}#p{n}"]].append(per_page[-1])
                texts[f"{path.name}#p{n}"] = res.text
                # The same page without splitting glued words: the cache answers, no OCR.
                ocr_page_module.split_glued = lambda x, **k: x  # type: ignore[assignment]
                try:
                    raw = ocr_page(doc.load_page(n - 1), engine, **kw)  # type: ignore[arg-type]
                finally:
                    ocr_page_module.split_glued = raw_split
                unsplit[f"{path.name}#p{n}"] = raw.text
                for label, text in (("unsplit", raw.text), ("split", res.text)):
                    toks = [w for w in text.split() if w.isalpha()]
                    long_tokens[label + "_all"] += len(toks)
                    long_tokens[label + "_long"] += sum(len(w) >= 16 for w in toks)
            doc.close()
    wall = time.perf_counter() - t0
    n = sum(len(x) for _, x in jobs)
    row = {"config": "baseline: onnxruntime, 1 process, all cores", "pages": n, "wall_s": round(wall, 1),
           "pages_per_s": round(n / wall, 3),
           **{f"{k}_pages_per_s": round(len(v) / sum(v), 3) for k, v in sorted(by_kind.items()) if sum(v)},
           "cpu_s": round(cpu_seconds() - c0, 1),
           "cpu_pct": round(100 * (cpu_seconds() - c0) / wall), "peak_tree_mb": round(mem.peak / 2**20),
           "load_avg": round(os.getloadavg()[0], 2),
           "detection_s": round(spent["detection"], 1), "recognition_s": round(spent["recognition"], 1),
           "long_token_share": {k: round(long_tokens[k + "_long"] / max(long_tokens[k + "_all"], 1), 4)
                                for k in ("unsplit", "split")}}
    return row, texts, unsplit


def run_pool(jobs: list[tuple[Path, list[int]]], opts: Any, workers: int, backend: str) -> tuple[dict[str, Any], dict]:
    """The product's path: ``workers`` processes of one thread each, every document at once."""
    from ragspine.indexing.ocr_pool import OcrProcesses

    pool = OcrProcesses(workers, nice=0, backend=backend)
    texts: dict[str, str] = {}
    c0, t0 = cpu_seconds(), time.perf_counter()
    with TreeMemory() as mem:
        def one(job: tuple[Path, list[int]]) -> None:
            path, numbers = job
            for n, res in pool.read(str(path), numbers, opts).items():
                texts[f"{path.name}#p{n}"] = res.text

        with ThreadPoolExecutor(max_workers=len(jobs)) as submit:
            list(submit.map(one, jobs))
        pool.close()  # the workers exit and are waited for: their CPU time is counted
    wall = time.perf_counter() - t0
    n = sum(len(x) for _, x in jobs)
    cpu = cpu_seconds() - c0
    return {"config": f"{workers} worker(s), {pool.backend if backend != 'auto' else 'auto'} backend", "workers": workers,
            "pages": n, "wall_s": round(wall, 1), "pages_per_s": round(n / wall, 3), "cpu_s": round(cpu, 1),
            "cpu_pct": round(100 * cpu / wall), "peak_tree_mb": round(mem.peak / 2**20),
            "load_avg": round(os.getloadavg()[0], 2)}, texts


def choose_documents(docs_dir: Path, opts: Any, n_docs: int) -> tuple[dict[str, list[tuple[int, str]]], list[str]]:
    """Every PDF's pages with their kind from the OCR plan (``born-digital``, ``chart``,
    ``scanned``), and the ``n_docs`` documents measured: half with the most raster-image
    (chart) pages, half with the most scanned pages, fewest pages first among equals."""
    import pymupdf

    from ragspine.ocr import plan_page

    plans: dict[str, list[tuple[int, str]]] = {}
    for f in sorted(docs_dir.glob("*.pdf")):
        doc = pymupdf.open(f)
        kinds = []
        for i in range(doc.page_count):
            regions = plan_page(doc.load_page(i), opts.mode, opts.min_text_chars, opts.min_image_fraction,
                                opts.band)  # type: ignore[arg-type]
            kinds.append((i + 1, "born-digital" if not regions else
                          "scanned" if regions[0].reason == "no_text_layer" else "chart"))
        doc.close()
        plans[f.name] = kinds
    # Half the documents with the most raster-image (chart) pages, half with the most scanned
    # pages, fewest pages first among equals: every kind of page is measured.
    def most(kind: str) -> list[str]:
        have = [n for n in plans if any(k == kind for _, k in plans[n])]
        return sorted(have, key=lambda n: (-sum(k == kind for _, k in plans[n]) / len(plans[n]), len(plans[n]), n))

    chosen: list[str] = []
    for name in [x for pair in zip(most("chart"), most("scanned")) for x in pair]:
        if name not in chosen and len(chosen) < n_docs:
            chosen.append(name)

    return plans, chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--docs", type=int, default=6, help="PDFs to read (half chart-heavy, half scanned)")
    ap.add_argument("--dpi", type=int, default=None, help="OCR dpi (default: RAGSPINE_OCR_DPI's default)")
    ap.add_argument("--workers", type=int, nargs="+", default=None,
                    help="worker counts to measure (default: RAGSPINE_OCR_WORKERS's auto, one per core)")
    ap.add_argument("--backend", default="auto", choices=["auto", "openvino", "onnxruntime", "torch"])
    ap.add_argument("--no-baseline", action="store_true", help="skip the same-run baseline (it is the slowest)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.workers is not None and min(args.workers) < 1:
        ap.error("--workers takes counts of at least 1")

    import pymupdf

    from ragspine.config import Settings
    from ragspine.indexing.ocr import OcrOptions
    from ragspine.indexing.ocr_pool import auto_workers
    from ragspine.indexing.pdf import open_pdf
    from ragspine.ocr import plan_page

    docs_dir = args.data / "documents"
    if not docs_dir.is_dir():
        print(f"no data at {docs_dir} (../shared/data is only on development machines)", file=sys.stderr)
        return 2
    s = Settings()
    opts = OcrOptions.from_settings(s)
    dpi = args.dpi or opts.dpi
    if dpi != opts.dpi:
        opts = OcrOptions(opts.mode, dpi, opts.min_text_chars, opts.min_image_fraction, opts.band, args.backend)
    workers = args.workers or [auto_workers(0)]
    # The documents whose queries have the most Chart/Figure evidence and image pages first.
    queries_all = [json.loads(line) for line in (args.data / "queries.jsonl").open()]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (args.data / "qrels" / "dev.tsv").open():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) > 0:
            qrels[parts[0]][parts[1]] = int(parts[2])
    plans, chosen = choose_documents(docs_dir, opts, args.docs)

    # What ingest pays per page without OCR: parse (text blocks, lines, boxes) and the plan.
    layer: dict[str, str] = {}
    t = time.perf_counter()
    for name in chosen:
        parsed = open_pdf((docs_dir / name).read_bytes(), max_pages=s.max_pages, max_page_side_pt=s.max_page_side_pt)
        for i, page in enumerate(parsed.pages):
            plan_page(parsed.doc.load_page(i), opts.mode, opts.min_text_chars, opts.min_image_fraction, opts.band)
            layer[f"{name}#p{page.number}"] = page.text
        parsed.close()
    base_s = time.perf_counter() - t
    jobs = [(docs_dir / n, [p for p, k in plans[n] if k != "born-digital"]) for n in chosen]
    kinds = {f"{n}#p{p}": k for n in chosen for p, k in plans[n]}
    n_pages = sum(len(plans[n]) for n in chosen)
    print(f"{len(chosen)} documents, {n_pages} pages, {sum(len(x) for _, x in jobs)} to read by OCR at {dpi} dpi; "
          f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)

    rows: list[dict[str, Any]] = []
    readings: dict[str, dict[str, str]] = {}
    for w in workers:
        # Chart pages and scanned pages apart (each kind's pages/s), then both together.
        texts: dict[str, str] = {}
        parts = []
        for kind in ("chart", "scanned"):
            kind_jobs = [(path, [n for n in nums if kinds[f"{path.name}#p{n}"] == kind]) for path, nums in jobs]
            kind_jobs = [j for j in kind_jobs if j[1]]
            if kind_jobs:
                row, got = run_pool(kind_jobs, opts, w, args.backend)
                texts.update(got)
                parts.append((kind, row))
        wall = sum(r["wall_s"] for _, r in parts)
        cpu = sum(r["cpu_s"] for _, r in parts)
        n = sum(r["pages"] for _, r in parts)
        row = {"config": parts[0][1]["config"], "workers": w, "pages": n, "wall_s": round(wall, 1),
               "pages_per_s": round(n / wall, 3),
               **{f"{k}_pages_per_s": r["pages_per_s"] for k, r in parts},
               "cpu_s": round(cpu, 1), "cpu_pct": round(100 * cpu / wall),
               "peak_tree_mb": max(r["peak_tree_mb"] for _, r in parts), "load_avg": round(os.getloadavg()[0], 2)}
        readings.setdefault(f"{w} workers", texts)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    # The baseline last: its engine stays loaded in this process, which must not count in the
    # worker rows' memory.
    if not args.no_baseline:
        row, readings["baseline"], unsplit = run_baseline(jobs, opts, dpi, kinds)
        print(json.dumps(row), file=sys.stderr)
        for r in rows:
            r["speedup_vs_baseline"] = round(r["pages_per_s"] / row["pages_per_s"], 2)
        rows.insert(0, row)

    chosen_set = set(chosen)
    queries = {q["_id"]: q["text"] for q in queries_all
               if q["_id"] in qrels and all(pid.split("#p")[0] in chosen_set for pid in qrels[q["_id"]])}
    types = {q["_id"]: (q.get("metadata") or {}).get("evidence_sources") or [] for q in queries_all}
    variants: list[tuple[str, dict[str, str]]] = [("text layer", layer)]
    for label, texts in readings.items():
        variants.append((f"+ OCR ({label})", {pid: layer[pid] + "\n\n" + texts.get(pid, "") for pid in layer}))
    if "baseline" in readings:
        variants.append(("+ OCR (baseline), glued words kept",
                         {pid: layer[pid] + "\n\n" + unsplit.get(pid, "") for pid in layer}))
    figures: dict[str, Any] = {}
    for label, pages in variants:
        per_q = bm25_ndcg(pages, queries, qrels)
        row = {"all": round(statistics.fmean(per_q.values()), 4) if per_q else None, "queries": len(per_q)}
        for t in ("Chart", "Figure", "Table", "Pure-text (Plain-text)", "Generalized-text (Layout)"):
            vals = [v for q, v in per_q.items() if t in types.get(q, [])]
            row[t] = round(statistics.fmean(vals), 4) if vals else None
        figures[label] = row

    by_kind = {k: sum(1 for v in kinds.values() if v == k) for k in ("born-digital", "chart", "scanned")}
    out = {
        "documents": len(chosen), "pages": n_pages, "dpi": dpi, "backend": args.backend,
        "baseline_no_ocr_s": round(base_s, 2),
        "baseline_no_ocr_pages_per_s": round(n_pages / base_s, 1) if base_s else None,
        "pages_by_kind": by_kind,
        "throughput": rows,
        "ndcg@10": figures,
        "all_documents_by_kind": {k: sum(1 for n in plans for _, kk in plans[n] if kk == k)
                                  for k in ("born-digital", "chart", "scanned")},
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            if k == "throughput":
                for r in v:
                    print("throughput: " + " ".join(f"{a}={b}" for a, b in r.items()))
            else:
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
