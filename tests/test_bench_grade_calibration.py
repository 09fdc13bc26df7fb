"""bench/grade_calibration.py: its rule is the grade's rule, and its choice follows the stated
budget, on toy examples worked out by hand."""

from __future__ import annotations

import itertools

from bench_kit import load_bench

from ragspine.chain.grade import grade
from ragspine.retrieval.search import SearchHit

gc = load_bench("grade_calibration")


def _hit(text: str, **scores: float | None) -> SearchHit:
    return SearchHit(library_id="lib", doc_id="d", title="", page=1, bbox=[0.0, 0.0, 1.0, 1.0], chunk_id="d/c0",
                     text=text, version=1, scores=dict(scores))


def test_the_bench_rule_on_figures_is_the_grades_rule_on_hits() -> None:
    cases = {  # query terms acme, revenue, asia
        "full words, sim .9": [_hit("acme revenue asia", bm25=2.0, dense=0.9)],
        "a third of the words, sim .9": [_hit("acme profit", bm25=2.0, dense=0.9)],
        "full words, sim .7": [_hit("acme revenue asia", bm25=2.0, dense=0.7)],
        "words only": [_hit("acme revenue", bm25=2.0)],
        "one word missing": [_hit("acme revenue", bm25=2.0, dense=0.7)],  # 2/3 at 0.5: covered either way
        "two words missing": [_hit("acme", bm25=2.0, dense=0.9)],  # 1/3, missing 2: weak unless rescued
        "disagree": [_hit("acme revenue asia", bm25=2.0, dense=None), _hit("x", bm25=None, bm25_page=1.0, dense=0.9)],
        "nothing": [],
    }
    for (name, hits), floor, rescue in itertools.product(cases.items(), (None, 0.8, 0.95), (None, 0.85, 0.95)):
        g = grade("acme revenue asia", hits, min_coverage=0.5, depth=3, min_similarity=floor, rescue_similarity=rescue)
        e = gc.Example(g.coverage, g.agreement, g.similarity, bool(hits), missing=len(g.missing_terms))
        assert gc.weak(e, (floor, rescue), 0.5) is (not g.ok), (name, floor, rescue)
        # A specific the first hit's document never mentions: weak in both, whatever else holds.
        g = grade("acme revenue asia", hits, min_coverage=0.5, depth=3, min_similarity=floor,
                  rescue_similarity=rescue, unmentioned=["2016"])
        e = gc.Example(g.coverage, g.agreement, g.similarity, bool(hits), unmentioned=True)
        assert gc.weak(e, (floor, rescue), 0.5) is (not g.ok) is True, (name, floor, rescue)


def test_choose_takes_the_most_unanswerable_abstentions_within_the_budget() -> None:
    E = gc.Example
    ans = [E(1.0, None, 0.90, True), E(1.0, None, 0.84, True), E(0.2, None, 0.93, True, missing=4), E(1.0, None, 0.95, True)]
    una = [E(1.0, None, 0.82, True), E(1.0, None, 0.86, True), E(0.2, None, 0.80, True, missing=4), E(1.0, None, 0.88, True)]
    ex = {"s": {"answerable": ans, "unanswerable": una}}
    pairs = [(None, None), (0.85, None), (0.85, 0.92), (0.87, 0.92), (0.89, 0.92)]
    # words alone: 1/4 answerable (the paraphrase, coverage .2), 1/4 unanswerable.
    # (.85, .92): answerable weak = .84 only -> 1/4; unanswerable .82, .80 -> 2/4.
    # (.87, .92): answerable .84 -> 1/4; unanswerable .82, .86, .80 -> 3/4.
    # (.89, .92): answerable .84 -> 1/4 (.90 passes); unanswerable all four -> 4/4.
    pair, r = gc.choose(ex, 0.5, 0.25, pairs)
    assert pair == (0.89, 0.92) and r["s"] == {"answerable": 0.25, "unanswerable": 1.0}
    assert gc.choose(ex, 0.5, 0.2, pairs) is None  # even words alone abstain on 1/4


def test_bm25_gap_sorts_differences_into_their_causes() -> None:
    gap = load_bench("bm25_gap")
    ours = [("a", 3.0), ("b", 2.0), ("c", 2.0)]
    assert gap.cause(ours, {"a": 3.0, "b": 2.0, "c": 2.0}, ["a", "b", "c"]) is None
    assert gap.cause(ours, {"a": 3.0, "b": 2.0, "c": 2.0}, ["a", "c", "b"]) == "ties"
    assert gap.cause(ours, {"a": 3.0, "b": 3.5, "c": 2.0}, ["b", "a", "c"]) == "scores"
    assert gap.cause(ours, {"a": 3.0, "b": 2.0, "d": 2.5}, ["a", "d", "b"]) == "depth"
