"""Tables read as tables (ragspine.indexing.tables): a statement's rows become paragraphs with
the label beside its values, the header rows and caption are found, passages get the context
they lack, and a page without a table parses exactly as before.

The test PDF draws a cash-flow-like table the way 10-K filings come out of their typesetting:
the labels first, then each value column top to bottom, so PyMuPDF reports every cell as a text
block of its own (checked below with RAGSPINE_TABLES=off). Expected texts are written out by
hand from the rows drawn.
"""

from __future__ import annotations

import logging

import pymupdf
import pytest
from pydantic import ValidationError

import pdfs
from pdfs import Page
from ragspine.config import Settings, load_settings
from ragspine.engine import Engine
from ragspine.indexing import pdf as pdf_module
from ragspine.indexing.pdf import PARAGRAPH_SEP, open_pdf
from ragspine.indexing.tables import (
    CAPTION_REACH_PT,
    is_header_value,
    is_value,
    phrases,
    read_table,
    table_regions,
)

FONT, SIZE = "helv", 9.0
LABEL_X = 72.0
COL_RIGHT = (360.0, 430.0, 500.0)
CAPTION = "Consolidated Statement of Cash Flows"
ROWS = [
    ("(Millions)", ("2018", "2017", "2016")),
    ("Net income", ("5,363", "4,869", "5,058")),
    ("Depreciation and amortization", ("1,488", "1,544", "1,474")),
    ("Purchases of property, plant and equipment", ("(1,577)", "(1,373)", "(1,420)")),
    ("Net cash used in investing activities", ("(222)", "(3,086)", "(1,403)")),
]
NOTE = "The accompanying notes are an integral part of this statement."
#: Each row one paragraph, cells two spaces apart, in the order drawn.
ROW_TEXTS = [
    "(Millions)  2018  2017  2016",
    "Net income  5,363  4,869  5,058",
    "Depreciation and amortization  1,488  1,544  1,474",
    "Purchases of property, plant and equipment  (1,577)  (1,373)  (1,420)",
    "Net cash used in investing activities  (222)  (3,086)  (1,403)",
]
TABLE_TEXT = "\n\n".join([CAPTION, *ROW_TEXTS, NOTE])
#: With tables off: one block per cell, in reading order (row by row, left to right).
CELL_TEXT = "\n\n".join([CAPTION, *(c for label, values in ROWS for c in (label, *values)), NOTE])


def table_pdf(*, ruled: bool, caption_y: float = 170.0) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((LABEL_X, caption_y), CAPTION, fontsize=11, fontname=FONT)
    ys = [200.0 + 16.0 * i for i in range(len(ROWS))]
    for (label, _values), y in zip(ROWS, ys):
        page.insert_text((LABEL_X, y), label, fontsize=SIZE, fontname=FONT)
    for c, right in enumerate(COL_RIGHT):  # numbers right-aligned on the column's right edge
        for (_label, values), y in zip(ROWS, ys):
            width = pymupdf.get_text_length(values[c], fontname=FONT, fontsize=SIZE)
            page.insert_text((right - width, y), values[c], fontsize=SIZE, fontname=FONT)
    if ruled:
        for y in ys:
            page.draw_line((LABEL_X, y + 4), (COL_RIGHT[-1] + 4, y + 4))
        for x in (300.0, 370.0, 440.0):
            page.draw_line((x, 188), (x, ys[-1] + 4))
    page.insert_text((LABEL_X, 320), NOTE, fontsize=SIZE, fontname=FONT)
    data = doc.tobytes()
    doc.close()
    return data


# -- the parse ------------------------------------------------------------------------------


@pytest.mark.parametrize("ruled", [False, True])
def test_rows_become_paragraphs_with_label_and_values(ruled: bool) -> None:
    off = open_pdf(table_pdf(ruled=ruled), tables="off").pages[0]
    assert off.text == CELL_TEXT  # the problem: every cell a paragraph of its own
    page = open_pdf(table_pdf(ruled=ruled)).pages[0]
    assert page.text == TABLE_TEXT
    assert [b.text for b in page.blocks] == [CAPTION, *ROW_TEXTS, NOTE]
    assert all(page.text[b.start:b.end] == b.text for b in page.blocks)
    assert page.lines == off.lines  # the policy's lines do not change
    [table] = page.tables
    assert table.row_texts == tuple(ROW_TEXTS)
    assert table.header_rows == (0,)
    assert table.header_text() == "(Millions)  2018  2017  2016"
    assert table.label_col == 0
    assert (table.n_rows, table.n_cols) == (5, 4)
    assert table.caption == CAPTION
    # Each row's span is its paragraph, and its box that of the row's cells in the off parse.
    assert [page.text[s:e] for s, e in table.row_spans] == ROW_TEXTS
    cell_boxes = [b.bbox for b in off.blocks[1:-1]]
    for i, box in enumerate(table.row_boxes):
        cells = cell_boxes[4 * i: 4 * i + 4]
        assert box == pytest.approx((cells[0][0], min(c[1] for c in cells), cells[-1][2], max(c[3] for c in cells)))
    grid = {(c.row, c.col): c.text for c in table.cells}
    assert grid[(3, 0)] == "Purchases of property, plant and equipment"
    assert [grid[(3, j)] for j in (1, 2, 3)] == ["(1,577)", "(1,373)", "(1,420)"]
    assert [grid[(0, j)] for j in (1, 2, 3)] == ["2018", "2017", "2016"]


