"""The convex fusion of normalised channel scores: values worked out by hand, bounds, missing
ids, flat channels, ties and bad input."""

from __future__ import annotations

import pytest

from ragspine.scoring.fusion import convex, minmax_bounds, rrf


def test_two_channels_hand_computed() -> None:
    # BM25: a 12, b 6, c 3 -> (s - 3) / 9: a 1, b 1/3, c 0. Dense: b 0.9, c 0.8, d 0.5 ->
    # (s - 0.5) / 0.4: b 1, c 0.75, d 0. Weights 0.6 / 0.4:
    # a 0.6, b 0.2 + 0.4 = 0.6, c 0 + 0.3 = 0.3, d 0.
    bm25 = {"a": 12.0, "b": 6.0, "c": 3.0}
    dense = {"b": 0.9, "c": 0.8, "d": 0.5}
    fused = convex([bm25, dense], [0.6, 0.4])
    assert dict(fused) == pytest.approx({"a": 0.6, "b": 0.6, "c": 0.3, "d": 0.0}, abs=1e-12)
    # a and b tie at 0.6 and the id decides; a tie-break score decides before the id
    assert [i for i, _ in fused] == ["a", "b", "c", "d"]
    tb = convex([bm25, dense], [0.6, 0.4], tiebreak={"b": 1.0})
    assert [i for i, _ in tb] == ["b", "a", "c", "d"]


def test_a_wide_bm25_margin_survives_where_rrf_loses_it() -> None:
    # BM25 puts x far ahead (30 against 5 and 4), the dense channel puts y a hair ahead of x.
    bm25 = {"x": 30.0, "y": 5.0, "z": 4.0}
    dense = {"y": 0.86, "x": 0.85, "z": 0.60}
    # RRF, k = 60, equal weights: x 1/61 + 1/62, y 1/62 + 1/61: a tie, which the id breaks.
    by_rank = rrf([sorted(bm25, key=lambda i: -bm25[i]), sorted(dense, key=lambda i: -dense[i])], k=60)
    assert by_rank[0][1] == pytest.approx(by_rank[1][1], abs=1e-15)
    # convex: x 0.5 * 1 + 0.5 * (0.25 / 0.26) = 0.98077, y 0.5 * (1 / 26) + 0.5 = 0.51923
    fused = dict(convex([bm25, dense], [0.5, 0.5]))
    assert fused["x"] == pytest.approx(0.5 + 0.5 * 0.25 / 0.26)
    assert fused["y"] == pytest.approx(0.5 / 26 + 0.5)
    assert fused["x"] > fused["y"]


def test_bounds_clip_and_a_flat_channel_scores_one() -> None:
    # bounds (2, 10): 14 clips to 1, 1 clips to 0, 6 -> 0.5
    assert dict(convex([{"a": 14.0, "b": 1.0, "c": 6.0}], [1.0], bounds=[(2.0, 10.0)])) == {
        "a": 1.0, "b": 0.0, "c": 0.5}
    # one hit, or equal scores: each id the channel returned scores its whole weight
    assert dict(convex([{"a": 3.0}, {"a": 0.2, "b": 0.2}], [1.0, 2.0])) == {"a": 3.0, "b": 2.0}


def test_an_id_a_channel_did_not_return_scores_zero_there() -> None:
    fused = dict(convex([{"a": 2.0, "b": 1.0}, {"c": 0.9, "b": 0.1}], [1.0, 1.0]))
    assert fused == {"a": 1.0, "b": 0.0, "c": 1.0}


def test_weights_only_their_ratios_matter() -> None:
    # norms: a 1 and 0, b 3/8 and 5/7, c 0 and 1; at 0.2 / 0.3: c 0.3 > b 0.2893 > a 0.2
    chans = [{"a": 9.0, "b": 4.0, "c": 1.0}, {"b": 0.7, "c": 0.9, "a": 0.2}]
    one = [i for i, _ in convex(chans, [0.2, 0.3])]
    assert one == [i for i, _ in convex(chans, [2.0, 3.0])] == ["c", "b", "a"]
    assert dict(convex(chans, [2.0, 3.0]))["b"] == pytest.approx(10 * dict(convex(chans, [0.2, 0.3]))["b"])


def test_minmax_bounds_use_a_fixed_depth() -> None:
    scores = [9.0, 7.0, 5.0, 3.0, 1.0]
    assert minmax_bounds(scores, 3) == (5.0, 9.0)
    assert minmax_bounds(scores, 100) == (1.0, 9.0)  # fewer than the depth: the last
    assert minmax_bounds(scores[:3], 3) == minmax_bounds(scores, 3)  # a longer list, same bounds
    with pytest.raises(ValueError, match="no scores"):
        minmax_bounds([], 3)
    with pytest.raises(ValueError, match="depth"):
        minmax_bounds(scores, 0)


@pytest.mark.parametrize(("weights", "bounds", "says"), [
    ([1.0], None, "1 weights for 2 channels"),
    ([1.0, -0.1], None, "must be finite and >= 0"),
    ([1.0, float("nan")], None, "must be finite and >= 0"),
    ([1.0, float("inf")], None, "must be finite and >= 0"),
    ([1.0, 1.0], [(0.0, 1.0)], "1 bounds for 2 channels"),
])
def test_bad_input_is_refused(weights: list[float], bounds: list[tuple[float, float]] | None, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        convex([{"a": 1.0}, {"a": 2.0}], weights, bounds=bounds)


def test_empty_channels() -> None:
    assert convex([], []) == []
    assert convex([{}, {"a": 1.0}], [1.0, 1.0]) == [("a", 1.0)]
