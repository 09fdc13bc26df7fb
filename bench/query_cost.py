"""What the document prior, the page-number prior, the line items, the spelling corrections
and the miss check cost a query: each
question searched with the settings as configured and with them off, alternately, over one
index, in one process.

    .venv/bin/python bench/query_cost.py [--dataset mmlongbench_dev] [--mode bm25|economy]
                                         [--ocr off|auto] [--limit N] [--rounds 3]

Prints p50 and p95 latency per variant and the ratio of today's settings to "off"
(``document_prior_weight=0``, ``page_number_weight=0``, ``line_item_weight=0``,
``spelling_corrections=False``, ``miss_check=False``: the query path before them, on the same
index). Alternating the two per query keeps a loaded machine's noise out of
the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from long_reports import SETS  # noqa: E402


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import clean_query, indexed
    from ragspine.retrieval.search import SearchRequest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mmlongbench_dev")
    ap.add_argument("--mode", default="bm25", choices=("bm25", "economy"))
    ap.add_argument("--ocr", default="off", choices=("off", "auto"))
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = SETS.get(args.dataset, Path(args.dataset))
    base = (Settings(reranker="none", device="cpu", ocr=args.ocr, dense_model="none") if args.mode == "bm25"
            else Settings(reranker="none", device="cpu", ocr=args.ocr))
    with indexed(base, root) as ix:
        eng = ix.engine
        today = eng.searcher_for(eng.settings)
        off = eng.searcher_for(eng.settings.model_copy(update={
            "document_prior_weight": 0.0, "page_number_weight": 0.0, "line_item_weight": 0.0,
            "spelling_corrections": False, "miss_check": False}))
        queries = [clean_query(ix.dataset.queries[q], base.max_query_chars) for q in list(ix.dataset.queries)[: args.limit]]
        times: dict[str, list[float]] = {"today": [], "off": []}
        for name, s in (("today", today), ("off", off)):  # warm: indexes, caches, the dense model
            s.search(SearchRequest(query=queries[0], libraries=[ix.library], mode=args.mode, top_k=10))
        for _ in range(args.rounds):
            for q in queries:
                for name, s in (("today", today), ("off", off)):
                    t = time.perf_counter()
                    s.search(SearchRequest(query=q, libraries=[ix.library], mode=args.mode, top_k=10))
                    times[name].append((time.perf_counter() - t) * 1000)
    p50 = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:>6}: p50 {p50[k]:.2f} ms, p95 {sorted(v)[int(0.95 * (len(v) - 1))]:.2f} ms ({len(v)} searches)")
    print(f"ratio today / off (p50): {p50['today'] / p50['off']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
