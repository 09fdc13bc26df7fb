"""The numbers printed on a document's pages (ragspine.indexing.page_labels), read into the
profile's ``printed_pages`` at ingest: from the PDF's page labels, else from a number at the
edge of a header or footer line that climbs with the pages."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.indexing.page_labels import line_numbers, pdf_label_number, pdf_page_labels, printed_pages
from ragspine.indexing.pdf import PageContent, open_pdf


def body(n: int) -> list[str]:
    return [f"Section {n}. The operating results of the year are discussed on this page in some detail."]


def parsed_pages(data: bytes) -> list[PageContent]:
    p = open_pdf(data, tables="off")
    try:
        return p.pages
    finally:
        p.close()


@pytest.mark.parametrize(("line", "numbers"), [
    ("12", [12]), ("- 12 -", [12]), ("Page 12", [12]), ("Page 12 of 40", [12]), ("第12页", [12]),
    ("16  Graduate Studies & Professional Learning", [16]),
    ("Graduate Studies & Professional Learning  17", [17]),
    ("Annual Report | 12", [12]), ("Annual Report 2023", [2023]),
    ("The operating results of the year are discussed on this page in some detail and more", []),
    ("Edition 26 (2024-02-28)", []), ("", []), ("0", []),
])
def test_line_numbers(line: str, numbers: list[int]) -> None:
    assert line_numbers(line) == numbers


def test_pdf_labels_that_are_numbers() -> None:
    assert pdf_label_number("12") == 12
    assert pdf_label_number(" 6985 ") == 6985
    assert pdf_label_number("iv") is None and pdf_label_number("A-3") is None and pdf_label_number("") is None


def test_footer_numbers_after_two_unnumbered_pages() -> None:
    # A cover and a contents page print no number; the third page prints "1".
    pages = [Page(body(1)), Page(body(2))] + [Page(body(n), footer=str(n - 2)) for n in range(3, 9)]
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {n: [n - 2] for n in range(3, 9)}


def test_a_running_headers_year_is_not_a_page_number() -> None:
    pages = [Page(body(n), header="Northwind Annual Report 2023") for n in range(1, 7)]
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {}


def test_a_number_on_one_page_alone_is_not_read() -> None:
    # No neighbour carries the next number: a lone figure in a footer is not a page number.
    pages = [Page(body(1)), Page(body(2), footer="7"), Page(body(3))]
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {}


def test_spreads_print_two_numbers() -> None:
    pages = [Page(body(n), header=f"{2 * n}  Graduate Studies", footer=f"Graduate Studies  {2 * n + 1}")
             for n in range(1, 5)]
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {n: [2 * n, 2 * n + 1] for n in range(1, 5)}


def test_page_numbers_equal_to_places_record_nothing() -> None:
    pages = [Page(body(n), footer=str(n)) for n in range(1, 6)]
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {}


def test_pdf_page_labels_win_over_the_text() -> None:
    doc = pymupdf.open(stream=pdfs.make_pdf([Page(body(n), footer=str(n)) for n in range(1, 5)]), filetype="pdf")
    doc.set_page_labels([{"startpage": 0, "prefix": "", "style": "D", "firstpagenum": 6985}])
    data = doc.tobytes()
    parsed = open_pdf(data, tables="off")
    try:
        labels = pdf_page_labels(parsed.doc, [p.number for p in parsed.pages])
        assert labels == ["6985", "6986", "6987", "6988"]
        assert printed_pages(parsed.pages, labels) == {n: [6984 + n] for n in range(1, 5)}
    finally:
        parsed.close()


def test_the_profile_reads_only_kept_pages(tmp_path: Path) -> None:
    canary = "ZEBRAFINCH"
    pages = [Page(body(1))] + [Page(body(n), footer=str(n + 40)) for n in range(2, 8)]
    pages[3] = Page([f"RESTRICTED {canary}"], header="RESTRICTED", footer="44")
    eng = Engine(Settings(data_dir=tmp_path, dense_model="none", ocr="off"))
    try:
        eng.create_library("lib")
        r = eng.ingest("lib", pdfs.make_pdf(pages), {"doc_id": "d"})
        assert r.pages_dropped == [4]
        (entry,) = [d for d in eng.documents("lib") if d["doc_id"] == "d"]
        printed = entry["profile"]["printed_pages"]
        # page 4 was dropped: its number is not read, and its neighbours confirm each other across it
        assert printed == {str(n): [n + 40] for n in (2, 3, 5, 6, 7)}
    finally:
        eng.close()


def test_a_damaged_label_tree_falls_back_to_the_text() -> None:
    class Damaged:
        def get_page_labels(self) -> list[dict[str, object]]:
            raise RuntimeError("object 12 0 R is not a dictionary")

    assert pdf_page_labels(Damaged(), [1, 2, 3]) == ["", "", ""]
    pages = [Page(body(1)), Page(body(2))] + [Page(body(n), footer=str(n - 2)) for n in range(3, 7)]
    parsed = parsed_pages(pdfs.make_pdf(pages))
    assert printed_pages(parsed, pdf_page_labels(Damaged(), [p.number for p in parsed])) == {
        n: [n - 2] for n in range(3, 7)}


def test_hostile_pages_print_nothing() -> None:
    # no lines, a page of no height, numbers past the largest read, a very long footer
    blank = PageContent(number=1, width=595.0, height=842.0, text="", blocks=[])
    flat = PageContent(number=2, width=595.0, height=0.0, text="7", blocks=[], lines=[("7", (0.0, 0.0, 5.0, 0.0))])
    assert printed_pages([blank, flat]) == {}
    assert line_numbers("123456") == [] and pdf_label_number("123456") is None
    assert line_numbers("7 " + "x" * 200) == []
    pages = [Page(body(n), footer=f"{n + 5} " + "footer " * 20) for n in range(1, 5)]  # 140-character lines
    assert printed_pages(parsed_pages(pdfs.make_pdf(pages))) == {}
