"""BM25, dense and their fusion on the shared evaluation sets: nDCG@10 per channel mix.

    .venv/bin/python bench/hybrid_eval.py [--datasets tatqa_dev,cranfield,mmlongbench_dev]
                                          [--dense-model all-MiniLM-L6-v2] [--limit N]

Each dataset is indexed once (BM25 + dense passage vectors from the dense model, CPU) and
scored under query-time variants over the same index (``evaluate_variants``):

- ``bm25``: the BM25 channels alone (mode ``bm25``);
- ``dense``: the dense channel alone (BM25 weights ~0: a BM25 channel cannot be switched off
  in hybrid mode, so it is weighted 1e-9 and only breaks ties among pages dense never saw);
- ``plain rrf``: BM25 passage + page + dense, all weight 1, k=60 (the "fusion can hurt"
  baseline of the data README);
- ``hybrid dw=W``: ragspine's weights (passage 1, page 2) with dense weight W.

Prints one table row per variant with nDCG@10, R@10 and the difference to BM25, so the
default ``RAGSPINE_DENSE_WEIGHT`` is chosen on these dev sets with the figures in view.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {"tatqa_dev": DATA / "text" / "tatqa_dev", "cranfield": DATA / "text" / "cranfield",
        "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval",
        "mmlongbench_dev": DATA / "mmlongbench_dev"}
WEIGHTS = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ragspine.config import Settings
    from ragspine.evaluation import evaluate_variants

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="tatqa_dev,cranfield,mmlongbench_dev")
    ap.add_argument("--dense-model", default="all-MiniLM-L6-v2")
    ap.add_argument("--limit", type=int, default=None, help="first N judged queries per set")
    ap.add_argument("--json", type=Path, default=None, help="also write all results here")
    args = ap.parse_args()

    variants: dict[str, dict[str, float]] = {
        "dense": {"bm25_chunk_weight": 1e-9, "bm25_page_weight": 1e-9, "dense_weight": 1.0},
        "plain rrf": {"bm25_chunk_weight": 1.0, "bm25_page_weight": 1.0, "dense_weight": 1.0},
        **{f"hybrid dw={w:g}": {"dense_weight": w} for w in WEIGHTS},
    }
    settings = Settings(dense_model=args.dense_model, reranker="none", device="cpu")
    everything: dict[str, dict[str, object]] = {}
    print(f"dense model {args.dense_model}; default weights passage 1, page 2; rrf k {settings.rrf_k}")
    for name in args.datasets.split(","):
        root = SETS.get(name, Path(name))
        if not root.is_dir():
            print(f"{name}: not found at {root}; skipped", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        res = evaluate_variants(settings, root, {"bm25": {}}, mode="bm25", limit_queries=args.limit)
        res.update(evaluate_variants(settings, root, variants, mode="hybrid", limit_queries=args.limit))
        base = res["bm25"]["ndcg@10"]
        print(f"\n{name}: {res['bm25']['queries']} queries, {time.perf_counter() - t0:.0f} s "
              f"(hybrid ingest {res['dense']['ingest_seconds']:.0f} s)")
        print(f"  {'variant':<16} {'nDCG@10':>8} {'R@10':>7} {'vs BM25':>8} {'ms/query':>9}")
        for v, r in res.items():
            print(f"  {v:<16} {r['ndcg@10']:8.4f} {r['recall@10']:7.4f} {r['ndcg@10'] - base:+8.4f} "
                  f"{r['search_ms_per_query']:9.2f}")
        everything[name] = res
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
