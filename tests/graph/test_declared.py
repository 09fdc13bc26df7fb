"""Declared relations: CSV and JSON parse to the same thing, and every bad file is refused with
an error naming the row (and nothing is half-applied: see test_service.py)."""

from __future__ import annotations

import json

import pytest

from ragspine.demo.corpus import demo_relations_csv
from ragspine.graph._declared import declared_contribution, parse_relations
from ragspine.graph._model import RANK_DECLARED, RANK_EXPLICIT
from ragspine.graph.errors import (
    RelationCycleError,
    RelationsFileError,
    RelationsTooLargeError,
    SelfLoopError,
    UnknownRelationError,
)

HEADER = "source,relation,target,provenance\n"


def build(text: str, name: str = "r.csv"):  # type: ignore[no-untyped-def]
    return declared_contribution(parse_relations(text.encode(), name), name)


def test_csv_and_json_give_the_same_contribution() -> None:
    csv_text = (
        "relation,source,target,provenance,source_aliases\n"  # any column order
        "subsidiary_of,Acme Robotics,Acme Holdings,AR 2023 p.1,阿克米机器人|Acme Robo\n"
        "peer of,Acme Holdings,Globex,AR 2023 p.6,\n"
    )
    rows = [
        {"source": "Acme Robotics", "relation": "subsidiary_of", "target": "Acme Holdings",
         "provenance": "AR 2023 p.1", "source_aliases": ["阿克米机器人", "Acme Robo"]},
        {"source": "Acme Holdings", "relation": "peer of", "target": "Globex", "provenance": "AR 2023 p.6"},
    ]
    a = build(csv_text, "rel.csv")
    b = build(json.dumps(rows, ensure_ascii=False), "rel.json")
    c = build(json.dumps({"relations": rows}, ensure_ascii=False), "rel.json")
    assert a.nodes == b.nodes == c.nodes
    strip = lambda con: [(e.source, e.relation, e.target, e.citation["provenance"]) for e in con.edges]  # noqa: E731
    assert strip(a) == strip(b) == strip(c) == [
        ("acme-robotics", "subsidiary_of", "acme-holdings", "AR 2023 p.1"),
        ("acme-holdings", "peer_of", "globex", "AR 2023 p.6"),  # symmetric: smaller id first
    ]
    # CSV rows are numbered as a spreadsheet shows them (header = row 1), JSON rows from 1.
    assert [e.citation["row"] for e in a.edges] == [2, 3]
    assert [e.citation["row"] for e in b.edges] == [1, 2]
    assert a.edges[0].citation == {"kind": "declared", "provenance": "AR 2023 p.1", "file": "rel.csv", "row": 2}
    robotics = next(n for n in a.nodes if n.id == "acme-robotics")
    assert (robotics.type, robotics.rank, robotics.aliases) == ("subsidiary", RANK_DECLARED, ("阿克米机器人", "Acme Robo"))


def test_demo_relations() -> None:
    c = build(demo_relations_csv(), "demo-relations.csv")
    types = {n.id: (n.type, n.rank) for n in c.nodes}
    assert types["acme-holdings"] == ("company", RANK_EXPLICIT)
    assert types["acme-services"] == ("segment", RANK_EXPLICIT)
    assert types["revenue"] == ("metric", RANK_EXPLICIT)
    aliases = {n.id: n.aliases for n in c.nodes}
    assert aliases["acme-holdings"] == ("阿克米控股",)
    assert aliases["acme-energy"] == ("阿克米能源", "阿克米能源有限公司")
    assert len(c.edges) == 8


