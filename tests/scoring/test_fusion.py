"""Reciprocal Rank Fusion: scores worked out by hand, weights, ties, duplicates, errors."""

from __future__ import annotations

import itertools

import pytest

from ragspine.config import DEFAULT_RRF_K
from ragspine.scoring.fusion import rrf


def _ids(fused: list[tuple[str, float]]) -> list[str]:
    return [i for i, _ in fused]


def test_default_k_is_60() -> None:
    assert DEFAULT_RRF_K == 60
    assert rrf([["a"]]) == [("a", pytest.approx(1 / 61))]


def test_two_rankings_k60_hand_computed() -> None:
    fused = rrf([["a", "b", "c"], ["b", "c", "d"]], k=60)
    expected = {
        "a": 1 / 61,
        "b": 1 / 62 + 1 / 61,
        "c": 1 / 63 + 1 / 62,
        "d": 1 / 63,
    }
    assert dict(fused) == pytest.approx(expected, rel=1e-12)
    # b 0.032522 > c 0.032002 > a 0.016393 > d 0.015873
    assert _ids(fused) == ["b", "c", "a", "d"]


@pytest.mark.parametrize("k", [1, 2, 10, 1000])
def test_other_k_hand_computed(k: int) -> None:
    fused = dict(rrf([["x", "y"], ["y"]], k=k))
    assert fused["x"] == pytest.approx(1 / (k + 1))
    assert fused["y"] == pytest.approx(1 / (k + 2) + 1 / (k + 1))


def test_small_k_lets_the_top_rank_dominate() -> None:
    # "solo" at rank 1 once: 1/(k+1); "both" at rank 4 twice: 2/(k+4).
    # k = 1: 1/2 > 2/5; k = 60: 1/61 = 0.01639 < 2/64 = 0.03125.
    rankings = [["solo", "p", "q", "both"], ["r", "s", "t", "both"]]
    k1, k60 = _ids(rrf(rankings, k=1)), _ids(rrf(rankings, k=60))
    assert k1.index("solo") < k1.index("both")
    assert k60.index("both") < k60.index("solo")


def test_weights_hand_computed() -> None:
    fused = dict(rrf([["a", "b"], ["b", "a"]], k=60, weights=[2.0, 0.5]))
    assert fused["a"] == pytest.approx(2.0 / 61 + 0.5 / 62)
    assert fused["b"] == pytest.approx(2.0 / 62 + 0.5 / 61)


def test_weight_decides_order() -> None:
    assert _ids(rrf([["a", "b"], ["b", "a"]], weights=[1.0, 1.01]))[0] == "b"
    assert _ids(rrf([["a", "b"], ["b", "a"]], weights=[1.01, 1.0]))[0] == "a"


def test_zero_weight_ranking_adds_nothing() -> None:
    fused = dict(rrf([["a"], ["b", "a"]], weights=[1.0, 0.0]))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == 0.0


def test_ties_broken_by_id() -> None:
    assert rrf([["y", "x"], ["x", "y"]]) == [
        ("x", pytest.approx(1 / 61 + 1 / 62)),
        ("y", pytest.approx(1 / 61 + 1 / 62)),
    ]
    # Same score from one ranking each, at the same rank.
    assert _ids(rrf([["b"], ["c"], ["a"]])) == ["a", "b", "c"]


def test_ties_broken_by_id_whatever_the_ranking_order() -> None:
    ids = ["d0c1", "d0c2", "d1c0"]
    for perm in itertools.permutations(range(3)):
        rankings = [[ids[(i + s) % 3] for i in range(3)] for s in perm]
        assert _ids(rrf(rankings)) == ids


