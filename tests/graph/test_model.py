"""Pure pieces of the graph: names, merging what sources say, alias matching, argument checks."""

from __future__ import annotations

import pytest

from ragspine.graph._extract import AliasMatcher, metadata_contribution, text_contribution
from ragspine.graph._model import (
    RANK_DECLARED,
    RANK_EXPLICIT,
    RANK_METADATA,
    Contribution,
    NodeSpec,
    canonical,
    check_depth,
    merge_specs,
    norm,
    relation_list,
    slug,
)
from ragspine.graph.errors import DepthOutOfRangeError, UnknownRelationError


def test_norm_and_slug() -> None:
    assert norm("  ＡＣＭＥ\n Robotics ") == "acme robotics"
    assert slug("Acme Holdings") == "acme-holdings"
    assert slug("S&P 500 index") == "s-p-500-index"
    assert slug("阿克米控股") == "阿克米控股"
    assert slug("operating_margin") == "operating-margin"
    assert slug("!!!").startswith("e-")


def test_symmetric_relations_are_stored_once() -> None:
    assert canonical("b", "peer_of", "a") == ("a", "b")
    assert canonical("b", "co_occurs_with", "a") == ("a", "b")
    assert canonical("b", "subsidiary_of", "a") == ("b", "a")


def test_merge_specs_highest_rank_names_the_node() -> None:
    specs = {
        "meta:x": NodeSpec("acme", "ACME", "company", RANK_METADATA, ("阿克米",)),
        "declared": NodeSpec("acme", "Acme", "subsidiary", RANK_DECLARED, ("Acme Inc",)),
        "meta:y": NodeSpec("acme", "acme", "company", RANK_METADATA),
    }
    node = merge_specs("acme", specs)
    assert (node.name, node.type) == ("Acme", "subsidiary")
    # Other names become aliases unless they normalise to the name; sorted by normal form.
    assert node.aliases == ("Acme Inc", "阿克米")
    explicit = {**specs, "declared2": NodeSpec("acme", "Acme Co", "segment", RANK_EXPLICIT)}
    assert merge_specs("acme", explicit).type == "segment"


def test_matcher_latin_needs_word_boundaries_cjk_does_not() -> None:
    m = AliasMatcher({norm(a): a for a in ["Acme", "Acme Robotics", "阿克米能源", "营业利润", "营业利润率", "S&P"]})
    found = m.find("ACME\nRobotics; Acmex and xacme; 阿克米能源有限公司的营业利润率上升。S&P rose; acme.")
    assert found == [
        ("acme robotics", "Acme Robotics"),  # across a line break, case-folded, longest first
        ("阿克米能源", "阿克米能源"),  # inside a longer CJK run
        ("营业利润率", "营业利润率"),  # leftmost-longest: not 营业利润
        ("s&p", "S&P"),
        ("acme", "Acme"),
    ]
    # A longer alias that fails its end boundary falls back to a shorter one.
    assert m.find("acme robotics2") == [("acme", "Acme")]
    assert AliasMatcher({}).find("anything") == []


def test_matcher_skips_one_character_aliases() -> None:
    m = AliasMatcher({"a": "x", "中": "y", "ab": "z"})
    assert m.find("a ab 中") == [("ab", "z")]


def test_text_contribution_mentions_and_pairs_with_chunk_lineage() -> None:
    m = AliasMatcher({"acme": "acme", "globex": "globex", "营业收入": "revenue"})
    passages = [
        {"chunk_id": "d/p2/c0", "page": 2, "text": "Globex and Acme; Acme again", "bbox": [1, 2, 3, 4]},
        {"chunk_id": "d/p1/c0", "page": 1, "text": "营业收入", "bbox": [0, 0, 1, 1]},
        {"chunk_id": "d/p1/c1", "page": 1, "text": "nothing here", "bbox": [0, 0, 1, 1]},
    ]
    c = text_contribution("d", 3, passages, m, title="Report D")
    assert c.nodes == (NodeSpec("doc:d", "Report D", "document", RANK_METADATA),)
    got = [(e.source, e.relation, e.target, e.citation["chunk_id"]) for e in c.edges]
    assert got == [
        ("doc:d", "mentions", "revenue", "d/p1/c0"),
        ("doc:d", "mentions", "acme", "d/p2/c0"),
        ("doc:d", "mentions", "globex", "d/p2/c0"),
        ("acme", "co_occurs_with", "globex", "d/p2/c0"),
    ]
    cite = c.edges[1].citation
    assert cite == {"kind": "text", "doc_id": "d", "version": 3, "page": 2, "chunk_id": "d/p2/c0",
                    "bbox": (1.0, 2.0, 3.0, 4.0), "match": "acme"}


def test_documents_with_nothing_to_say_contribute_nothing() -> None:
    m = AliasMatcher({"acme": "acme"})
    assert text_contribution("d", 1, [{"chunk_id": "d/p1/c0", "page": 1, "text": "no names"}], m) == Contribution()
    assert metadata_contribution("d", 1, "T", {"topic": "x"}, {}) == Contribution()


def test_metadata_contribution_resolves_declared_aliases() -> None:
    meta = {"entity": "阿克米能源", "entity_local": "Acme Power", "period": 2023, "topic": "x"}
    c = metadata_contribution("d", 1, "Title", meta, {"阿克米能源": "acme-energy"})
    assert [(n.id, n.type) for n in c.nodes] == [("doc:d", "document"), ("acme-energy", "company"),
                                                  ("2023", "period")]
    assert c.nodes[1].aliases == ("Acme Power",)
    assert [(e.source, e.relation, e.target, e.citation["field"]) for e in c.edges] == [
        ("doc:d", "mentions", "acme-energy", "entity"),
        ("doc:d", "mentions", "2023", "period"),
        ("2023", "co_occurs_with", "acme-energy", "entity,period"),
    ]


def test_relation_list_and_depth_checks() -> None:
    assert relation_list(None) is None
    assert relation_list("Subsidiary of, peer-of") == ("subsidiary_of", "peer_of")
    assert relation_list(["mentions", "mentions"]) == ("mentions",)
    with pytest.raises(UnknownRelationError, match="unknown relation 'owns'; allowed: subsidiary_of"):
        relation_list("owns")
    with pytest.raises(UnknownRelationError):
        relation_list(" , ")
    assert check_depth(3) == 3
    for bad in (0, 4, True, "2"):
        with pytest.raises(DepthOutOfRangeError, match="depth must be an integer from 1 to 3"):
            check_depth(bad)  # type: ignore[arg-type]
