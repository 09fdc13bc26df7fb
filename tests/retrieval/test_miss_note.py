"""The miss rule itself (ragspine.retrieval.misses.miss_note), on hand-set backgrounds: a best
similarity above any library's threshold (mean + margin + stds * sd) stands out; otherwise the
search is a miss; a search with no background to compare against is never called one."""

from __future__ import annotations

from ragspine.retrieval.misses import Background, miss_note

BG = {"lib": Background(mean=0.80, std=0.01, n=8)}  # threshold 0.80 + 0.03 + 2 * 0.01 = 0.85


def test_threshold() -> None:
    assert BG["lib"].threshold(0.03, 2.0) == 0.80 + 0.03 + 0.02


def test_a_match_above_the_background_stands_out() -> None:
    assert miss_note(0.851, BG, 0.03, 2.0) is None


def test_a_match_at_or_below_it_is_a_miss() -> None:
    note = miss_note(0.85, BG, 0.03, 2.0)
    assert note is not None and note.startswith("miss: no query term occurs")
    assert "0.850" in note and "'lib': above 0.850 (probes 0.800 ± 0.010)" in note
    assert miss_note(None, BG, 0.03, 2.0) is not None  # the dense channel found nothing


def test_one_library_where_it_stands_out_is_enough() -> None:
    two = {**BG, "other": Background(mean=0.70, std=0.0, n=8)}  # threshold 0.73
    assert miss_note(0.80, two, 0.03, 2.0) is None


def test_no_background_never_calls_a_miss() -> None:
    assert miss_note(0.5, {}, 0.03, 2.0) is None