def test_mathematically_equal_scores_are_ties_despite_float_rounding() -> None:
    # "b" at ranks (1, 2, 7) and "a" at ranks (7, 1, 2): equal sums, but adding the three
    # terms left to right in those orders gives results one ulp apart.
    f = [f"f{i}" for i in range(10)]
    rankings = [
        ["b", f[0], f[1], f[2], f[3], f[4], "a"],
        ["a", "b"],
        [f[5], "a", f[6], f[7], f[8], f[9], "b"],
    ]
    fused = rrf(rankings)
    assert _ids(fused)[:2] == ["a", "b"]
    assert fused[0][1] == fused[1][1] == pytest.approx(1 / 61 + 1 / 62 + 1 / 67)


def test_duplicate_within_a_ranking_counts_once_at_best_rank() -> None:
    fused = dict(rrf([["a", "b", "a", "a"]]))
    assert fused["a"] == pytest.approx(1 / 61)
    # positions are kept: "b" is still at rank 2
    assert fused["b"] == pytest.approx(1 / 62)


def test_duplicate_does_not_shift_later_ranks() -> None:
    fused = dict(rrf([["a", "a", "c"]]))
    assert fused == pytest.approx({"a": 1 / 61, "c": 1 / 63})


def test_same_id_in_several_rankings_adds_up() -> None:
    fused = dict(rrf([["a"], ["a"], ["a"]]))
    assert fused["a"] == pytest.approx(3 / 61)


def test_deterministic() -> None:
    rankings = [["p3", "p1", "p2", "p9"], ["p2", "p3", "p7"], ["p9", "p7", "p1"]]
    first = rrf(rankings)
    assert all(rrf(rankings) == first for _ in range(5))


def test_scores_sorted_descending() -> None:
    rankings = [[f"d{i}" for i in range(30)], [f"d{i}" for i in range(29, -1, -3)]]
    scores = [s for _, s in rrf(rankings)]
    assert scores == sorted(scores, reverse=True)


def test_tuple_ids() -> None:
    fused = rrf([[("doc", 1), ("doc", 2)], [("doc", 2)]])
    assert _ids(fused) == [("doc", 2), ("doc", 1)]


@pytest.mark.parametrize("rankings", [[], [[]], [[], []]])
def test_empty_inputs(rankings: list[list[str]]) -> None:
    assert rrf(rankings) == []


def test_one_empty_ranking_among_others() -> None:
    assert dict(rrf([[], ["a"]])) == pytest.approx({"a": 1 / 61})


@pytest.mark.parametrize("k", [0, -1, -60])
def test_bad_k(k: int) -> None:
    with pytest.raises(ValueError, match=f"got {k}"):
        rrf([["a"]], k=k)


@pytest.mark.parametrize(
    ("rankings", "weights"),
    [([["a"], ["b"]], [1.0]), ([["a"]], [1.0, 2.0]), ([["a"]], []), ([], [1.0])],
)
def test_weights_length_must_match(rankings: list[list[str]], weights: list[float]) -> None:
    with pytest.raises(ValueError, match=f"{len(weights)} weights for {len(rankings)} rankings"):
        rrf(rankings, weights=weights)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_rankings = st.lists(
    st.lists(st.sampled_from([f"d{i}" for i in range(12)]), max_size=12), min_size=1, max_size=5
)


@settings(max_examples=150, deadline=None)
@given(rankings=_rankings, data=st.data())
def test_order_of_rankings_does_not_matter(rankings: list[list[str]], data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(rankings))
    assert rrf(shuffled) == rrf(rankings)


@settings(max_examples=150, deadline=None)
@given(rankings=_rankings)
def test_matches_plain_reference(rankings: list[list[str]]) -> None:
    expected: dict[str, float] = {}
    for ranking in rankings:
        best: dict[str, int] = {}
        for pos, item in enumerate(ranking, start=1):
            best.setdefault(item, pos)
        for item, pos in best.items():
            expected[item] = expected.get(item, 0.0) + 1 / (60 + pos)
    fused = rrf(rankings)
    assert dict(fused) == pytest.approx(expected, rel=1e-12)
    assert len(fused) == len(expected)
    # sorted by score descending, equal scores by id
    for (i1, s1), (i2, s2) in zip(fused, fused[1:]):
        assert s1 > s2 or (s1 == s2 and i1 < i2)
