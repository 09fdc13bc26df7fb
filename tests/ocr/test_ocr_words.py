"""split_glued: the segmentation programme on hand-built costs, then on wordninja's list."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragspine.ocr.words as words
from ragspine.ocr import OcrInputError, OcrUnavailableError, split_glued
from ragspine.ocr.words import _segment

# -- the dynamic programme on hand-built costs ----------------------------------------------


def test_segment_takes_the_cheapest_split() -> None:
    costs = {"ab": 1.0, "abc": 5.0, "cd": 1.0, "d": 3.0, "c": 4.0}
    # ab|cd = 2, abc|d = 8, ab|c|d = 8: ab|cd wins.
    assert _segment("abcd", costs, max_len=3) == ["ab", "cd"]


def test_segment_prefers_one_cheap_long_word() -> None:
    costs = {"note": 2.0, "book": 2.0, "notebook": 3.0}
    assert _segment("notebook", costs, max_len=8) == ["notebook"]  # 3 < 2 + 2
    assert _segment("notebook", {**costs, "notebook": 5.0}, max_len=8) == ["note", "book"]


def test_segment_respects_max_word_length() -> None:
    costs = {"notebook": 1.0, "note": 5.0, "book": 5.0}
    assert _segment("notebook", costs, max_len=4) == ["note", "book"]


def test_segment_ties_go_to_the_longer_last_word() -> None:
    costs = {"a": 1.0, "b": 1.0, "ab": 2.0}
    assert _segment("ab", costs, max_len=2) == ["ab"]


def test_segment_keeps_case_and_gives_up_without_a_split() -> None:
    costs = {"ab": 1.0, "cd": 1.0}
    assert _segment("ABcD", costs, max_len=2) == ["AB", "cD"]
    assert _segment("abx", costs, max_len=2) == ["abx"]  # "x" has no cost: infinite


# -- on wordninja's word list ---------------------------------------------------------------


def test_glued_title_is_split() -> None:
    out = split_glued("GLOBALMOBILEDEVELOPERSMINDSHARE")
    assert out.replace(" ", "") == "GLOBALMOBILEDEVELOPERSMINDSHARE"
    # "mindshare" is not in the list; the common words before it are.
    assert out.startswith("GLOBAL MOBILE DEVELOPERS ")
    assert len(out.split()) >= 4


def test_common_phrase_splits_as_expected() -> None:
    assert split_glued("thequickbrownfoxjumpsoverthelazydog") == "the quick brown fox jumps over the lazy dog"
    assert split_glued("RESTRICTEDDOCUMENT") == "RESTRICTED DOCUMENT"
    assert split_glued("AsiaPacificRevenueShare") == "Asia Pacific Revenue Share"


def test_only_letter_runs_are_split_digits_and_punctuation_stay() -> None:
    text = "1Globalmobiledevelopers grew to41percentin2023acrossthesurveyedmarkets."
    assert split_glued(text) == "1Global mobile developers grew to41percentin2023across the surveyed markets."


@pytest.mark.parametrize(
    "text",
    [
        "Revenue grew 12% in 2021.",  # nothing glued
        "percentage",  # 10 letters: under the minimum run
        "internationalization",  # 20 letters, but a word
        "XKCDQWERTYZZZZ",  # not English: would split into letters
        "移动开发者市场份额增长mixed中文text",  # CJK and short runs
        "",
    ],
)
def test_left_alone(text: str) -> None:
    assert split_glued(text) == text


def test_min_run_is_configurable() -> None:
    assert split_glued("bluesky") == "bluesky"
    assert split_glued("bluesky", min_run=6) == "blue sky"
    with pytest.raises(OcrInputError, match="min_run must be at least 2"):
        split_glued("bluesky", min_run=1)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789.中"), max_size=60))
def test_only_spaces_are_added(text: str) -> None:
    out = split_glued(text)
    assert out.replace(" ", "") == text.replace(" ", "")
    assert len(out) >= len(text)


def test_word_costs_follow_zipf() -> None:
    costs, max_len = words._word_costs()
    assert costs["the"] < costs["of"] < costs["developers"]  # rank order of the list
    n = 126_136  # words in wordninja 2.0.0's list
    assert costs["the"] == pytest.approx(math.log(1 * math.log(n)))  # rank 0
    assert 20 <= max_len <= 60


def test_missing_word_list_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(words.importlib.util, "find_spec", lambda name: None)
    words._word_costs.cache_clear()
    try:
        with pytest.raises(OcrUnavailableError, match="pip install wordninja"):
            split_glued("GLOBALMOBILEDEVELOPERS")
    finally:
        monkeypatch.undo()
        words._word_costs.cache_clear()
    assert split_glued("GLOBALMOBILEDEVELOPERS") == "GLOBAL MOBILE DEVELOPERS"


def test_known_word_reads_the_list_and_without_it_knows_every_word(monkeypatch: pytest.MonkeyPatch) -> None:
    assert words.known_word("continent") and words.known_word("expanse")
    assert not words.known_word("advertsing") and not words.known_word("goverment")
    monkeypatch.setattr(words.importlib.util, "find_spec", lambda name: None)
    words._word_costs.cache_clear()
    try:
        # No list: no word may be taken for a typo (the spelling corrector then corrects nothing).
        assert words.known_word("advertsing")
    finally:
        monkeypatch.undo()
        words._word_costs.cache_clear()
    assert not words.known_word("advertsing")
