"""A question asking for a ratio finds the statements that hold its inputs: two companies'
filings with the same boilerplate, where a prose page of each says "return on assets" and the
statements print only "Net income" and "Total assets". The document prior puts the asked
company's pages first; among them, without the line items, the income statement ranks below the
peer's prose page too (so the test fails without them); with them it comes second, after the
company's page that names the metric."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.catalog.ids import point_id
from ragspine.retrieval.fusion import Cand
from ragspine.retrieval.hits import HitAssembler
from ragspine.retrieval.search import SearchRequest

LIB = "filings"


def filing(company: str, year: int) -> bytes:
    return pdfs.make_pdf([
        Page([f"{company} Inc. annual report on Form 10-K for fiscal {year}."]),
        Page(["Management's discussion. Among the measures of performance we discuss with our board "
              "each year is the return on assets."]),
        Page([f"{company} consolidated statements of operations, fiscal {year}.",
              f"Revenue 5,210 Cost of sales 3,100 Operating income 1,020 Net income 802 ({year})"]),
        Page([f"{company} consolidated balance sheets, fiscal {year}.",
              f"Total current assets 2,400 Total assets 9,870 Total liabilities 5,100 ({year})"]),
    ])


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=tmp_path_factory.mktemp("filings"), dense_model="none", ocr="off"))
    eng.create_library(LIB)
    for name in ("Initech", "Globex"):
        eng.ingest(LIB, filing(name, 2018), {"doc_id": f"{name.lower()}-10k-2018", "entity": name, "period": "FY2018"})
    try:
        yield eng
    finally:
        eng.close()


def ranked(eng: Engine, query: str, weight: float, lexical: bool = True) -> list[tuple[str, int]]:
    searcher = eng.searcher_for(eng.settings.model_copy(update={"line_item_weight": weight}))
    if not lexical:
        searcher.lexical = None
        searcher.assembler.lexical = None
    res = searcher.search(SearchRequest(query=query, libraries=[LIB], mode="bm25", top_k=8))
    return [(h.doc_id, h.page) for h in res.hits]


QUESTION = "What is Initech's FY2018 return on assets?"


INCOME, BALANCE = ("initech-10k-2018", 3), ("initech-10k-2018", 4)


def test_without_line_items_the_income_statement_is_below_a_peers_prose(shelf: Engine) -> None:
    top = ranked(shelf, QUESTION, 0.0)
    assert top[0] == ("initech-10k-2018", 2)  # the company's page that names the metric
    assert top.index(INCOME) > top.index(("globex-10k-2018", 2))


@pytest.mark.parametrize("lexical", [True, False], ids=["lexical index", "store"])
def test_with_line_items_the_income_statement_rises_above_the_peers(shelf: Engine, lexical: bool) -> None:
    top = ranked(shelf, QUESTION, 1.0, lexical=lexical)
    assert top[:2] == [("initech-10k-2018", 2), INCOME]
    assert top.index(INCOME) < min(i for i, (doc, _) in enumerate(top) if doc == "globex-10k-2018")
    # "Total assets" is the question's own word: the balance sheet neither gains nor loses.
    assert BALANCE in top


def test_a_question_naming_no_metric_ranks_as_without(shelf: Engine) -> None:
    q = "What does Initech's management discuss with its board?"
    assert ranked(shelf, q, 1.0) == ranked(shelf, q, 0.0)


def test_the_answer_says_which_lines_were_searched(shelf: Engine) -> None:
    def notes(weight: float, query: str = QUESTION) -> list[str]:
        searcher = shelf.searcher_for(shelf.settings.model_copy(update={"line_item_weight": weight}))
        return searcher.search(SearchRequest(query=query, libraries=[LIB], mode="bm25", top_k=3)).notes

    assert "line_items: BM25 also searched net income, total assets" in notes(1.0)
    assert not any(n.startswith("line_items") for n in notes(0.0))
    assert not any(n.startswith("line_items") for n in notes(1.0, "What does Initech's board discuss?"))


def test_a_page_found_whole_cites_the_passage_holding_what_was_searched(tmp_path: Path) -> None:
    # A page the page channel alone found (no passage of it among the passage channel's
    # candidates) cites the passage holding the most of what was searched: the question's terms
    # and the tokens the search added, not the note that says "2018" alone.
    note = f"Statements of operations for fiscal 2018. {pdfs.words(400)}"
    lines = "Revenue 5,210 Cost of sales 3,100 Operating income 1,020 Net income 802"
    eng = Engine(Settings(data_dir=tmp_path, dense_model="none", ocr="off"))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, pdfs.make_pdf([Page([note, lines])]), {"doc_id": "initech-10k-2018"})
        assembler = eng.searcher_for(eng.settings).assembler
        key = (LIB, "initech-10k-2018", 1)
        req = SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=1)

        def cited(also: tuple[str, ...]) -> str:
            cands = {key: Cand(page_id=point_id("initech-10k-2018", 1, 1, "page"))}
            return assembler.hits(req, [key], cands, {}, also)[0].text

        assert cited(()).startswith("Statements of operations for fiscal 2018.")
        assert "Net income 802" in cited(("net", "income"))
    finally:
        eng.close()


def test_the_search_hands_the_citations_its_added_tokens(shelf: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, ...]] = []
    original = HitAssembler.hits

    def spy(self, req, keys, cands, timings, also=()):  # type: ignore[no-untyped-def]
        seen.append(tuple(also))
        return original(self, req, keys, cands, timings, also)

    monkeypatch.setattr(HitAssembler, "hits", spy)
    ranked(shelf, QUESTION, 1.0)
    ranked(shelf, QUESTION.replace("Initech", "Initeck"), 1.0)  # a name one edit off
    ranked(shelf, QUESTION, 0.0)
    assert seen == [("net", "income", "assets"), ("net", "income", "assets", "initech"), ()]
