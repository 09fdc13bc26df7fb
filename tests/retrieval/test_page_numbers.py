"""Pages named by number: "the chart on page 4" lifts, in each document, the page at place 4 and
the pages that print "4" (a report's cover and contents shift its printed numbers), among the
pages the channels found. Without the prior, the page that says the question's words most often
comes first (so the tests fail without it). The questions write their numbers as words ("page
four"): a page's printed "4" is a BM25 term of its own, which would find it without the prior.
The weight is 2 here: on pages this alike, the last-ranked named page's normalised score is 0,
and at the default 1 it would tie the loud page rather than pass it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import pdfs
from pdfs import Page
from ragspine.api.search import Hit
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.retrieval.channels.page_numbers import Numbering, PageNumbers, numbering
from ragspine.retrieval.search import SearchRequest
from ragspine.scoring.priors import named_pages

LIB = "reports"
PAGE = "Revenue by segment. The chart shows revenue for each segment of the group in the year."
#: Said more often on one page of each report: BM25's favourite without the prior.
LOUD = "Revenue chart: revenue by segment, revenue by region, revenue by product line; the chart of revenue."


def report(offset: int, loud: int, pages: int = 9) -> bytes:
    """``pages`` pages; the first ``offset`` print no number, the others print ``place - offset``."""
    return pdfs.make_pdf([Page([LOUD if n == loud else PAGE, "Notes on the year follow."],
                               footer=str(n - offset) if n > offset else None) for n in range(1, pages + 1)])


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=tmp_path_factory.mktemp("pages"), dense_model="none", ocr="off"))
    eng.create_library(LIB)
    eng.ingest(LIB, report(offset=2, loud=5), {"doc_id": "alpha"})  # printed 4 is its 6th page
    eng.ingest(LIB, report(offset=0, loud=3, pages=8), {"doc_id": "beta"})  # numbered from its cover
    try:
        yield eng
    finally:
        eng.close()


def search(eng: Engine, query: str, weight: float, lexical: bool = True, top_k: int = 5):  # type: ignore[no-untyped-def]
    searcher = eng.searcher_for(eng.settings.model_copy(update={"page_number_weight": weight}))
    if not lexical:
        searcher.lexical = None
        searcher.assembler.lexical = None
    return searcher.search(SearchRequest(query=query, libraries=[LIB], mode="bm25", top_k=top_k))


def pages_of(res) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    return [(h.doc_id, h.page) for h in res.hits]


def test_the_printed_numbers_are_in_the_profile(shelf: Engine) -> None:
    docs = {d["doc_id"]: d for d in shelf.documents(LIB)}
    assert docs["alpha"]["profile"]["printed_pages"] == {str(n): [n - 2] for n in range(3, 10)}
    assert docs["beta"]["profile"]["printed_pages"] == {}


@pytest.mark.parametrize("question", ["What does the revenue chart on page four show?",
                                      "What does the revenue chart on the last page show?"])
def test_without_the_prior_the_loud_pages_come_first(shelf: Engine, question: str) -> None:
    assert pages_of(search(shelf, question, 0.0))[:2] == [("alpha", 5), ("beta", 3)]


@pytest.mark.parametrize("lexical", [True, False], ids=["lexical index", "store"])
def test_a_named_page_comes_first_by_place_and_by_print(shelf: Engine, lexical: bool) -> None:
    res = search(shelf, "What does the revenue chart on page four show?", 2.0, lexical=lexical)
    assert set(pages_of(res)[:3]) == {("alpha", 4), ("alpha", 6), ("beta", 4)}
    assert pages_of(res)[3] == ("alpha", 5)
    assert "page numbers 2" in res.fusion


def test_the_last_page_of_each_document(shelf: Engine) -> None:
    res = search(shelf, "What does the revenue chart on the last page show?", 2.0)
    assert set(pages_of(res)[:2]) == {("alpha", 9), ("beta", 8)}
    res = search(shelf, "What does the revenue chart on the second last page show?", 2.0)
    assert set(pages_of(res)[:2]) == {("alpha", 8), ("beta", 7)}


def test_a_question_that_names_no_page_is_ranked_as_without_the_prior(shelf: Engine) -> None:
    with_prior = search(shelf, "What does the revenue chart show?", 1.0, top_k=10)
    without = search(shelf, "What does the revenue chart show?", 0.0, top_k=10)
    assert pages_of(with_prior) == pages_of(without)
    assert "page numbers" not in with_prior.fusion


def test_a_page_no_channel_found_is_not_added(shelf: Engine) -> None:
    # page 4 exists in both reports, but a filter keeps only beta's pages: alpha's is not injected
    searcher = shelf.searcher_for(shelf.settings)
    res = searcher.search(SearchRequest(query="revenue chart on page four", libraries=[LIB], mode="bm25", top_k=3,
                                        filters=[{"field": "doc_id", "op": "eq", "value": "beta"}]))
    assert pages_of(res)[0] == ("beta", 4) and {d for d, _ in pages_of(res)} == {"beta"}


def test_numbering_resolves_place_print_and_the_end() -> None:
    entry = {"page_numbers": [1, 2, 3, 5, 6], "pages_total": 6,
             "profile": {"printed_pages": {"5": [3], "6": [4]}}}
    n = numbering(entry)
    assert n == Numbering(frozenset({1, 2, 3, 5, 6}), 6, {3: (5,), 4: (6,)}, {}, {5: (3,), 6: (4,)})
    assert n.named(frozenset({3})) == {3, 5}  # place 3, and the page printing 3
    assert n.named(frozenset({4})) == {6}  # place 4 was not kept (RESTRICTED); page 6 prints 4
    assert n.named(frozenset({-1, -2})) == {6, 5}
    assert n.named(frozenset({-6, -7, 99})) == {1}
    # a profile written before printed pages were read: places only
    assert numbering({"page_numbers": [1, 2], "pages_total": 2, "profile": {}}).named(frozenset({2})) == {2}


def test_whether_a_file_has_a_page_counts_its_dropped_pages_and_printed_numbers() -> None:
    n = numbering({"page_numbers": [1, 2, 3, 5, 6], "pages_total": 6,
                   "profile": {"printed_pages": {"5": [3], "6": [40]}}})
    assert n.has_any(frozenset({4}))  # place 4 was dropped at index build: the file has it all the same
    assert n.has_any(frozenset({40}))  # no place 40, but page 6 prints it
    assert n.has_any(frozenset({-6})) and not n.has_any(frozenset({-7}))  # counted from the end
    assert not n.has_any(frozenset({7, 8, 100}))
    assert n.has_any(frozenset({100, 6}))  # any of them


def test_has_any_by_document(shelf: Engine) -> None:
    ch = PageNumbers(shelf.libraries)
    active = shelf.libraries.active_versions(LIB)
    assert ch.has_any(LIB, active, "beta", frozenset({9})) is False  # 8 pages, numbered from 1
    assert ch.has_any(LIB, active, "alpha", frozenset({9})) is True  # 9 pages
    assert ch.has_any(LIB, active, "alpha", frozenset({7})) is True  # place 7 (it prints 5)
    assert ch.has_any(LIB, active, "nobody", frozenset({1})) is None
    # what the corrective grade asks through the searcher
    assert shelf.searcher.document_has_pages(LIB, "beta", frozenset({9})) is False
    assert shelf.searcher.named_pages(LIB, "alpha", frozenset({4})) == {4, 6}
    assert shelf.searcher.named_pages(LIB, "beta", frozenset({9})) == frozenset()
    assert shelf.searcher.named_pages(LIB, "nobody", frozenset({1})) == frozenset()


def test_the_corrective_grade_takes_a_named_page_first_whatever_the_channels_say(shelf: Engine) -> None:
    # "page 9" is only alpha's; beta (8 pages) has none: asked of beta's loud page, the grade
    # says so; asked of alpha, its page 9 answers.
    res = shelf.search({"query": "revenue chart on page 9", "libraries": [LIB], "mode": "bm25", "corrective": True,
                        "filters": [{"field": "doc_id", "op": "eq", "value": "beta"}]})
    assert res.abstained and res.corrective["reason"] == "the first hit's document has no page 9"
    res = shelf.search({"query": "revenue chart on page 9", "libraries": [LIB], "mode": "bm25", "corrective": True})
    assert not res.abstained and (res.hits[0].doc_id, res.hits[0].page) == ("alpha", 9)


def test_named_pages_arithmetic() -> None:
    ranking = [("a", 10.0), ("b", 8.0), ("c", 6.0), ("d", 2.0)]
    # normalised: a 1, b 0.75, c 0.5, d 0; c named gains 0.3 -> 0.8, above b
    out = named_pages(ranking, lambda k: k == "c", 0.3, depth=4)
    assert [k for k, _ in out] == ["a", "c", "b", "d"]
    assert dict(out)["c"] == pytest.approx(0.8)
    assert [k for k, _ in named_pages(ranking, lambda k: k == "d", 1.0, depth=4)] == ["a", "d", "b", "c"]
    assert named_pages(ranking, lambda k: True, 0.0, depth=4) == ranking
    with pytest.raises(ValueError, match="page-number weight"):
        named_pages(ranking, lambda k: True, -1.0, depth=4)


def test_page_numbers_channel_reads_the_manifest(shelf: Engine) -> None:
    ch = PageNumbers(shelf.libraries)
    active = shelf.libraries.active_versions(LIB)
    assert ch.pages(LIB, frozenset({4}), active) == {"alpha": {4, 6}, "beta": {4}}
    assert ch.pages(LIB, frozenset({9}), active) == {"alpha": {9}}  # beta has 8 pages; alpha prints no 9
    assert ch.pages(LIB, frozenset(), active) == {}


def test_the_setting_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="page_number_weight"):
        Settings(data_dir=tmp_path, page_number_weight=-0.5)


def test_a_figure_named_by_number_lifts_the_page_of_its_caption(tmp_path: Path) -> None:
    # Both papers mention Figure 3 in their prose on page 1; each page 2 says the question's words
    # most often; only the captions say where Figure 3 is: page 4 of one, page 3 of the other.
    def paper(caption_page: int) -> bytes:
        pages = [Page(["Introduction. Figure 3 summarises the accuracy results; Figure 1 the data."]),
                 Page([LOUD])]
        for n in (3, 4):
            pages.append(Page(["Figure 3: Accuracy by model" if n == caption_page else "Figure 2: Data sizes",
                               "Bars for each model and year."]))
        return pdfs.make_pdf(pages)

    eng = Engine(Settings(data_dir=tmp_path, dense_model="none", ocr="off"))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, paper(4), {"doc_id": "p1"})
        eng.ingest(LIB, paper(3), {"doc_id": "p2"})
        question = "What does the revenue chart in Figure 3 show?"
        assert {d["doc_id"]: d["profile"]["captions"].get("figure:3") for d in eng.documents(LIB)} == {
            "p1": [4], "p2": [3]}
        assert pages_of(search(eng, question, 0.0))[:2] == [("p1", 2), ("p2", 2)]
        assert set(pages_of(search(eng, question, 2.0))[:2]) == {("p1", 4), ("p2", 3)}
    finally:
        eng.close()


def test_a_hit_shows_the_number_printed_on_its_page(shelf: Engine) -> None:
    res = search(shelf, "What does the revenue chart on page four show?", 2.0, top_k=10)
    printed = {(h.doc_id, h.page): h.printed_pages for h in res.hits}
    assert printed[("alpha", 6)] == [4] and printed[("alpha", 4)] == [2]
    assert printed[("beta", 4)] == []  # printed as its place: nothing to add
    assert res.hits[0].to_json().get("printed_pages", []) == res.hits[0].printed_pages
    # in the answer's model too
    alpha6 = next(h for h in res.hits if (h.doc_id, h.page) == ("alpha", 6))
    assert Hit.model_validate(alpha6.to_json()).printed_pages == [4]
