"""A miss is a miss: where the dense channel's best similarity lies for real questions, for
questions in another language than the library (no BM25 term can match), and for made-up words,
against each library's probe background (ragspine.retrieval.misses).

    .venv/bin/python bench/misses.py [--datasets tatqa_dev,cranfield] [--ocr off] [--nonsense 40]
                                     [--limit N] [--json PATH]

Each set (``../shared/data``) is indexed once with the default dense model. Then:

- every judged question (up to ``--limit``) is searched in ``economy`` with the miss check off,
  and its best dense similarity and whether any BM25 term matched are kept;
- ``CROSS_LANGUAGE``: Chinese questions about what English financial reports and surveys hold
  (written for this bench; none shares a BM25 term with an English library), searched the same way;
- ``--nonsense`` queries of made-up words (a seeded syllable generator, disjoint from the
  product's own probes).

It prints the probe background, the quantiles of each group's best similarity, and for a grid
of (margin, stds) how many made-up queries would be called misses (the higher the better) and
how many cross-language and real questions without a BM25 match would be (the lower the better).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from long_reports import SETS  # noqa: E402

#: Chinese questions whose answers English annual reports, 10-Ks and surveys hold.
CROSS_LANGUAGE = (
    "公司的营业收入是多少",
    "净利润比上年增长了多少",
    "公司有多少名员工",
    "每股股息是多少",
    "经营活动产生的现金流量净额",
    "所得税费用是多少",
    "商誉减值损失",
    "研究与开发支出",
    "长期债务的利率",
    "资本支出的金额",
    "股票回购计划",
    "毛利率的变化",
    "飞机机翼的气流分离",
    "边界层的传热",
    "超音速流动中的激波",
)
SYLLABLES = ("bra", "cou", "dre", "fli", "gno", "hap", "jix", "klo", "mur", "nev", "plo", "quar", "rix", "sty",
             "tho", "vam", "wub", "xel", "yot", "zan", "qui", "ept", "ulm", "osk")


def nonsense(n: int, seed: int = 44) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(3, 4))) for _ in range(rng.randint(1, 3))]
        out.append(" ".join(words))
    return out


def quantiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    pick = [xs[0], xs[len(xs) // 10], xs[len(xs) // 2], xs[(9 * len(xs)) // 10], xs[-1]]
    return " / ".join(f"{v:.3f}" for v in pick) + f" (n={len(xs)})"


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import clean_query, indexed
    from ragspine.retrieval.search import SearchRequest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="tatqa_dev,cranfield")
    ap.add_argument("--ocr", choices=("off", "auto"), default="off")
    ap.add_argument("--nonsense", type=int, default=40)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base = Settings(reranker="none", device="cpu", ocr=args.ocr, miss_check=False)
    report: dict[str, Any] = {}
    for name in [n for n in args.datasets.split(",") if n]:
        root = SETS.get(name, Path(name))
        if not (root / "queries.jsonl").exists():
            print(f"{name}: not found at {root}, skipped", file=sys.stderr)
            continue
        with indexed(base, root) as ix:
            eng, lib = ix.engine, ix.library
            searcher = eng.searcher_for(base)
            active = eng.libraries.active_versions(lib)
            bg = searcher.misses.background(lib, active, eng.models.dense)
            assert bg is not None, "no dense passages: is the dense model installed?"

            def probe(q: str) -> tuple[float | None, bool]:
                from ragspine.retrieval.search import Trace

                req = SearchRequest(query=clean_query(q, base.max_query_chars), libraries=[lib], mode="economy",
                                    top_k=10)
                preds, _ = searcher.validate(req)
                plan = searcher._plan(req)
                queries = searcher._encode_query(req, plan, {})
                trace = Trace()
                searcher._search(req, preds, plan, queries, {}, trace)
                return trace.top_dense, trace.bm25_found

            judged = [q for q in ix.dataset.queries if q in ix.dataset.qrels][: args.limit]
            real = [probe(ix.dataset.queries[q]) for q in judged]
            cross = [probe(q) for q in CROSS_LANGUAGE]
            made_up = [probe(q) for q in nonsense(args.nonsense)]
            groups = {
                "real, BM25 matched": [t for t, m in real if m and t is not None],
                "real, no BM25 term": [t for t, m in real if not m and t is not None],
                "cross-language": [t for t, m in cross if not m and t is not None],
                "made-up words": [t for t, m in made_up if not m and t is not None],
            }
            print(f"\n{name}: probe background mean {bg.mean:.3f} std {bg.std:.3f} (n={bg.n}); "
                  f"made-up queries with a BM25 match: {sum(m for _, m in made_up)}; "
                  f"cross-language with a BM25 match: {sum(m for _, m in cross)}")
            print("  best dense similarity, min / p10 / median / p90 / max:")
            for g, xs in groups.items():
                print(f"    {g:>20}: {quantiles(xs)}")
            grid = []
            for margin in (0.0, 0.01, 0.02, 0.03, 0.05):
                for stds in (0.0, 1.0, 2.0, 3.0):
                    thr = bg.threshold(margin, stds)
                    row = {"margin": margin, "stds": stds, "threshold": round(thr, 4)}
                    for g, xs in groups.items():
                        if g != "real, BM25 matched":
                            row[f"{g}: misses"] = f"{sum(x <= thr for x in xs)}/{len(xs)}"
                    grid.append(row)
                    print("    " + json.dumps(row, ensure_ascii=False))
            report[name] = {"background": [bg.mean, bg.std, bg.n],
                            "groups": {g: statistics.fmean(xs) if xs else None for g, xs in groups.items()},
                            "grid": grid}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
