"""A company's name misspelt by one edit still names it; ordinary words and sentence starts do not."""

from __future__ import annotations

import pytest

from ragspine.scoring.spelling import MAX_WORDS, MIN_LENGTH, misspelt_names, one_edit

NAMES = {"netflix", "amazon", "boeing", "northwind", "3m", "acme", "robotics"}


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("neflix", "netflix", True),  # a letter dropped
    ("netfliix", "netflix", True),  # one added
    ("amazom", "amazon", True),  # one changed
    ("netfilx", "netflix", True),  # two adjacent swapped
    ("netflix", "netflix", False),  # the same word is no edit
    ("nflix", "netflix", False),  # two dropped
    ("amzoan", "amazon", False),  # two swaps
    ("xetflix", "netflax", False),  # two changes
    ("boeing", "being", True),
])
def test_one_edit(a: str, b: str, expected: bool) -> None:
    assert one_edit(a, b) is expected and one_edit(b, a) is expected


@pytest.mark.parametrize(("question", "expected"), [
    ("What is sales to working capital ratio of Neflix in FY 2015?", {"netflix"}),
    ("what is operating leases occurred in FY 2015 for Netfilx?", {"netflix"}),
    ("What was the revenue of Amazom and (Northwnd) in 2018?", {"amazon", "northwind"}),
    ("What is being said about the fleet?", set()),  # not capitalised: a word, not a name
    ("Being a supplier, what did the company say?", set()),  # the first word of the question
    ("Revenue rose. Being a supplier, what did they say?", set()),  # the first word of a sentence
    ("What did Netflix say about streaming?", set()),  # spelt right: taken as written
    ("What did Acmee say?", set()),  # "acme" is shorter than MIN_LENGTH: too many words are near it
])
def test_misspelt_names(question: str, expected: set[str]) -> None:
    assert misspelt_names(question, NAMES) == expected


def test_short_names_are_never_guessed() -> None:
    assert MIN_LENGTH == 5
    assert misspelt_names("What did Acne report?", {"acme"}) == set()
    assert misspelt_names("What did Acmes report?", {"acmes"}) == set()  # itself
    assert misspelt_names("What did Acmex report?", {"acmes"}) == {"acmes"}


def test_only_the_first_words_are_read() -> None:
    filler = " ".join(["and Zzzzzz"] * MAX_WORDS)
    assert misspelt_names(f"What of {filler} and Neflix?", NAMES) == set()  # past the bound
    assert misspelt_names(f"What of Neflix {filler}?", NAMES) == {"netflix"}
