"""Glossary files: what is accepted, what is refused (naming the row), and where it is kept."""

from __future__ import annotations

import json

import pytest

from ragspine.chain.glossary import MAX_GLOSSARY_BYTES, GlossaryEntry, GlossaryError, parse_glossary
from ragspine.engine import Engine
from ragspine.errors import NotFoundError, OversizeError


def test_csv_with_kinds_bom_and_blank_synonyms() -> None:
    data = "\ufeffterm,synonyms,kind\nrevenue,turnover| 营业收入 ||,metric\nAcme,Acme Corp,entity\n".encode()
    assert parse_glossary(data, "g.csv") == [
        GlossaryEntry("revenue", ("turnover", "营业收入"), "metric"),
        GlossaryEntry("Acme", ("Acme Corp",), "entity"),
    ]


def test_json_list_or_entries_object() -> None:
    rows = [{"term": "net income", "synonyms": ["net profit", "净利润"]}, {"term": "EBIT", "synonyms": "operating profit"}]
    expected = [GlossaryEntry("net income", ("net profit", "净利润")), GlossaryEntry("EBIT", ("operating profit",))]
    assert parse_glossary(json.dumps(rows).encode(), "g.json") == expected
    assert parse_glossary(json.dumps({"entries": rows}).encode(), "upload") == expected


@pytest.mark.parametrize(("data", "message"), [
    (b"term,synonyms\nrevenue,\n", "row 2: term 'revenue' has no synonym"),
    (b"term,synonyms\nrevenue,turnover\nRevenue,sales\n", "row 3: term 'Revenue' is already defined in row 2"),
    (b"term,synonyms\nr,turnover\n", "row 2: term 'r' must be 2 to 200 characters"),
    (b"term,synonyms,kind\nrevenue,turnover,colour\n", "row 2: kind 'colour' is not one of metric, entity, other"),
    (b"term,synonyms\nrevenue,turnover,extra\n", "row 2: more fields than the header has columns"),
    (b"term,words\nrevenue,turnover\n", "the CSV header lacks synonyms"),
    (b"term,synonyms,notes\nrevenue,turnover,x\n", "unknown CSV column(s) notes"),
    (b"term,synonyms\n", "the glossary has a header but no rows"),
    (b"   \n", "the glossary is empty"),
    (b"\xff\xfeterm", "not UTF-8"),
    (b'[{"term": "revenue", "synonyms": ["turnover"], "colour": 1}]', "row 1: unknown field(s) colour"),
    (b'[{"term": "revenue", "synonyms": 3}]', "row 1: synonyms must be a list"),
    (b'["revenue"]', "row 1: not an object"),
    (b'{"terms": []}', "a JSON glossary is a list"),
    (b'[{"term": "rev\\u0007enue", "synonyms": ["turnover"]}]', "control characters"),
    (b"[{", "not valid JSON"),
])
def test_bad_files_are_refused_naming_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(GlossaryError) as exc:
        parse_glossary(data, "g.json" if data[:1] in b"[{" else "g.csv")
    assert message in exc.value.detail
    assert exc.value.status == 422


def test_every_bad_row_is_named_up_to_five() -> None:
    data = ("term,synonyms\n" + "".join(f"t{i},\n" for i in range(7))).encode()
    with pytest.raises(GlossaryError) as exc:
        parse_glossary(data, "g.csv")
    assert [f"row {n}:" in exc.value.detail for n in range(2, 9)] == [True] * 5 + [False] * 2
    assert "(and 2 more)" in exc.value.detail


def test_too_large() -> None:
    with pytest.raises(OversizeError):
        parse_glossary(b"x" * (MAX_GLOSSARY_BYTES + 1))


def test_stored_in_the_library_and_replaced_whole(engine: Engine) -> None:
    engine.create_library("lib")
    engine.ingest_text("lib", "d", "Revenue grew.")
    assert engine.glossaries.entries("lib") == []
    with pytest.raises(NotFoundError):
        engine.glossaries.get("lib")
    out = engine.glossaries.upload("lib", b"term,synonyms\nrevenue,turnover\n", "g.csv")
    assert (out["terms"], out["file"]) == (1, "g.csv")
    engine.glossaries.upload("lib", b"term,synonyms\nprofit,earnings\n", "h.csv")
    assert engine.glossaries.entries("lib") == [GlossaryEntry("profit", ("earnings",))]
    with pytest.raises(GlossaryError):  # a bad upload changes nothing
        engine.glossaries.upload("lib", b"term,synonyms\nx,\n", "bad.csv")
    assert engine.glossaries.get("lib")["file"] == "h.csv"
    # The glossary is not a document: the library's documents and searches are as before.
    assert [d["doc_id"] for d in engine.documents("lib")] == ["d"]
    assert [h.doc_id for h in engine.search({"query": "revenue", "libraries": ["lib"]}).hits] == ["d"]
    engine.glossaries.delete("lib")
    assert engine.glossaries.entries("lib") == []
    with pytest.raises(NotFoundError):
        engine.glossaries.delete("lib")
