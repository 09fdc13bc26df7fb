"""Documents known as wholes (ragspine.indexing.profile) and passages indexed with their context
(ragspine.indexing.context): a shelf of two companies' 10-K-like filings whose cash-flow page is
the same boilerplate, word for word.

Expected values are read off the PDFs built here: each filing has a cover (form, fiscal year,
registrant), Items as lines of their own on pages 2-5, and a running header on pages 2, 4 and 5
(page 3, the boilerplate, is identical in both files and names no company).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from pdfs import Page, draw_page, make_pdf
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import FilterError
from ragspine.indexing.pdf import open_pdf
from ragspine.indexing.profile import DocumentProfile, OutlineEntry, document_profile, sections_at
from ragspine.store.base import KIND_CHUNK, Where

LIB = "filings"
QUERY = "3M capital expenditure 2018"
BOILERPLATE = [
    "Item 8. Financial Statements and Supplementary Data",
    "Cash flows from investing activities include the capital expenditure for property, plant and equipment, "
    "proceeds from sales of marketable securities and acquisitions net of cash acquired, as presented in the "
    "consolidated statement of cash flows for the years 2017, 2018 and 2019.",
]


def filing(company: str, year: int, header: str) -> bytes:
    doc = pymupdf.open()
    pages = [
        Page(["UNITED STATES SECURITIES AND EXCHANGE COMMISSION", "FORM 10-K",
              f"ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) For the fiscal year ended December 31, {year}",
              company, "(Exact name of registrant as specified in its charter)"]),
        Page(["PART II", "Item 7. Management's Discussion and Analysis",
              "Sales grew in every business segment during the year."], header=header),
        Page(BOILERPLATE),
        Page(["Item 9A. Controls and Procedures", "Disclosure controls were found effective."], header=header),
        Page(["Item 15. Exhibits", "The exhibits are listed in the index to exhibits."], header=header),
    ]
    for spec in pages:
        draw_page(doc, spec)
    data = doc.tobytes()
    doc.close()
    return data


#: BM25 scored by the store (the in-memory lexical index is the other path: the shelf runs on both).
STORE = {"lexical_index": "store"}


@pytest.fixture(params=["memory", "store"])
def shelf(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Engine]:
    eng = Engine(settings.model_copy(update={"lexical_index": request.param}))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, TM,
                   filename="3M_2018_10K.pdf")
        eng.ingest(LIB, ACME,
                   filename="ACME_2019_10K.pdf")
        yield eng
    finally:
        eng.close()


def _entry(eng: Engine, doc_id: str) -> dict[str, Any]:
    return next(d for d in eng.documents(LIB) if d["doc_id"] == doc_id)


def test_profile_of_each_filing(shelf: Engine) -> None:
    p = _entry(shelf, "3M_2018_10K")["profile"]
    assert (p["issuer"], p["fiscal_year"], p["period"], p["doc_type"], p["language"]) == (
        "3M COMPANY", 2018, "FY2018", "10-K", "en")
    assert p["title"] == "3M COMPANY Form 10-K FY2018"
    assert p["sources"]["issuer"] == "first_pages" and p["sources"]["outline"] == "headings"
    assert p["aliases"] == ["3M"]  # the file name's; the running header is a sentence, not a name
    # PART II from page 2 to the end; each Item until the page before the next one.
    assert p["outline"] == [
        {"title": "PART II", "level": 1, "page": 2, "end_page": 5},
        {"title": "Item 7. Management's Discussion and Analysis", "level": 2, "page": 2, "end_page": 2},
        {"title": "Item 8. Financial Statements and Supplementary Data", "level": 2, "page": 3, "end_page": 3},
        {"title": "Item 9A. Controls and Procedures", "level": 2, "page": 4, "end_page": 4},
        {"title": "Item 15. Exhibits", "level": 2, "page": 5, "end_page": 5},
    ]
    q = _entry(shelf, "ACME_2019_10K")["profile"]
    assert (q["issuer"], q["fiscal_year"], q["period"], q["doc_type"]) == ("ACME WIDGET CORPORATION", 2019,
                                                                          "FY2019", "10-K")
    # The derived fields are filterable metadata of the entry (the caller set none of them).
    assert _entry(shelf, "3M_2018_10K")["metadata"] == {
        "issuer": "3M COMPANY", "period": "FY2018", "fiscal_year": 2018, "doc_type": "10-K", "language": "en"}


def _page_score(hits: list[Any], doc_id: str, page: int, channel: str = "fused") -> float:
    return next(h.scores[channel] for h in hits if h.doc_id == doc_id and h.page == page)


TM = filing("3M COMPANY", 2018, "3M Company 2018 Annual Report on Form 10-K")
ACME = filing("ACME WIDGET CORPORATION", 2019, "Acme Widget Corporation Form 10-K 2019")


def test_context_ranks_the_right_filings_boilerplate_first(shelf: Engine) -> None:
    hits = shelf.search({"query": QUERY, "libraries": [LIB], "mode": "bm25", "top_k": 10}).hits
    assert _page_score(hits, "3M_2018_10K", 3, "bm25") > _page_score(hits, "ACME_2019_10K", 3, "bm25")
    assert _page_score(hits, "3M_2018_10K", 3) > _page_score(hits, "ACME_2019_10K", 3)
    # The citation is the passage's own text: no title, no issuer in it.
    h = next(h for h in hits if h.doc_id == "3M_2018_10K" and h.page == 3)
    assert "3M" not in h.text and h.text.startswith("Item 8.") or h.text.startswith("Cash flows")


def test_without_context_the_two_pages_tie(settings: Settings) -> None:
    eng = Engine(settings.model_copy(update={**STORE, "passage_context": False}))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, TM,
                   filename="3M_2018_10K.pdf")
        eng.ingest(LIB, ACME,
                   filename="ACME_2019_10K.pdf")
        hits = eng.search({"query": QUERY, "libraries": [LIB], "mode": "bm25", "top_k": 10}).hits
        assert _page_score(hits, "3M_2018_10K", 3, "bm25") == _page_score(hits, "ACME_2019_10K", 3, "bm25")
        chunks = eng.store.scroll(LIB, Where(kind=KIND_CHUNK))
        assert chunks and not any("context" in r.payload for r in chunks)
    finally:
        eng.close()


def test_passage_payload_keeps_its_own_text_and_its_context_apart(shelf: Engine) -> None:
    recs = shelf.store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id="3M_2018_10K"))
    by_page = {int(r.payload["page"]): r.payload for r in recs}
    p3 = by_page[3]
    assert p3["text"] == "\n\n".join(BOILERPLATE)
    # Title (issuer and period are in it), and the section path PART II > Item 8 without Item 8,
    # whose line is in the passage already.
    assert p3["context"] == "3M COMPANY Form 10-K FY2018 | PART II"
    # Page 2: PART II > Item 7, both lines in the passage; the cover (page 1) is in no section
    # (its text holds the issuer and the form, not the title as one phrase).
    assert by_page[2]["context"] == by_page[1]["context"] == "3M COMPANY Form 10-K FY2018"


def test_filters_on_derived_fields(shelf: Engine) -> None:
    for flt, doc in (({"field": "issuer", "op": "eq", "value": "3M COMPANY"}, "3M_2018_10K"),
                     ({"field": "fiscal_year", "op": "gte", "value": 2019}, "ACME_2019_10K")):
        hits = shelf.search({"query": "capital expenditure", "libraries": [LIB], "mode": "bm25",
                             "filters": [flt]}).hits
        assert hits and {h.doc_id for h in hits} == {doc}
        assert all(h.metadata["doc_type"] == "10-K" for h in hits)
    with pytest.raises(FilterError):  # fiscal_year is a number: a string cannot match it
        shelf.search({"query": "capital", "libraries": [LIB], "filters": [
            {"field": "fiscal_year", "op": "eq", "value": "FY2018"}]})


def test_unchanged_reingest_keeps_the_profile(shelf: Engine) -> None:
    before = _entry(shelf, "3M_2018_10K")
    r = shelf.ingest(LIB, TM,
                     filename="3M_2018_10K.pdf")
    assert r.status == "unchanged"
    assert _entry(shelf, "3M_2018_10K")["profile"] == before["profile"]


def test_caller_metadata_wins_and_its_types_are_kept(engine: Engine) -> None:
    # The caller names the issuer (entity) and gives period as a number: the profile takes both,
    # and no derived field of those names joins the filterable metadata.
    engine.create_library(LIB)
    r = engine.ingest(LIB, TM,
                      {"entity": "3M", "period": 2018}, filename="3M_2018_10K.pdf")
    assert r.status == "indexed"
    e = _entry(engine, "3M_2018_10K")
    assert (e["profile"]["issuer"], e["profile"]["period"], e["profile"]["fiscal_year"]) == ("3M", "2018", 2018)
    assert e["profile"]["sources"]["issuer"] == "user" and e["profile"]["sources"]["period"] == "user"
    assert e["metadata"] == {"entity": "3M", "period": 2018, "doc_type": "10-K", "language": "en"}
    # A second filing without a caller's period: its derived "FY2019" (a string) would turn the
    # library's int field "period" mixed, so it is left out; ingest and int filters still work.
    engine.ingest(LIB, ACME,
                  filename="ACME_2019_10K.pdf")
    acme = _entry(engine, "ACME_2019_10K")
    assert "period" not in acme["metadata"] and acme["metadata"]["fiscal_year"] == 2019
    assert acme["profile"]["period"] == "FY2019"
    assert engine.libraries.get(LIB).field_types["period"] == "int"
    hits = engine.search({"query": "capital expenditure", "libraries": [LIB], "mode": "bm25",
                          "filters": [{"field": "period", "op": "lte", "value": 2018}]}).hits
    assert {h.doc_id for h in hits} == {"3M_2018_10K"}


def test_restricted_page_leaves_no_outline_entry(engine: Engine) -> None:
    # A PDF outline whose second entry points at a RESTRICTED page: its heading (a canary) is
    # not in the profile, the manifest or a hit.
    canary = "zqxoutlinecanary"
    engine.create_library(LIB)
    doc = pymupdf.open()
    for spec in (Page(["Public overview of the harbour programme."]),
                 Page([f"{canary} plans for the harbour."], header="RESTRICTED"),
                 Page(["Public results of the harbour programme."])):
        draw_page(doc, spec)
    doc.set_toc([[1, "Overview", 1], [1, f"Plans {canary}", 2], [1, "Results", 3]])
    data = doc.tobytes()
    doc.close()
    r = engine.ingest(LIB, data, filename="harbour.pdf")
    assert r.pages_dropped == [2]
    e = _entry(engine, "harbour")
    # "Overview" ends where the next entry starts, even though that entry is left out.
    assert e["profile"]["outline"] == [{"title": "Overview", "level": 1, "page": 1, "end_page": 1},
                                       {"title": "Results", "level": 1, "page": 3, "end_page": 3}]
    assert canary not in repr(engine.documents(LIB)).lower()
    for rec in engine.store.scroll(LIB, Where(doc_id="harbour")):
        assert canary not in repr(rec.payload).lower()
    hits = engine.search({"query": f"harbour {canary}", "libraries": [LIB], "mode": "bm25"}).hits
    assert hits and canary not in repr(hits).lower()


def test_text_document_title_is_not_indexed_twice(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.ingest_text(LIB, "d1", "Wing flutter\n\nThe flutter of swept wings at high speed.", title="Wing flutter")
    engine.ingest_text(LIB, "d2", "The flutter of swept wings at high speed.", title="Wing flutter")
    ctx = {r.payload["doc_id"]: r.payload.get("context") for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK))}
    assert ctx == {"d1": None, "d2": "Wing flutter"}
    assert _entry(engine, "d1")["profile"] == {
        "title": "Wing flutter", "issuer": None, "period": None, "fiscal_year": None, "doc_type": None,
        "language": None, "outline": [], "sources": {"title": "user"}, "aliases": [], "printed_pages": {},
        "captions": {}}


# -- the pure profile -------------------------------------------------------------------------------


def test_file_names_and_json_round_trip(tmp_path: Path) -> None:
    parsed = open_pdf(make_pdf(["A short note on the economy of the region."]))
    try:
        p = document_profile(parsed, "PH_2016.06.08_Economy-Final.pdf", {}, parsed.pages)
        assert (p.period, p.fiscal_year, p.issuer) == ("2016-06-08", 2016, None)  # no form token: no issuer
        assert p.sources["period"] == "filename"
        q = document_profile(parsed, "NETFLIX_2015_10K.pdf", {}, parsed.pages)
        assert (q.issuer, q.fiscal_year, q.period, q.doc_type) == ("NETFLIX", 2015, "FY2015", "10-K")
        assert q.aliases == ()
        assert DocumentProfile.from_json(q.to_json()) == q
    finally:
        parsed.close()


def test_pdf_metadata_title_and_its_leftovers() -> None:
    for given, expected in (("Harbour Statistics 2023", "Harbour Statistics 2023"),
                            ("Microsoft Word - draft3.docx", None), ("untitled", None)):
        parsed = open_pdf(make_pdf(["plain words on a page"], title=given))
        try:
            assert document_profile(parsed, None, {}, parsed.pages).title == expected
        finally:
            parsed.close()


def test_sections_at_gives_the_innermost_entry_of_each_level() -> None:
    outline = [OutlineEntry("Part II", 1, 2, 9), OutlineEntry("Item 7", 2, 2, 4), OutlineEntry("Item 8", 2, 5, 9),
               OutlineEntry("Notes", 3, 6, 7)]
    assert sections_at(outline, 1) == []
    assert sections_at(outline, 3) == ["Part II", "Item 7"]
    assert sections_at(outline, 6) == ["Part II", "Item 8", "Notes"]
    assert sections_at(outline, 8) == ["Part II", "Item 8"]


def test_cli_lists_documents_with_their_profile(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragspine.cli import main

    eng = Engine(Settings(data_dir=data_dir))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, TM, filename="3M_2018_10K.pdf")
        eng.ingest_text(LIB, "note", "A plain note without any title.")
    finally:
        eng.close()
    assert main(["--data-dir", str(data_dir), "libraries", "--documents", LIB]) == 0
    lines = sorted(capsys.readouterr().out.strip().splitlines())
    assert lines == ["3M_2018_10K\t5 pages\t3M COMPANY Form 10-K FY2018\t3M COMPANY\tFY2018\t10-K",
                     "note\t1 pages\tnote\t-\t-\t-"]


def test_backup_and_restore_carry_the_profile_and_the_context(shelf: Engine, tmp_path: Path) -> None:
    path = tmp_path / "shelf.backup"
    with path.open("wb") as out:
        shelf.backup([LIB], out)
    shelf.restore(path, as_name="copy")
    entry = next(d for d in shelf.documents("copy") if d["doc_id"] == "3M_2018_10K")
    assert entry["profile"] == _entry(shelf, "3M_2018_10K")["profile"]
    recs = shelf.store.scroll("copy", Where(kind=KIND_CHUNK, doc_id="3M_2018_10K"))
    assert [r.payload["context"] for r in recs if r.payload["page"] == 3] == ["3M COMPANY Form 10-K FY2018 | PART II"]
    hits = shelf.search({"query": QUERY, "libraries": ["copy"], "mode": "bm25"}).hits
    assert _page_score(hits, "3M_2018_10K", 3, "bm25") > _page_score(hits, "ACME_2019_10K", 3, "bm25")


def test_reweighting_keeps_the_context(shelf: Engine) -> None:
    # A re-weight rebuilds every BM25 vector from the stored payloads: from context and text.
    assert shelf.indexer.reweight(LIB) > 0
    hits = shelf.search({"query": QUERY, "libraries": [LIB], "mode": "bm25"}).hits
    assert _page_score(hits, "3M_2018_10K", 3, "bm25") > _page_score(hits, "ACME_2019_10K", 3, "bm25")


def test_rest_document_carries_the_profile(data_dir: Path) -> None:
    from fastapi.testclient import TestClient

    from ragspine.serving.app import create_app

    with TestClient(create_app(Settings(data_dir=data_dir, lexical_index="store"))) as c:
        assert c.post("/v1/libraries", json={"name": LIB}).status_code == 201
        r = c.post(f"/v1/libraries/{LIB}/documents?wait=true",
                   files={"file": ("3M_2018_10K.pdf", TM, "application/pdf")})
        assert r.status_code == 201, r.text
        doc = c.get(f"/v1/libraries/{LIB}/documents/3M_2018_10K").json()
        assert (doc["profile"]["issuer"], doc["profile"]["period"], doc["profile"]["doc_type"]) == (
            "3M COMPANY", "FY2018", "10-K")
        assert doc["profile"]["outline"][1] == {"title": "Item 7. Management's Discussion and Analysis",
                                                 "level": 2, "page": 2, "end_page": 2}
        hits = c.post("/v1/search", json={"query": "capital expenditure", "libraries": [LIB], "mode": "bm25",
                                          "filters": [{"field": "fiscal_year", "op": "eq", "value": 2018}]})
        assert hits.status_code == 200 and hits.json()["hits"][0]["metadata"]["issuer"] == "3M COMPANY"


def test_a_cover_without_the_registrant_caption_names_its_filer_below_the_file_number() -> None:
    # As 3M's 2018 cover: no "(Exact name of registrant ...)", the name right below the file number.
    cover = make_pdf([Page(["FORM 10-K", "For the fiscal year ended December 31, 2018",
                            "Commission file number 1-3285", "3M COMPANY", "State of Incorporation: Delaware"])])
    parsed = open_pdf(cover)
    try:
        p = document_profile(parsed, "filing.pdf", {}, parsed.pages)
        assert (p.issuer, p.sources["issuer"], p.period) == ("3M COMPANY", "first_pages", "FY2018")
    finally:
        parsed.close()


def test_the_title_is_the_first_pages_largest_type() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 140), "Harbour Outlook", fontsize=26)
    page.insert_text((72, 175), "by the Port Research Unit", fontsize=11)
    page.insert_textbox(pymupdf.Rect(72, 200, 523, 400), "Container volumes rose in every terminal this year. " * 4,
                        fontsize=11)
    page.insert_text((40, 700), "arXiv:2401.00001v1 [cs.CL] 1 Jan 2024", fontsize=30, rotate=90)  # a side stamp
    data = doc.tobytes()
    doc.close()
    parsed = open_pdf(data)
    try:
        p = document_profile(parsed, None, {}, parsed.pages)
        assert (p.title, p.sources["title"]) == ("Harbour Outlook", "first_pages")
        # Page 1 dropped by the policy: its title is not read.
        assert document_profile(parsed, None, {}, []).title is None
    finally:
        parsed.close()


def test_plain_text_gets_no_heading_context(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # "Revenue by segment" would pass for a heading on a PDF page; plain text has no layout to say so.
    monkeypatch.setattr("ragspine.indexing.pipeline.HEADING_LINES", True)
    engine.create_library(LIB)
    engine.ingest_text(LIB, "t", "The annual review of the port.\n\nRevenue by segment\n\n"
                       + "Sales of the harbour division grew in the year. " * 12)
    ctx = [r.payload.get("context") for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK))]
    assert len(ctx) >= 2 and ctx == [None] * len(ctx)


def test_a_heading_line_names_the_section_where_the_outline_has_none(engine: Engine,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    engine.create_library(LIB)
    body = "Container volumes rose at every terminal while dredging finished early. " * 12  # > 480 chars
    pdf = make_pdf([Page(["Harbour Operations", body])])
    engine.ingest(LIB, pdf, filename="ops.pdf")
    # Off by default (HEADING_LINES: it did not measure better): no context at all here.
    assert {r.payload.get("context") for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK))} == {None}
    monkeypatch.setattr("ragspine.indexing.pipeline.HEADING_LINES", True)
    monkeypatch.setattr("ragspine.indexing.content_key.HEADING_LINES", True)
    engine.ingest(LIB, pdf, filename="ops.pdf")  # a new content key: the context rule is part of it
    recs = sorted(engine.store.scroll(LIB, Where(kind=KIND_CHUNK, live=True)), key=lambda r: r.payload["start"])
    assert len(recs) >= 2 and recs[0].payload["text"].startswith("Harbour Operations")
    # The first passage holds the heading; the ones after it carry it as their context.
    assert recs[0].payload.get("context") is None
    assert {r.payload.get("context") for r in recs[1:]} == {"Harbour Operations"}
