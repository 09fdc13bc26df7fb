"""The corrective grade: its stated rule, figure by figure."""

from __future__ import annotations

import pytest

from ragspine.chain.grade import MIN_MISSING, content_terms, coverage_terms, grade, specifics
from ragspine.retrieval.search import SearchHit


def hit(text: str, metadata: dict[str, str] | None = None, **scores: float | None) -> SearchHit:
    return SearchHit(library_id="lib", doc_id="d", title="", page=1, bbox=[0.0, 0.0, 1.0, 1.0], chunk_id="d/c0",
                     text=text, version=1, scores=dict(scores), metadata=metadata or {})


def test_content_terms_leave_function_words_out() -> None:
    assert content_terms("What is the revenue of Acme in 2023?") == ["revenue", "acme", "2023"]


def test_no_hits_is_weak() -> None:
    g = grade("revenue", [], min_coverage=0.5, depth=3)
    assert (g.ok, g.verdict) == (False, "no_hits")


def test_coverage_over_the_first_passages() -> None:
    # terms: revenue, acme, 2023, asia -> the first two passages hold revenue + acme = 2/4.
    hs = [hit("acme revenue", bm25=3.0), hit("revenue again", bm25=2.0), hit("asia 2023", bm25=1.0)]
    g = grade("acme revenue 2023 asia", hs, min_coverage=0.5, depth=2)
    assert g.ok and g.coverage == pytest.approx(0.5)
    g = grade("acme revenue 2023 asia", hs, min_coverage=0.6, depth=2)
    assert (g.ok, g.verdict, g.missing_terms) == (False, "low_coverage", ("2023", "asia"))
    assert "50%" in g.reason() and "2023" in g.reason()
    assert grade("acme revenue 2023 asia", hs, min_coverage=1.0, depth=3).ok  # the third adds the rest


def test_channels_must_agree_on_the_top_page() -> None:
    # Channels that ran: bm25, bm25_page, dense (visual scored nothing). The top hit was found
    # by bm25 alone: 1/3 < 1/2.
    hs = [hit("acme revenue", bm25=3.0, bm25_page=None, dense=None),
          hit("acme revenue", bm25=None, bm25_page=2.0, dense=0.5)]
    g = grade("acme revenue", hs, min_coverage=0.5, depth=3)
    assert (g.ok, g.verdict) == (False, "channels_disagree")
    assert g.agreement == pytest.approx(1 / 3)
    hs[0].scores["dense"] = 0.9  # now 2/3
    assert grade("acme revenue", hs, min_coverage=0.5, depth=3).ok


def test_one_channel_has_nothing_to_disagree_with() -> None:
    g = grade("acme", [hit("acme", bm25=1.0)], min_coverage=0.5, depth=3)
    assert g.ok and g.agreement is None


def test_meaning_below_the_floor_is_weak_whatever_the_words() -> None:
    # Every term is there, but the best dense cosine of the first two passages is 0.80 < 0.85.
    hs = [hit("acme revenue", bm25=3.0, dense=0.80), hit("acme revenue", bm25=2.0, dense=0.78),
          hit("other", bm25=1.0, dense=0.95)]  # third: outside depth 2
    g = grade("acme revenue", hs, min_coverage=0.5, depth=2, min_similarity=0.85)
    assert (g.ok, g.verdict, g.similarity) == (False, "low_similarity", pytest.approx(0.80))
    assert "0.80 similar" in g.reason() and g.to_json()["similarity"] == 0.8
    assert grade("acme revenue", hs, min_coverage=0.5, depth=2, min_similarity=0.80).ok  # at the floor: kept
    assert grade("acme revenue", hs, min_coverage=0.5, depth=2).ok  # no floor: words decide


def test_high_meaning_forgives_low_word_coverage() -> None:
    # terms: turnover, acme, asia; the passage says "revenue" (a paraphrase): coverage 1/3.
    hs = [hit("acme revenue in europe", bm25=1.0, dense=0.93)]
    kw = {"min_coverage": 0.5, "depth": 3}
    assert grade("acme turnover asia", hs, **kw).verdict == "low_coverage"
    assert grade("acme turnover asia", hs, **kw, rescue_similarity=0.93).ok
    assert grade("acme turnover asia", hs, **kw, rescue_similarity=0.94).verdict == "low_coverage"


def test_similarity_is_zero_when_the_dense_channel_found_none_of_the_top_passages() -> None:
    hs = [hit("acme", bm25=2.0, dense=None), hit("acme", bm25=1.0, dense=None), hit("x", bm25=None, dense=0.9)]
    g = grade("acme", hs, min_coverage=0.5, depth=2, min_similarity=0.5)
    assert (g.verdict, g.similarity) == ("low_similarity", 0.0)
    # without any dense score the channel did not run: no meaning figure, words alone
    g = grade("acme", [hit("acme", bm25=1.0)], min_coverage=0.5, depth=2, min_similarity=0.5)
    assert g.ok and g.similarity is None