def test_page_without_a_table_parses_exactly_as_before() -> None:
    data = pdfs.make_pdf([Page(["Revenue rose 4 % in 2018 to 5,363 million.", "Margins held at 21 %."],
                               header="Annual Report 2018")])
    on, off = open_pdf(data).pages[0], open_pdf(data, tables="off").pages[0]
    assert on.tables == [] and off.tables == []
    assert on.text == off.text == PARAGRAPH_SEP.join(
        ["Annual Report 2018", "Revenue rose 4 % in 2018 to 5,363 million.", "Margins held at 21 %."])
    assert on.blocks == off.blocks
    assert on.lines == off.lines
    assert (on.has_images, on.has_drawings) == (off.has_images, off.has_drawings)


def test_tables_setting_is_validated_where_it_is_read() -> None:
    with pytest.raises(ValueError, match="tables must be one of auto, off, got 'on'"):
        open_pdf(table_pdf(ruled=False), tables="on")
    with pytest.raises(ValidationError):
        Settings(tables="on")  # type: ignore[arg-type]


def test_a_failing_table_reader_keeps_the_text_blocks(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: object) -> list[object]:
        raise RuntimeError("odd page")

    monkeypatch.setattr(pdf_module, "read_tables", broken)
    with caplog.at_level(logging.WARNING, logger="ragspine.indexing.pdf"):
        page = open_pdf(table_pdf(ruled=False)).pages[0]
    assert page.text == CELL_TEXT and page.tables == []
    assert "page 1: reading its tables failed (odd page)" in caplog.text


def test_ragspine_tables_off_reaches_the_ingest(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """RAGSPINE_TABLES is read by load_settings and decides what the stored passages hold."""
    monkeypatch.setenv("RAGSPINE_TABLES", "off")
    assert load_settings().tables == "off"
    texts = {}
    for mode in ("auto", "off"):
        (tmp_path / mode).mkdir()
        engine = Engine(Settings(data_dir=tmp_path / mode, tables=mode))
        try:
            engine.create_library("lib")
            engine.ingest("lib", table_pdf(ruled=False), {"doc_id": "cf"})
            hits = engine.search({"query": "purchases property plant equipment", "libraries": ["lib"],
                                  "mode": "bm25"}).hits
            texts[mode] = hits[0].text
        finally:
            engine.close()
    assert "Purchases of property, plant and equipment  (1,577)  (1,373)  (1,420)" in texts["auto"]
    assert "(1,577)" not in texts["off"].split("Purchases of property, plant and equipment")[0]
    assert "Purchases of property, plant and equipment\n\n(1,577)\n\n(1,373)" in texts["off"]


# -- captions -------------------------------------------------------------------------------


def test_no_caption_when_the_line_above_is_far() -> None:
    # The caption drawn 60 pt above the header row's top (190.3 pt), beyond CAPTION_REACH_PT.
    data = table_pdf(ruled=False, caption_y=128.0)
    page = open_pdf(data).pages[0]
    caption_bottom = open_pdf(data, tables="off").pages[0].blocks[0].bbox[3]
    assert page.tables[0].bbox[1] - caption_bottom > CAPTION_REACH_PT
    assert page.tables[0].caption == ""
    assert open_pdf(table_pdf(ruled=False)).pages[0].tables[0].caption == CAPTION  # drawn near: kept


# -- the pure pieces ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("1,577", True), ("(1,577)", True), ("$5,363", True), ("$ 5,363", True), ("5.4%", True),
    ("—", True), ("-57", True), ("2018", True), ("$", False), ("Net income", False),
    ("Other — net", False), ("13 (2,023)", True), ("", False),
])
def test_is_value(text: str, expected: bool) -> None:
    assert is_value(text) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("2018", True), ("FY2017", True), ("Amount", True), ("January 28, 2023", True),
    ("5,363", False), ("(1,577)", False), ("4.5", False),
])
def test_is_header_value(text: str, expected: bool) -> None:
    assert is_header_value(text) is expected


def _line(text: str, x0: float, y: float, x1: float) -> tuple[str, tuple[float, float, float, float]]:
    return (text, (x0, y, x1, y + 10.0))


