"""What each part of the corrective grade adds: MMLongBench's abstentions with one part off.

    .venv/bin/python bench/grade_ablation.py [--dataset ../shared/data/mmlongbench_dev] [--ocr auto]
                                             [--mode economy] [--coverage 0.35,0.4,0.45,0.5]
                                             [--json PATH]

The dataset is indexed once (``--ocr auto``: its scanned pages need OCR; ~10 min on 2 cores) and
every question goes through the corrective loop as ``ragspine eval --corrective`` runs it (top 10,
the default settings but the coverage), first with everything on at each ``--coverage``, then at
the default coverage with one part of the rule off at a time (:data:`PARTS`). MMLongBench marks
its unanswerable questions by giving them no judged page; printed: the share of the answerable
and of the unanswerable questions the loop abstained on, each row against everything on.

The parts are not settings (a user has no reason to turn one off), so each is switched off here
by patching the constant or the call that carries it (``unittest.mock.patch.object``, which
fails on a name that no longer exists: a renamed part cannot silently stay on).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"

#: The sentence split and the example list before "?Round your answer" and "like [...]" were read.
OLD_END = re.compile(r"(?<=[.?!])\s+(?=\S)|(?<=[。？！])\s*(?=\S)|(?<=[?!])(?=[\u4e00-\u9fff])")
OLD_EXAMPLE = re.compile(r"(?:e\.g\.|for\s+example|such\s+as)\s*[,:，：]?\s*(?:\[[^\]]*\]|\([^)]*\))\s*[.?!。？！]?\s*$",
                         re.IGNORECASE)


@contextlib.contextmanager
def part_off(name: str, chain: Any) -> Iterator[None]:
    """The corrective grade of ``chain`` (a :class:`ragspine.chain.query.QueryChain`) with part
    ``name`` of :data:`PARTS` off."""
    import ragspine.chain.grade as grade_mod
    import ragspine.chain.query as query_mod
    import ragspine.scoring.query_text as query_text

    searcher = chain.searcher
    never = re.compile(r"(?!)")
    with contextlib.ExitStack() as stack:
        if name == "frame words":
            stack.enter_context(mock.patch.object(grade_mod, "FRAME_WORDS", frozenset()))
        elif name == "two missing words at least":
            stack.enter_context(mock.patch.object(grade_mod, "MIN_MISSING", 1))
        elif name == "document fields":
            stack.enter_context(mock.patch.object(grade_mod, "DOCUMENT_FIELDS", ()))
        elif name == "codes as specifics":
            stack.enter_context(mock.patch.object(grade_mod, "_CODE", never))
        elif name == "example numbers left out":
            stack.enter_context(mock.patch.object(grade_mod, "_EXAMPLE", never))
        elif name == "corrected spellings in coverage":
            plain = query_mod.grade
            stack.enter_context(mock.patch.object(query_mod, "grade", lambda *a, **k: plain(*a, **{**k, "respelt": None})))
        elif name == "names read as words":
            respelt = searcher.respelt
            stack.enter_context(mock.patch.object(
                searcher, "respelt", lambda lib, q, active=None, names_as_words=False: respelt(lib, q, active)))
        elif name == "a page the document does not have":
            stack.enter_context(mock.patch.object(searcher, "document_has_pages", lambda *a, **k: None))
        elif name == "no agreement asked of a named page":
            stack.enter_context(mock.patch.object(searcher, "named_pages", lambda *a, **k: frozenset()))
        elif name == "the '?Round' split and 'like [...]' examples":
            stack.enter_context(mock.patch.object(query_text, "_END", OLD_END))
            stack.enter_context(mock.patch.object(query_text, "_EXAMPLE", OLD_EXAMPLE))
        else:
            raise ValueError(f"unknown part {name!r}")
        yield


PARTS: tuple[str, ...] = (
    "frame words", "two missing words at least", "document fields", "corrected spellings in coverage",
    "names read as words", "example numbers left out", "the '?Round' split and 'like [...]' examples",
    "no agreement asked of a named page", "a page the document does not have", "codes as specifics",
)


def abstentions(search: Callable[[str], Any], queries: dict[str, str], judged: set[str]) -> tuple[float, float]:
    """``(answerable, unanswerable)``: the share of each kind of question ``search`` abstained on."""
    count = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for qid, text in queries.items():
        kind = qid in judged
        total[kind] += 1
        count[kind] += bool(search(text).abstained)
    return (count[True] / max(total[True], 1), count[False] / max(total[False], 1))


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.evaluation import ChainFlags, clean_query, indexed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=DATA)
    ap.add_argument("--ocr", choices=("off", "auto"), default="auto")
    ap.add_argument("--mode", default="economy")
    ap.add_argument("--coverage", default="0.35,0.4,0.45,0.5")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not (args.dataset / "queries.jsonl").exists():
        print(f"no dataset at {args.dataset}; nothing to measure")
        return 0
    base = Settings(reranker="none", device="cpu", ocr=args.ocr)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with indexed(base, args.dataset) as ix:
        print(f"indexed {ix.counts.get('pages', '?')} pages in {time.perf_counter() - t0:.0f} s", flush=True)
        ds, lib = ix.dataset, ix.library
        judged = set(ds.qrels)
        queries = {q: clean_query(t, base.max_query_chars) for q, t in ds.queries.items()}

        def run(settings: Settings, part: str | None) -> tuple[float, float]:
            chain = ix.engine.chain_for(settings, record_gaps=False)

            def search(text: str) -> Any:
                return chain.search(ChainFlags(corrective=True).request(text, lib, args.mode, 10))

            with part_off(part, chain) if part else contextlib.nullcontext():
                return abstentions(search, queries, judged)

        default = base.corrective_min_coverage
        for cov in [float(c) for c in args.coverage.split(",") if c]:
            a, u = run(base.model_copy(update={"corrective_min_coverage": cov}), None)
            rows.append({"coverage": cov, "off": None, "answerable": round(a, 4), "unanswerable": round(u, 4)})
            print(json.dumps(rows[-1]), flush=True)
        for part in PARTS:
            a, u = run(base.model_copy(update={"corrective_min_coverage": default}), part)
            rows.append({"coverage": default, "off": part, "answerable": round(a, 4), "unanswerable": round(u, 4)})
            print(json.dumps(rows[-1]), flush=True)
    on = next((r for r in rows if r["off"] is None and r["coverage"] == default), None)
    print(f"\n{len(judged)} answerable, {len(queries) - len(judged)} unanswerable questions, mode {args.mode}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("| coverage | off | answerable abstained | unanswerable abstained |")
    print("|---|---|---|---|")
    for r in rows:
        vs = ""
        if on is not None and r["off"] is not None:
            vs = f" ({r['answerable'] - on['answerable']:+.1%} / {r['unanswerable'] - on['unanswerable']:+.1%})"
        print(f"| {r['coverage']} | {r['off'] or 'nothing'} | {r['answerable']:.1%} | {r['unanswerable']:.1%}{vs} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
