"""Invariant 1 (docs/invariants.md) for the graph: RESTRICTED pages and documents contribute nothing. No canary in
any node, edge or citation, in the graph's files, or after a rebuild from the store; no
citation points at a RESTRICTED page; the RESTRICTED document is not even a node."""

from __future__ import annotations

import json
from pathlib import Path

from graph_kit import RELATIONS_FILE

from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.demo.corpus import demo_relations_csv
from ragspine.engine import Engine

MEMO = "acme-board-memo-2023"


def canaries(docs: list[DemoDocument]) -> list[str]:
    out = sorted({c for d in docs for c in d.canaries})
    assert len(out) == 5
    return out


def graph_files(engine: Engine) -> list[Path]:
    root = Path(engine.settings.data_dir) / "graphs"
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    return files


def assert_clean(engine: Engine, docs: list[DemoDocument]) -> None:
    text = json.dumps(engine.graph.snapshot(DEMO_LIBRARY), ensure_ascii=False).lower()
    blobs = [p.read_bytes().lower() for p in graph_files(engine)]
    for c in canaries(docs) + [MEMO]:
        assert c.lower() not in text, c
        for b in blobs:
            assert c.lower().encode() not in b, c
    restricted = {(d.doc_id, p) for d in docs for p in d.restricted_pages}
    snap = engine.graph.snapshot(DEMO_LIBRARY)
    cited = {(c["doc_id"], c.get("page")) for e in snap["edges"] for c in e["citations"] if "doc_id" in c}
    assert cited and not {x for x in cited if x in restricted}
    assert MEMO not in {d for d, _ in cited}
    assert f"doc:{MEMO}" not in {n["id"] for n in snap["nodes"]}


def test_no_canary_in_the_graph(demo_reader: Engine, demo_docs: list[DemoDocument]) -> None:
    assert_clean(demo_reader, demo_docs)
    # Every indexed document is in the graph (so the check above had something to look at).
    docs = {n["id"] for n in demo_reader.graph.snapshot(DEMO_LIBRARY)["nodes"] if n["type"] == "document"}
    assert docs == {f"doc:{d.doc_id}" for d in demo_docs if not d.restricted}


def test_no_canary_after_a_rebuild_from_the_store(demo_engine: Engine, demo_docs: list[DemoDocument]) -> None:
    demo_engine.graph.rebuild(DEMO_LIBRARY)
    assert_clean(demo_engine, demo_docs)


def test_a_canary_declared_as_alias_finds_nothing(demo_engine: Engine, demo_docs: list[DemoDocument]) -> None:
    """Even a dictionary that names the canaries matches none: their pages never reached the
    graph (the aliases themselves are the user's own words and stay)."""
    cs = canaries(demo_docs)
    rows = "".join(f"Project {i},derived_from,revenue,test,metric,metric,{c},\n" for i, c in enumerate(cs))
    demo_engine.graph.upload_relations(DEMO_LIBRARY, (demo_relations_csv() + rows).encode(), RELATIONS_FILE)
    snap = demo_engine.graph.snapshot(DEMO_LIBRARY)
    aliases = {a for n in snap["nodes"] for a in n["aliases"]}
    assert set(cs) <= aliases
    matched = {c.get("match") for e in snap["edges"] for c in e["citations"]}
    assert not matched & {c.lower() for c in cs}
    for i in range(len(cs)):
        node = demo_engine.graph.resolve(DEMO_LIBRARY, f"Project {i}")
        mentions = demo_engine.graph.neighbors(DEMO_LIBRARY, node.id, relation="mentions,co_occurs_with")
        assert mentions["neighbors"] == []