def test_gate_needs_three_value_rows() -> None:
    two = [_line("Revenue", 72, 100, 120), _line("46,298", 330, 100, 360),
           _line("Cost of sales", 72, 114, 130), _line("36,386", 330, 114, 360),
           _line("A paragraph of prose that runs across the page.", 72, 140, 500)]
    assert table_regions(two) == []
    three = [*two[:4], _line("Gross profit", 72, 128, 125), _line("9,912", 335, 128, 360), two[4]]
    assert table_regions(three) == [(72, 100, 360, 138)]


def test_gate_takes_header_lines_over_the_value_columns() -> None:
    lines = [_line("Fiscal Years Ended", 72, 86, 150), _line("January 28, 2023", 300, 86, 360),
             _line("Revenue", 72, 100, 120), _line("46,298", 330, 100, 360),
             _line("Cost of sales", 72, 114, 130), _line("36,386", 330, 114, 360),
             _line("Gross profit", 72, 128, 125), _line("9,912", 335, 128, 360)]
    assert table_regions(lines) == [(72, 86, 360, 138)]
    # A prose line right above does not join: its words are not column headers over the values.
    prose = [_line("Revenue in fiscal 2023 fell by 5,463 million against the year before.", 72, 86, 400),
             *lines[2:]]
    assert table_regions(prose) == [(72, 100, 360, 138)]


def test_gate_splits_runs_far_apart() -> None:
    rows = [(f"Row {i}", 100.0 + 14 * i) for i in range(3)] + [(f"Row {i}", 300.0 + 14 * i) for i in range(3)]
    lines = [ln for label, y in rows for ln in (_line(label, 72, y, 100), _line("1,000", 330, y, 360))]
    assert table_regions(lines) == [(72, 100, 360, 138), (72, 300, 360, 338)]


def test_phrases_part_cells_that_share_a_pdf_line() -> None:
    # One PDF line "Revenue $ 46,298 $ 51,761" (block 0, line 0): spaces of ~2.5 pt join
    # words, the gaps of 40 pt and more between columns part them.
    words = [(72, 100, 100, 109, "Revenue", 0, 0, 0), (102.5, 100, 110, 109, "net", 0, 0, 1),
             (260, 100, 265, 109, "$", 0, 0, 2), (330, 100, 360, 109, "46,298", 0, 0, 3),
             (400, 100, 405, 109, "$", 0, 0, 4), (420, 100, 450, 109, "51,761", 0, 0, 5)]
    assert [t for t, _b in phrases(words)] == ["Revenue net", "$", "46,298", "$", "51,761"]


def test_read_table_joins_wrapped_labels_and_drops_currency() -> None:
    parts = [
        _line("Year Ended December 31,", 350, 86, 430), _line("2018", 340, 100, 360), _line("2017", 410, 100, 430),
        _line("Revenue", 72, 114, 110), _line("$", 300, 114, 305), _line("5,363", 335, 114, 360),
        _line("$", 380, 114, 385), _line("4,869", 405, 114, 430),
        _line("Accrued income taxes (current and", 72, 128, 200),
        _line("long-term)", 72, 142, 110), _line("134", 345, 142, 360), _line("967", 415, 142, 430),
        _line("Other — net", 72, 156, 120), _line("120", 345, 156, 360), _line("—", 420, 156, 430),
    ]
    table = read_table(parts)
    assert table is not None
    assert table.row_texts == (
        "Year Ended December 31,",
        "2018  2017",
        "Revenue  5,363  4,869",
        "Accrued income taxes (current and long-term)  134  967",
        "Other — net  120  —",
    )
    assert table.header_rows == (0, 1)
    # "Year Ended December 31," spans both value columns: it goes to the one it overlaps most.
    assert {(c.row, c.col) for c in table.cells if c.row == 0} == {(0, 2)}


def test_read_table_needs_three_rows_with_label_and_value() -> None:
    parts = [_line("2018", 340, 100, 360), _line("Revenue", 72, 114, 110), _line("5,363", 335, 114, 360),
             _line("Cost", 72, 128, 100), _line("4,869", 335, 128, 360)]
    assert read_table(parts) is None
    assert read_table([_line("Revenue", 72, 114, 110)]) is None  # no value column at all


def test_gate_reaches_headers_over_label_only_rows() -> None:
    # A balance sheet: the dates, then "Assets" and "Current assets" (labels, no values), then rows.
    lines = [_line("January 28, 2023", 300, 58, 360), _line("Assets", 72, 72, 100),
             _line("Current assets", 72, 86, 130),
             _line("Cash", 72, 100, 120), _line("1,874", 330, 100, 360),
             _line("Receivables", 72, 114, 130), _line("1,141", 330, 114, 360),
             _line("Inventories", 72, 128, 125), _line("5,140", 335, 128, 360)]
    assert table_regions(lines) == [(72, 58, 360, 138)]
    table = read_table(lines)
    assert table is not None
    assert table.row_texts[:3] == ("January 28, 2023", "Assets", "Current assets")
    assert table.header_rows == (0,)
