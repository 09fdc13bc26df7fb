"""The pages a question names by number (ragspine.scoring.page_refs)."""

from __future__ import annotations

import pytest

from ragspine.scoring.page_refs import MAX_RANGE, MAX_REFS, page_refs


@pytest.mark.parametrize(("question", "pages"), [
    ("According to the chart on page 14 how much time was spent with family in 2010?", {14}),
    ("What is the color of Kailali in the map of Page 12?", {12}),
    ("How many colors are in the slide 14?", {14}),
    ("What models of cars are introduced on pages 10 and 11?", {10, 11}),
    ("what are the overlapped apps between page 21 and 62?", {21, 62}),
    ("How many figures are in this paper from Page 3 to Page 10?", set(range(3, 11))),
    ("See pp. 4-6 of the filing.", {4, 5, 6}),
    ("Which slides, slides 3, 4 and 5, show revenue?", {3, 4, 5}),
    ("How many cars appear on page three?", {3}),
    ("How many people appear on pages three and four?", {3, 4}),
    ("What is the fax number on page fourteen?", {14}),
    ("what is the color of the stamp in the 6th page?", {6}),
    ("What date is mentioned on the second page?", {2}),
    ("Is there a signature present on the last page?", {-1}),
    ("In the figure at Page at the second last, how many people are standing?", {-2}),
    ("What is on the second-to-last slide?", {-2}),
    ("How many websites are present on the cover page?", {1}),
    ("第12页的图表显示了什么？", {12}),
    ("年报第二十一页的表格", {21}),
    ("第 3-5 页", {3, 4, 5}),
    ("第3张幻灯片的标题是什么？", {3}),
])
def test_pages_named(question: str, pages: set[int]) -> None:
    assert page_refs(question) == frozenset(pages)


@pytest.mark.parametrize("question", [
    "What was the FY2018 capital expenditure for 3M?",
    "Summarise this 10-page report on revenue.",  # a length, not a page
    "What is the page count of the annual report?",
    "伊芳·卡特菲的第一张唱片是在哪年发行的？",  # "the first record", not a slide
    "How did revenue change in 2019 and 2020?",
])
def test_questions_that_name_no_page(question: str) -> None:
    assert page_refs(question) == frozenset()


def test_a_list_keeps_to_digits_or_to_words() -> None:
    # "one of" after "page 3 and" is not page 1
    assert page_refs("What is on page 3 and one of the tables?") == frozenset({3})


def test_a_wide_range_names_its_ends_only() -> None:
    assert page_refs(f"pages 100-{101 + MAX_RANGE}") == frozenset({100, 101 + MAX_RANGE})
    assert page_refs(f"pages 100-{100 + MAX_RANGE}") == frozenset(range(100, 101 + MAX_RANGE))


def test_a_question_that_names_too_many_pages_names_none() -> None:
    listed = ", ".join(str(n) for n in range(1, MAX_REFS + 2))
    assert page_refs(f"pages {listed}") == frozenset()
    listed = ", ".join(str(n) for n in range(1, MAX_REFS + 1))
    assert len(page_refs(f"pages {listed}")) == MAX_REFS


def test_hostile_input_stays_fast_and_empty() -> None:
    assert page_refs("page " * 2000) == frozenset()
    assert page_refs("第" * 4000) == frozenset()