@pytest.mark.parametrize(("query", "expected"), [
    ("What share of adults did not go online in 2016?", ["2016"]),
    ("What is Amazon's FY2017 return on assets?", ["2017", "amazon"]),  # the period's year; a name
    ("What did Zorblax say about the Beijing plant?", ["zorblax"]),  # "Beijing": a dictionary word
    ("What does the chart on page 14 show for 2019?", ["2019"]),  # a page it points at is no fact
    ("What does Figure 12 say about the 40 respondents?", ["40"]),
    ("Which company grew fastest?", []),
    ("What was revenue in year 3?", []),  # one digit: too common to tell
    ("What is the market name for EPS code AR03?", ["ar03"]),  # a code, asked about as a number is
    ("How many charts have years on the axis (like 2024)?", []),  # an example of the form
    ("Which years are discussed, e.g. [2014, 2018]?", []),
    ("Which chart (like " + "the one " * 11 + "in 2019)?", ["2019"]),  # over 80 characters: no example
])
def test_the_specifics_a_question_names(query: str, expected: list[str]) -> None:
    assert specifics(query, lambda w: w in {"beijing", "figure"}) == expected


def test_a_specific_the_document_never_mentions_is_weak() -> None:
    hs = [hit("acme revenue 2013", bm25=3.0)]
    g = grade("acme revenue 2016", hs, min_coverage=0.5, depth=3, unmentioned=["2016"])
    assert (g.ok, g.verdict, g.missing_terms) == (False, "unmentioned", ("2016",))
    assert g.reason() == "the first hit's document never mentions 2016"
    assert grade("acme revenue 2016", hs, min_coverage=0.5, depth=3).ok  # coverage 2/3 alone passes


def test_coverage_does_not_ask_for_what_the_picture_looks_like() -> None:
    q = "How many black arrows are in the logo on page 17 of the Acme report?"
    assert coverage_terms(q) == ["17", "acme"]
    assert content_terms(q) == ["black", "arrows", "logo", "page", "17", "acme", "report"]
    g = grade(q, [hit("Acme annual review, page 17", bm25=1.0)], min_coverage=0.5, depth=3)
    assert g.ok and g.coverage == 1.0
    g = grade(q, [hit("Acme annual review", bm25=1.0)], min_coverage=0.5, depth=3)
    assert g.ok and g.coverage == 0.5  # of content_terms, 1 in 7 would be covered: weak


def test_one_missing_term_is_not_enough_to_call_the_answer_weak() -> None:
    assert MIN_MISSING == 2
    hs = [hit("acme annual review", bm25=1.0)]
    # acme, bike: half covered, below 0.6, but only "bike" (what the picture shows) is missing.
    g = grade("acme bike", hs, min_coverage=0.6, depth=3)
    assert g.ok and g.coverage == 0.5 and g.missing_terms == ("bike",)
    g = grade("acme bike helmet", hs, min_coverage=0.6, depth=3)  # 1/3, two missing
    assert (g.ok, g.verdict, g.missing_terms) == (False, "low_coverage", ("bike", "helmet"))


def test_the_documents_fields_count_as_its_text_and_a_misspelt_term_as_corrected() -> None:
    q = "What was Netflix's advertising expense in FY2015?"  # netflix advertising expense fy2015 2015
    bare = hit("Advertising expense was 714 million", bm25=1.0)
    g = grade(q, [bare], min_coverage=0.5, depth=3)
    assert (g.ok, g.coverage, g.missing_terms) == (False, 0.4, ("netflix", "fy2015", "2015"))
    filed = hit("Advertising expense was 714 million", {"issuer": "Netflix, Inc.", "period": "FY2015"}, bm25=1.0)
    g = grade(q, [filed], min_coverage=0.5, depth=3)
    assert (g.ok, g.coverage, g.missing_terms) == (True, 0.8, ("2015",))
    q = "What was Neflix's advertsing expense in FY2015?"
    g = grade(q, [filed], min_coverage=0.5, depth=3)
    assert (g.ok, g.missing_terms) == (False, ("neflix", "advertsing", "2015"))
    g = grade(q, [filed], min_coverage=0.5, depth=3, respelt={"neflix": "netflix", "advertsing": "advertising"})
    assert (g.ok, g.coverage) == (True, 0.8)


def test_a_page_the_document_does_not_have_is_weak() -> None:
    hs = [hit("slides on big data trends", bm25=1.0)]
    g = grade("How many images are in pages 100-110 of the slides?", hs, min_coverage=0.4, depth=3,
              missing_pages=tuple(range(100, 111)))
    assert (g.ok, g.verdict) == (False, "no_such_page")
    assert g.reason() == "the first hit's document has none of the pages 100-110"
    g = grade("the chart on page 50", hs, min_coverage=0.4, depth=3, missing_pages=(50,))
    assert g.reason() == "the first hit's document has no page 50"
    assert grade("pages 3 and 7", hs, min_coverage=0.0, depth=3, missing_pages=(3, 7, -2)).reason().endswith(
        "pages 3, 7, 2 from the end")


def test_the_channels_need_not_agree_on_a_page_the_question_names() -> None:
    hs = [hit("acme revenue", bm25=3.0, bm25_page=None, dense=None),
          hit("acme revenue", bm25=None, bm25_page=2.0, dense=0.5)]
    assert grade("acme revenue", hs, min_coverage=0.5, depth=3).verdict == "channels_disagree"
    assert grade("acme revenue", hs, min_coverage=0.5, depth=3, top_named=True).ok