def test_a_name_may_be_an_alias_declared_in_a_later_row() -> None:
    c = build(HEADER.strip() + ",source_aliases\n"
              "阿克米能源,subsidiary_of,Acme Holdings,bulletin p.1,\n"
              "Acme Energy,peer_of,Globex,x,阿克米能源\n")
    assert [(e.source, e.target) for e in c.edges] == [("acme-energy", "acme-holdings"), ("acme-energy", "globex")]


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        (HEADER + "A,owns,B,x\n", UnknownRelationError,
         r"r\.csv row 2: unknown relation 'owns'; a relations file may declare subsidiary_of, peer_of, derived_from"),
        (HEADER + "A,mentions,B,x\n", UnknownRelationError, r"row 2: .*derived from documents and cannot be declared"),
        (HEADER + "A,peer_of,B,x\nA,subsidiary_of,a,x\n", SelfLoopError,
         r"r\.csv row 3: 'A' subsidiary_of 'a' relates an entity to itself"),
        ("source,relation,target,provenance,target_aliases\nA,subsidiary_of,B,x,Bee\nBee,peer_of,B,x,\n",
         SelfLoopError, r"row 3: .*\('Bee' and 'B' name the same entity\)"),
        (HEADER + "A,subsidiary_of,B,x\nB,subsidiary_of,C,x\nC,subsidiary_of,A,x\n", RelationCycleError,
         r"subsidiary_of relations form a cycle: 'A' subsidiary_of 'B' \(row 2\); 'B' subsidiary_of 'C' \(row 3\); "
         r"'C' subsidiary_of 'A' \(row 4\)"),
        (HEADER + "margin,derived_from,profit,x\nprofit,derived_from,margin,x\n", RelationCycleError,
         r"derived_from relations form a cycle: .*\(row 2\).*\(row 3\)"),
        ("source,relation,target\nA,peer_of,B\n", RelationsFileError, r"row 1 \(header\): missing column\(s\) provenance"),
        ("source,relation,target,provenance,colour\nA,peer_of,B,x,red\n", RelationsFileError,
         r"unknown column\(s\) colour"),
        (HEADER + "A,peer_of,,x\n", RelationsFileError, r"r\.csv row 2: 'target' is empty"),
        (HEADER + "A,peer_of,B,\n", RelationsFileError, r"row 2: 'provenance' is empty"),
        (HEADER + "A,peer_of,B,x,extra\n", RelationsFileError, r"row 2: 5 fields, but the header has 4"),
        (HEADER.strip() + ",source_type\nA,peer_of,B,x,planet\n", RelationsFileError,
         r"row 2: unknown source_type 'planet'; allowed: company, subsidiary"),
        (HEADER.strip() + ",source_type\nA,peer_of,B,x,metric\nA,peer_of,C,x,company\n", RelationsFileError,
         r"row 3: 'A' is declared a company, but row 2 declares it a metric"),
        ("source,relation,target,provenance,source_aliases\nA,peer_of,B,x,Z\nC,peer_of,B,x,Z\n", RelationsFileError,
         r"row 3: alias 'Z' of 'C' already names 'A' \(row 2\)"),
        ("", RelationsFileError, r"the file is empty"),
    ],
)
def test_bad_csv_names_the_row(text: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        build(text)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ('{"rows": []}', r"exactly one key, 'relations'"),
        ('[{"source": "A"', r"not valid JSON"),
        ('"text"', r"expected a JSON list of rows, got str"),
        ('[["A", "peer_of", "B", "x"]]', r"r\.json row 1: expected an object, got list"),
        ('[{"source": "A", "relation": "peer_of", "target": "B", "provenance": "x", "weight": 2}]',
         r"row 1: unknown key\(s\) weight"),
        ('[{"source": "A", "relation": "peer_of", "target": 7, "provenance": "x"}]', r"row 1: 'target' must be a string"),
    ],
)
def test_bad_json_names_the_row(doc: str, message: str) -> None:
    with pytest.raises(RelationsFileError, match=message):
        build(doc, "r.json")


def test_peer_cycles_are_fine_and_header_only_is_empty() -> None:
    c = build(HEADER + "A,peer_of,B,x\nB,peer_of,C,x\nC,peer_of,A,x\n")
    assert len(c.edges) == 3
    assert build(HEADER).edges == ()


def test_not_utf8_and_too_large() -> None:
    with pytest.raises(RelationsFileError, match=r"not UTF-8 text \(bad byte at offset 4\); save the file as UTF-8"):
        parse_relations(b"abc,\xff\xfe", "r.csv")
    with pytest.raises(RelationsTooLargeError) as exc:
        parse_relations(b"x" * (16 * 1024 * 1024 + 1), "r.csv")
    assert exc.value.status == 413


def test_merge_checks_cycles_across_uploads() -> None:
    first = build(HEADER + "A,subsidiary_of,B,x\n", "one.csv")
    more = parse_relations((HEADER + "B,subsidiary_of,A,y\n").encode(), "two.csv")
    with pytest.raises(RelationCycleError, match=r"\(row 2 of one\.csv\).*\(row 2\)"):
        declared_contribution(more, "two.csv", first)
    merged = declared_contribution(parse_relations((HEADER + "B,subsidiary_of,C,y\n").encode(), "two.csv"),
                                   "two.csv", first)
    assert [(e.source, e.target, e.citation["file"]) for e in merged.edges] == [
        ("a", "b", "one.csv"), ("b", "c", "two.csv")]
