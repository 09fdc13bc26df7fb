"""The document channel and the prior it puts on pages: on a shelf of two companies' filings for
two years, whose cash-flow pages share the same boilerplate, the question's company and year
decide which page comes first. Without the prior a peer's page, which says the words more
often, ranks first (so the test fails without it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.retrieval.channels.documents import KIND, NAMED, DocumentChannel, Naming, kinds_named, named_score, naming
from ragspine.retrieval.search import SearchRequest
from ragspine.scoring.query_terms import query_tokens

LIB = "filings"
COMPANIES = {"northwind": "Northwind Corporation", "contoso": "Contoso Ltd"}
YEARS = (2018, 2019)
CASH_FLOW = ("Consolidated Statement of Cash Flows. Cash flows from investing activities: purchases of "
             "property, plant and equipment (capital expenditure) {a} {b}. Proceeds from sale of businesses 446.")
#: What else a 10-K cover says (the registrant's name and year are what it shares with a question).
COVER_BOILERPLATE = ("Commission file number 1-3285. State of incorporation: Delaware. Securities registered "
                     "pursuant to Section 12(b) of the Act: common stock, par value $.01 per share, listed on "
                     "the New York Stock Exchange. Indicate by check mark whether the registrant is a large "
                     "accelerated filer, an accelerated filer, a non-accelerated filer or a smaller reporting "
                     "company. Aggregate market value of voting stock held by non-affiliates: $98.7 billion.")
#: Only the peers' pages say it twice: page BM25 prefers them.
PEER_NOTE = "Capital expenditure in the cash flow statement was funded from operations; capital expenditure rose."
QUESTION = "What is the FY2018 capital expenditure for Northwind? Use the cash flow statement."


def filing(key: str, year: int) -> bytes:
    name = COMPANIES[key]
    cash = CASH_FLOW.format(a=f"({year - 441:,})", b=f"({year - 645:,})")
    return pdfs.make_pdf([
        Page([f"{name}. Annual report on Form 10-K for the fiscal year ended December 31, {year}.",
              COVER_BOILERPLATE]),
        Page(["Risk factors. Our business is subject to competition, regulation and economic conditions."]),
        Page([cash] if key == "northwind" else [cash, PEER_NOTE]),
    ])


def settings(tmp: Path, **over: object) -> Settings:
    return Settings(data_dir=tmp, dense_model="none", ocr="off", **over)


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine(settings(tmp_path_factory.mktemp("shelf")))
    eng.create_library(LIB)
    for key, name in COMPANIES.items():
        for year in YEARS:
            eng.ingest(LIB, filing(key, year), {"doc_id": f"{key}_{year}", "entity": name, "period": f"FY{year}"})
    try:
        yield eng
    finally:
        eng.close()


def top(eng: Engine, weight: float, lexical: bool = True, mode: str = "bm25") -> list[tuple[str, int]]:
    s = eng.settings.model_copy(update={"document_prior_weight": weight})
    searcher = eng.searcher_for(s)
    if not lexical:
        searcher.lexical = None
        searcher.assembler.lexical = None
    res = searcher.search(SearchRequest(query=QUESTION, libraries=[LIB], mode=mode, top_k=5))
    return [(h.doc_id, h.page) for h in res.hits]


def test_without_the_prior_a_peers_page_comes_first(shelf: Engine) -> None:
    assert top(shelf, 0.0)[0][0] != "northwind_2018"


@pytest.mark.parametrize("lexical", [True, False], ids=["lexical index", "store"])
def test_the_named_company_and_year_decide_the_page(shelf: Engine, lexical: bool) -> None:
    hits = top(shelf, 0.3, lexical=lexical)
    assert hits[0] == ("northwind_2018", 3)


def test_the_answer_names_its_fusion_and_the_document_score(shelf: Engine) -> None:
    s = shelf.settings.model_copy(update={"document_prior_weight": 0.3})
    res = shelf.searcher_for(s).search(SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=3))
    assert "document prior 0.3" in res.fusion and res.fusion.startswith("rrf(k=60; ")
    assert res.hits[0].scores["document"] == 1.0  # named with its year
    res = shelf.searcher_for(shelf.settings.model_copy(update={"document_prior_weight": 0.0})).search(
        SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=3))
    assert "document prior" not in res.fusion and res.hits[0].scores["document"] is None


def test_document_channel_scores_named_documents(shelf: Engine) -> None:
    ch = DocumentChannel(shelf.libraries)
    active = shelf.libraries.active_versions(LIB)
    # names Northwind and 2018: NAMED + YEAR; Northwind 2019: NAMED; Contoso: not named at all
    assert ch.scores(LIB, QUESTION, active) == {"northwind_2018": 1.0, "northwind_2019": 0.7}
    assert ch.scores(LIB, "Contoso FY2019 capital expenditure", active) == {"contoso_2019": 1.0, "contoso_2018": 0.7}
    assert ch.scores(LIB, "capital expenditure in 2018", active) == {}  # a year alone names nothing


def test_a_name_is_named_by_all_its_distinctive_words() -> None:
    robotics = naming({"doc_id": "r", "meta": {"entity": "Acme Robotics Inc."}, "profile": {"fiscal_year": 2023}})
    holdings = naming({"doc_id": "h", "meta": {"entity": "Acme Holdings plc", "period": "FY2023"}})
    three_m = naming({"doc_id": "m", "meta": {}, "profile": {"issuer": "3M Company", "period": "2018-Q3",
                                                             "aliases": ["Minnesota Mining and Manufacturing"]}})
    assert robotics == Naming((frozenset({"acme", "robotics"}),), frozenset({"2023"}))
    assert holdings.names == (frozenset({"acme", "holdings"}),)
    q = set(query_tokens("Acme Robotics revenue 2023"))
    assert named_score(q, robotics) == 1.0 and named_score(q, holdings) == 0.0
    assert named_score(set(query_tokens("3M capex")), three_m) == 0.7
    assert named_score(set(query_tokens("Minnesota Mining and Manufacturing in 2018")), three_m) == 1.0
    assert named_score(set(query_tokens("What is the FY2018 capex?")), three_m) == 0.0


def test_odd_metadata_names_nothing_it_should_not() -> None:
    # only legal-form words: no distinctive name, never named (else every question would name it)
    assert naming({"doc_id": "x", "meta": {"entity": "The Company, Inc."}}).names == ()
    # lists, numbers, booleans and blanks, as user metadata may hold them
    n = naming({"doc_id": "y", "meta": {"entity": ["Acme Robotics", "  "], "issuer": 42, "period": True,
                                        "fiscal_year": 2023}})
    assert n == Naming((frozenset({"acme", "robotics"}), frozenset({"42"})), frozenset({"2023"}))
    assert named_score(set(query_tokens("the company")), naming({"doc_id": "x", "meta": {"entity": "The Company"}})) == 0.0
    assert naming({"doc_id": "z"}) == Naming((), frozenset())


@pytest.mark.parametrize(("question", "kinds"), [
    ("How many figures are there in this paper?", {"research_paper"}),
    ("What is the second FAQ shown in the slides?", {"slides"}),
    ("Which number shall I call, according to this guidebook?", {"manual"}),
    ("What was 3M's capital expenditure in its 2018 10-K?", {"10-K"}),
    ("What did the annual report say about margins?", {"10-K", "annual_report"}),
    ("这份年报中的营业收入是多少？", {"annual_report"}),
    ("What was revenue in 2018?", set()),
    ("How much paper did the mill produce?", set()),  # "paper" alone is a product, not a kind
    # ordinary financial wording that names no kind
    ("Why did the slide in gross margin continue?", set()),
    ("Margin fell 2 ppt; what did Apptio say about the basis of presentation?", set()),
    ("What were sales of the paper segment in 2019?", set()),
    ("How many manual journal entries were reversed?", set()),
    ("Who received a $10K bonus?", set()),
])
def test_the_kinds_a_question_names(question: str, kinds: set[str]) -> None:
    assert kinds_named(question) == kinds


def test_a_named_kind_adds_to_a_name_and_counts_alone() -> None:
    deck = naming({"doc_id": "d", "meta": {"doc_type": "slides"}, "profile": {"doc_type": "report"}})
    filing = naming({"doc_id": "f", "meta": {"entity": "Northwind Corp"}, "profile": {"doc_type": "10-K",
                                                                                        "fiscal_year": 2018}})
    assert deck.kinds == {"slides"}  # the caller's kind wins over the profile's
    assert naming({"doc_id": "m", "meta": {"doc_type": "memo"}}).kinds == frozenset()  # not a kind we know
    q = set(query_tokens("Northwind capital expenditure in the 10-K"))
    assert named_score(q, filing, kinds_named("Northwind capital expenditure in the 10-K")) == min(1.0, NAMED + KIND)
    assert named_score(q, filing) == NAMED  # without the kind: the name alone
    q18 = set(query_tokens("Northwind 2018 10-K capex"))
    assert named_score(q18, filing, frozenset({"10-K"})) == 1.0  # capped
    assert named_score(set(query_tokens("the slides' third FAQ")), deck, frozenset({"slides"})) == KIND
    assert named_score(set(query_tokens("the slides' third FAQ")), deck) == 0.0


def test_the_kind_a_question_names_ranks_that_kind_of_document_first(tmp_path: Path) -> None:
    # The same sentence in a paper and in a deck: page BM25 cannot tell them apart (the paper's
    # page says it twice, so it comes first); the question's "in the slides" decides.
    eng = Engine(Settings(data_dir=tmp_path / "data", dense_model="none"))
    try:
        eng.create_library(LIB)
        eng.ingest_text(LIB, "paper", "Retrieval latency fell to 12 ms with batching; retrieval latency fell.",
                        {"doc_type": "research_paper"}, title="Batching for retrieval")
        for i in range(8):  # the rest of the shelf: documents that mention retrieval in passing
            eng.ingest_text(LIB, f"other{i}", f"Memo {i}: the archive's retrieval desk moves to the third floor "
                            "in spring, with new shelving, lighting and a reading room for visitors.",
                            {"doc_type": "report"}, title=f"Memo {i}")
        eng.ingest_text(LIB, "deck", "Retrieval latency fell to 12 ms with batching.", {"doc_type": "slides"},
                        title="Quarterly engineering review")

        def first(question: str, **over: object) -> str:
            s = eng.settings.model_copy(update=over)
            res = eng.searcher_for(s).search(SearchRequest(query=question, libraries=[LIB], mode="bm25", top_k=2))
            return res.hits[0].doc_id

        assert first("How far did retrieval latency fall with batching?") == "paper"
        assert first("In the slides, how far did retrieval latency fall with batching?") == "deck"
        assert first("In this paper, how far did retrieval latency fall with batching?") == "paper"
        assert first("In the slides, how far did retrieval latency fall with batching?", document_prior_weight=0.0) == "paper"
    finally:
        eng.close()


def test_a_name_misspelt_by_one_edit_still_names_its_document(shelf: Engine) -> None:
    ch = DocumentChannel(shelf.libraries)
    active = shelf.libraries.active_versions(LIB)
    named = {"northwind_2018": 1.0, "northwind_2019": 0.7}
    assert ch.scores(LIB, QUESTION.replace("Northwind", "Northwnid"), active) == named  # swapped letters
    assert ch.scores(LIB, QUESTION.replace("Northwind", "Nortwind"), active) == named  # one dropped
    assert ch.scores(LIB, QUESTION.replace("Northwind", "Nortwnid"), active) == {}  # two edits: no name
    assert ch.scores(LIB, QUESTION.replace("Northwind", "northwnid"), active) == {}  # not written as a name
