"""The document prior and the neighbours' share, on hand-built rankings whose results are worked
out in each test."""

from __future__ import annotations

import pytest

from ragspine.scoring.priors import borrow_neighbours, document_prior, normalised


def doc(key: str) -> str:
    return key.split("#")[0]


RANKING = [("a#1", 10.0), ("b#1", 8.0), ("b#2", 6.0), ("a#2", 2.0)]


def test_normalised_between_best_and_depth() -> None:
    # best 10, score at depth 3 is 6: (s - 6) / 4, clipped
    assert normalised(RANKING, 3) == {"a#1": 1.0, "b#1": 0.5, "b#2": 0.0, "a#2": 0.0}
    assert normalised(RANKING, 10) == {"a#1": 1.0, "b#1": 0.75, "b#2": 0.5, "a#2": 0.0}
    assert normalised([("x", 3.0), ("y", 3.0)], 5) == {"x": 1.0, "y": 1.0}
    assert normalised([], 5) == {}
    with pytest.raises(ValueError, match="depth"):
        normalised(RANKING, 0)


def test_document_prior_lifts_the_named_document() -> None:
    # documents: b 1.0, a 0.0; weight 0.5 over the normalised pages (depth 10):
    # a#1 .5*1 = .5; b#1 .5*.75+.5 = .875; b#2 .5*.5+.5 = .75; a#2 0
    got = document_prior(RANKING, doc, {"b": 1.0, "a": 0.0}, 0.5, depth=10)
    assert [k for k, _ in got] == ["b#1", "b#2", "a#1", "a#2"]
    assert dict(got) == pytest.approx({"b#1": 0.875, "b#2": 0.75, "a#1": 0.5, "a#2": 0.0})
    assert document_prior(RANKING, doc, {"b": 1.0}, 0.0, depth=10) == RANKING  # off: unchanged
    with pytest.raises(ValueError, match="weight"):
        document_prior(RANKING, doc, {}, 1.5, depth=10)


def test_equal_scores_keep_the_fused_order() -> None:
    ranking = [("a#1", 2.0), ("b#1", 1.0)]
    # a#1: .5*1 + .5*0 = .5; b#1: .5*0 + .5*1 = .5 -> tie, fused order kept
    got = document_prior(ranking, doc, {"a": 0.0, "b": 1.0}, 0.5, depth=10)
    assert [k for k, _ in got] == ["a#1", "b#1"]


def test_borrow_neighbours() -> None:
    def around(key: str) -> list[str]:
        d, p = key.split("#")
        return [f"{d}#{int(p) - 1}", f"{d}#{int(p) + 1}"]

    # normalised (depth 10): a#1 1, b#1 .75, b#2 .5, a#2 0; weight .5:
    # a#1 1 + .5*0 = 1; b#1 .75 + .5*.5 = 1.0; b#2 .5 + .5*.75 = .875; a#2 0 + .5*1 = .5
    got = borrow_neighbours(RANKING, around, 0.5, depth=10)
    assert [k for k, _ in got] == ["a#1", "b#1", "b#2", "a#2"]
    assert dict(got) == pytest.approx({"a#1": 1.0, "b#1": 1.0, "b#2": 0.875, "a#2": 0.5})
    assert borrow_neighbours(RANKING, around, 0.0, depth=10) == RANKING
    with pytest.raises(ValueError, match="weight"):
        borrow_neighbours(RANKING, around, -1.0, depth=10)
