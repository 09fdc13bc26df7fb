"""A misspelt word the library does not hold also searches the library's word: "advertsing"
finds the page about advertising (no page holds the typo, so without the correction the
question's other words decide), and the answer says what was searched instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.ocr.words import known_word
from ragspine.retrieval.search import SearchRequest
from ragspine.retrieval.vocabulary import document_holds

LIB = "filings"
PAGES = {
    "marketing": "Advertising expense was 714 million in 2015; advertising is expensed as incurred.",
    "leases": "Operating lease expense was 34 million in 2015 for the offices we rent.",
    "content": "Content expense grew in 2015 with the streaming library and its advertising; content amortises.",
    "other": "The board met four times in 2015. Advertising budgets are reviewed by the board.",
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=tmp_path_factory.mktemp("spell"), dense_model="none", ocr="off"))
    eng.create_library(LIB)
    for doc_id, text in PAGES.items():
        eng.ingest_text(LIB, doc_id, text, title=doc_id.title())
    try:
        yield eng
    finally:
        eng.close()


def _search(eng: Engine, query: str, *, lexical: bool = True, scope: str | None = None, **over: object):  # type: ignore[no-untyped-def]
    searcher = eng.searcher_for(eng.settings.model_copy(update=over))
    if not lexical:
        searcher.lexical = None
        searcher.assembler.lexical = None
    req = SearchRequest(query=query, libraries=[LIB], mode="bm25", top_k=4)
    if scope is not None:
        req = req.scoped({LIB: [{"field": "doc_id", "op": "in", "value": [scope, "leases"]}]})
    return searcher.search(req)


QUESTION = "What was the advertsing expense in 2015?"


def test_the_misspelt_word_finds_its_page_and_the_answer_says_so(engine: Engine) -> None:
    res = _search(engine, QUESTION)
    assert res.hits[0].doc_id == "marketing"
    assert "spelling: also searched 'advertising' for 'advertsing'" in res.notes


def test_without_the_correction_the_other_words_decide(engine: Engine) -> None:
    res = _search(engine, QUESTION, spelling_corrections=False)
    assert res.hits[0].doc_id != "marketing"  # "expense" and "2015": the leases and content pages tie it
    assert not any(n.startswith("spelling") for n in res.notes)


def test_no_correction_without_the_in_memory_index(engine: Engine) -> None:
    res = _search(engine, QUESTION, lexical=False)
    assert not any(n.startswith("spelling") for n in res.notes)


def test_no_correction_under_a_keys_filter(engine: Engine) -> None:
    # The key sees "marketing" and "leases"; a correction would still be read from every document.
    res = _search(engine, QUESTION, scope="marketing")
    assert not any(n.startswith("spelling") for n in res.notes)


def test_an_english_word_is_searched_as_written(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # "expanse" is a word the library does not hold, one edit from "expense", which three
    # passages hold: only the word list keeps it as written.
    question = "How wide was the expanse in 2015?"
    assert known_word("expanse") and not known_word("advertsing")
    assert not any(n.startswith("spelling") for n in _search(engine, question).notes)
    monkeypatch.setattr("ragspine.retrieval.vocabulary.known_word", lambda word: False)
    assert "spelling: also searched 'expense' for 'expanse'" in _search(engine, question).notes


def test_a_word_written_as_a_name_is_not_corrected_to_a_word(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # "Expanse" mid-sentence is a name (a company, a ship); as a word it would be "expense".
    # (The word list is turned off so that only the name rule can keep it.)
    monkeypatch.setattr("ragspine.retrieval.vocabulary.known_word", lambda word: False)
    assert "spelling: also searched 'expense' for 'expanse'" in _search(engine, "How wide was the expanse?").notes
    assert not any(n.startswith("spelling") for n in _search(engine, "How wide was the Expanse?").notes)


def test_which_words_a_document_holds(engine: Engine) -> None:
    lexical = engine.searcher_for(engine.settings).lexical
    assert document_holds(lexical, LIB, "marketing", ["2015", "714", "2016", "leases"]) == {"2015", "714"}
    # No index, or a document it does not know: it cannot tell (the grade's rule stays off).
    assert document_holds(None, LIB, "marketing", ["2015"]) is None
    assert document_holds(lexical, LIB, "no-such-document", ["2015"]) is None
    assert document_holds(lexical, LIB, "marketing", []) == set()
