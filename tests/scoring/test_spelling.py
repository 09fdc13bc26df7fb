"""A company's name misspelt by one edit still names it; ordinary words and sentence starts do
not. A word the library does not hold and English does not know is corrected to the library's
word one edit away held by the most passages."""

from __future__ import annotations

import pytest

from ragspine.scoring.spelling import (
    MAX_CORRECTIONS,
    MAX_TERM,
    MAX_TRIED,
    capitalised,
    MAX_WORDS,
    MIN_DF,
    MIN_LENGTH,
    corrections,
    edits1,
    misspelt_names,
)

NAMES = frozenset({"netflix", "amazon", "boeing", "northwind", "3m", "acme", "robotics"})


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
def test_edits1_holds_exactly_the_words_one_edit_away(a: str, b: str, expected: bool) -> None:
    assert (b in edits1(a)) is expected and (a in edits1(b)) is expected


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
    assert set(misspelt_names(question, NAMES, lambda w: False).values()) == expected


def test_an_english_word_names_no_company() -> None:
    # "Human" is one edit from Humana and "Macron" from Micron, but they are words.
    names = frozenset({"humana", "micron"})
    english = {"human", "macron", "capital"}.__contains__
    assert misspelt_names("What does the Human Capital section say?", names, english) == {}
    assert misspelt_names("What did President Macron say?", names, english) == {}
    assert misspelt_names("What did Humanna say?", names, english) == {"humanna": "humana"}
    assert misspelt_names("What did Humanna say?", names, lambda w: False) == {"humanna": "humana"}


def test_short_names_are_never_guessed() -> None:
    assert MIN_LENGTH == 5
    no = lambda w: False  # noqa: E731
    assert misspelt_names("What did Acne report?", frozenset({"acme"}), no) == {}
    assert misspelt_names("What did Acmes report?", frozenset({"acmes"}), no) == {}  # itself
    assert misspelt_names("What did Acmex report?", frozenset({"acmes"}), no) == {"acmex": "acmes"}


def test_only_the_first_words_are_read() -> None:
    filler = " ".join(["and Zzzzzz"] * MAX_WORDS)
    no = lambda w: False  # noqa: E731
    assert misspelt_names(f"What of {filler} and Neflix?", NAMES, no) == {}  # past the bound
    assert misspelt_names(f"What of Neflix {filler}?", NAMES, no) == {"neflix": "netflix"}


def test_the_words_written_as_names() -> None:
    assert capitalised("  Being of the Neflix (Amazom) company. Revenue rose; \"Netfilx\" said Human") == [
        "neflix", "amazom", "netfilx", "human"]  # not the first word, nor "Revenue" after a full stop
    assert capitalised("ＮＥＴＦＬＩＸ and Ｎｅｆｌｉｘ") == ["neflix"]  # full-width letters read as ASCII


# -- words the library holds ----------------------------------------------------------------------

LIBRARY = {"advertising": 35, "advertisings": 1, "government": 253, "company": 2379, "survey": 322,
           "contingent": 17, "netflix": 761, "rare": 1, "rarely": 2}


def df(words):  # type: ignore[no-untyped-def]
    return [LIBRARY.get(w, 0) for w in words]


def english(word: str) -> bool:
    return word in {"continent", "flight", "advertising", "government"}


def test_edits1_is_every_word_one_edit_away() -> None:
    e = edits1("abc")
    assert {"ab", "bc", "ac", "bac", "acb", "abd", "xbc", "abcd", "zabc"} <= e
    assert "abc" not in e and "cab" not in e  # itself; two edits
    # 6 deletions + 5 swaps + 6 x 25 changes + 7 x 26 insertions = 343, less the 6 insertions
    # that repeat a letter next to itself, each made twice ("aabcdef" before or after the "a")
    assert len(edits1("abcdef")) == 343 - 6


def test_a_misspelt_word_is_corrected_to_the_librarys_word() -> None:
    terms = ["advertsing", "goverment", "expense", "survry", "netfilx"]
    assert corrections(terms, df, english) == {"advertsing": "advertising", "goverment": "government",
                                               "survry": "survey", "netfilx": "netflix"}


def test_what_is_not_corrected() -> None:
    assert corrections(["continent"], df, english) == {}  # an English word: kept, not "contingent"
    assert corrections(["company"], df, english) == {}  # the library holds it
    assert corrections(["rarey"], df, english) == {}  # "rarely" is in only 2 passages, under MIN_DF
    assert corrections(["zorvintal"], df, english) == {}  # nothing near it
    assert corrections(["survy"[:4]], df, english) == {}  # shorter than MIN_LENGTH
    assert corrections(["成本费用"], df, english) == {}  # not ASCII letters
    assert MIN_DF == 3


def test_the_most_held_word_wins() -> None:
    # "advertisings" is one edit from "advertsings" too, but one passage holds it.
    assert corrections(["advertsings"], df, english) == {}
    held = {"catle": 0, "cattle": 5, "castle": 9}
    assert corrections(["catle"], lambda ws: [held.get(w, 0) for w in ws], lambda w: False) == {"catle": "castle"}


def test_at_most_a_few_terms_are_corrected() -> None:
    terms = ["advertsing", "goverment", "survry", "companay", "netfilx"]
    assert len(corrections(terms, df, english)) == MAX_CORRECTIONS == 4


def test_a_term_longer_than_any_word_is_not_looked_up() -> None:
    looked: list[int] = []

    def counting(words):  # type: ignore[no-untyped-def]
        looked.append(len(words))
        return [0] * len(words)

    long = "advertising" * 3  # 33 letters
    assert len(long) > MAX_TERM
    assert corrections([long], counting, lambda w: False) == {} and looked == []
    corrections([long[:MAX_TERM]], counting, lambda w: False)
    assert looked[0] == 1 and looked[1] > 1000  # at the bound: the term, then its ~1,700 neighbours


def test_a_name_is_not_corrected_to_a_word() -> None:
    # "Zillow" is no English word and the library does not hold it; "willow" is one edit away.
    held = {"willow": 9}.get
    lookup = lambda ws: [held(w, 0) for w in ws]  # noqa: E731
    assert corrections(["zillow"], lookup, lambda w: False) == {"zillow": "willow"}
    assert corrections(["zillow"], lookup, lambda w: False, skip={"zillow"}) == {}


def test_at_most_a_few_unknown_terms_are_looked_up() -> None:
    looked: list[int] = []

    def counting(words):  # type: ignore[no-untyped-def]
        looked.append(len(words))
        return [0] * len(words)

    corrections([f"zzzz{c}q" for c in "abcdefghijklmnop"], counting, lambda w: False)
    assert len(looked) == 1 + MAX_TRIED  # the terms themselves, then the neighbours of MAX_TRIED
