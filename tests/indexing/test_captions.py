"""Which page each numbered figure and table is on, from its caption lines
(ragspine.indexing.captions), and the keys a question's "Figure 3" is read as
(ragspine.scoring.page_refs.figure_refs)."""

from __future__ import annotations

import pytest

import pdfs
from pdfs import Page
from ragspine.indexing.captions import caption_of, caption_pages
from ragspine.indexing.pdf import open_pdf
from ragspine.scoring.page_refs import figure_refs


@pytest.mark.parametrize(("line", "key"), [
    ("Figure 3: Accuracy by model", "figure:3"), ("Fig. 2.", "figure:2"), ("FIGURE 11", "figure:11"),
    ("Table 1-1 Compared items", "table:1-1"), ("Table1-1", "table:1-1"), ("Figure 4.2 Revenue", "figure:4-2"),
    ("Figure A: Map of the region", "figure:a"), ("Exhibit 99.1", "figure:99-1"), ("Chart 5 | Sales", "figure:5"),
    ("图3 营业收入", "figure:3"), ("表 2：分部收入", "table:2"),
    # prose that mentions a figure, and lines that are no caption
    ("Figure 3 shows that the model improves", None), ("figure 3: lower case is prose wrapped here", None),
    ("In Figure 3, we compare", None), ("Table of Contents", None), ("Tablet devices", None), ("", None),
])
def test_caption_lines(line: str, key: str | None) -> None:
    assert caption_of(line) == key


@pytest.mark.parametrize(("question", "keys"), [
    ("What are the horizontal and vertical axis of Figure 3 respectively?", {"figure:3"}),
    ("In figure 4, which nodes are retrieved?", {"figure:4"}),
    ("Which step in Figure 1 maps to the content of Figure 10?", {"figure:1", "figure:10"}),
    ("What are the compared items in Table1-1?", {"table:1-1"}),
    ("How many people are in figure A?", {"figure:a"}),
    ("How many times is Exhibit P-10 mentioned?", {"figure:p-10"}),
    ("图3显示的营业收入是多少？", {"figure:3"}), ("表2", {"table:2"}),
    ("How many green rectangles are in the first figure of the paper?", {"figure:1"}),
    ("What does the 2nd table list?", {"table:2"}),
    ("How many tables are included in the document?", set()),
    ("How many figures have humans?", set()),
    ("Mention Tablet Capture Devices used by some hospitals?", set()),
    ("What was the table's 2019 revenue?", set()),
    ("the table 2019 revenue", set()),  # a year after "table" is no table number
])
def test_figure_refs(question: str, keys: set[str]) -> None:
    assert figure_refs(question) == frozenset(keys)


def test_a_question_and_its_caption_meet_on_one_key() -> None:
    for caption, question in (("Figure 4.2 Revenue by segment", "What does Figure 4.2 show?"),
                              ("Table 1-1 Compared items", "the items in Table 1–1"),
                              ("Fig. 7: Flow", "In Fig. 7, what comes first?"),
                              ("Exhibit P-10. Complaint", "Where is Exhibit P-10?")):
        assert figure_refs(question) == frozenset({caption_of(caption)})


def test_caption_pages_of_a_document() -> None:
    data = pdfs.make_pdf([
        Page(["Introduction. Figure 2 shows the trend; see also Table 1 below."]),  # mentions only
        Page(["Figure 1: Revenue by segment", "Bars for each segment."]),
        Page(["Table 1. Segment revenue", "Robotics 2,164 Energy 2,598"]),
        Page(["Figure 2: Margin by year", "Figure 3: Headcount"]),
    ])
    parsed = open_pdf(data, tables="off")
    try:
        assert caption_pages(parsed.pages) == {"figure:1": [2], "table:1": [3], "figure:2": [4], "figure:3": [4]}
    finally:
        parsed.close()


def test_hostile_captions() -> None:
    from ragspine.indexing.captions import MAX_CAPTIONS, MAX_LINE
    from ragspine.indexing.pdf import PageContent

    assert caption_of("Figure 3: " + "x" * MAX_LINE) is None  # longer than any caption's first line
    # a page of thousands of caption lines keeps at most MAX_CAPTIONS keys
    lines = [(f"Figure {a}.{b}: item", (0.0, float(a), 10.0, float(a) + 1)) for a in range(1, 61) for b in range(1, 61)]
    assert len(lines) > MAX_CAPTIONS
    many = PageContent(number=1, width=595.0, height=842.0, text="", blocks=[], lines=lines)
    assert len(caption_pages([many])) == MAX_CAPTIONS
    assert figure_refs("Figure " * 2000) == frozenset() and figure_refs("图" * 4000) == frozenset()
