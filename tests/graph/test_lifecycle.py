"""The graph follows the index: replacing or deleting a document changes exactly that
document's edges, a deleted library takes its graph along, and the graph is the same whatever
order documents and relations arrived in."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from graph_kit import RELATIONS_FILE, ingest_demo

import pdfs
from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.demo.corpus import demo_relations_csv
from ragspine.engine import Engine
from ragspine.errors import LibraryNotFoundError
from ragspine.graph import ExtractedRelation, Node
from ragspine.graph.errors import RelationCycleError

ROBOTICS = "acme-robotics-ar-2023"
GLOBEX = "globex-corp-ar-2022"


def citations(engine: Engine) -> set[tuple[str, str, str, str]]:
    """Every (edge, citation) of the demo graph, as comparable tuples."""
    snap = engine.graph.snapshot(DEMO_LIBRARY)
    return {(e["source"], e["relation"], e["target"], json.dumps(c, sort_keys=True, ensure_ascii=False))
            for e in snap["edges"] for c in e["citations"]}


def of_doc(cites: set[tuple[str, str, str, str]], doc_id: str) -> set[tuple[str, str, str, str]]:
    return {c for c in cites if json.loads(c[3]).get("doc_id") == doc_id}


def test_deleting_a_document_removes_exactly_its_edges(demo_engine: Engine) -> None:
    before = citations(demo_engine)
    nodes_before = {n["id"] for n in demo_engine.graph.snapshot(DEMO_LIBRARY)["nodes"]}
    assert len(of_doc(before, ROBOTICS)) > 10
    demo_engine.delete_document(DEMO_LIBRARY, ROBOTICS)
    after = citations(demo_engine)
    assert before - after == of_doc(before, ROBOTICS)
    assert after - before == set()
    nodes_after = {n["id"] for n in demo_engine.graph.snapshot(DEMO_LIBRARY)["nodes"]}
    assert nodes_before - nodes_after == {f"doc:{ROBOTICS}"}
    # The declared entity stays; what only the deleted report said about it is gone.
    assert demo_engine.graph.entities(DEMO_LIBRARY, "Acme Robotics")[0].id == "acme-robotics"


def test_replacing_a_document_rederives_its_edges(demo_engine: Engine) -> None:
    before = citations(demo_engine)
    new_pdf = pdfs.make_pdf([
        "Acme Robotics buys its power from Acme Energy under a ten-year contract.",
        "Globex Corp remains the main competitor of Acme Robotics in Europe.",
    ])
    r = demo_engine.ingest(DEMO_LIBRARY, new_pdf, {"doc_id": ROBOTICS, "entity": "Acme Robotics", "period": 2024})
    assert (r.status, r.version, r.warnings) == ("indexed", 2, [])
    after = citations(demo_engine)
    # Every other document's citations are untouched; none of version 1 is left.
    assert after - of_doc(after, ROBOTICS) == before - of_doc(before, ROBOTICS)
    assert {json.loads(c[3])["version"] for c in of_doc(after, ROBOTICS)} == {2}
    mine = {(s, rel, t, json.loads(c).get("page"), json.loads(c).get("field")) for s, rel, t, c in of_doc(after, ROBOTICS)}
    doc = f"doc:{ROBOTICS}"
    assert mine == {
        (doc, "mentions", "acme-robotics", None, "entity"),
        (doc, "mentions", "2024", None, "period"),
        ("2024", "co_occurs_with", "acme-robotics", None, "entity,period"),
        (doc, "mentions", "acme-robotics", 1, None),
        (doc, "mentions", "acme-energy", 1, None),
        ("acme-energy", "co_occurs_with", "acme-robotics", 1, None),
        (doc, "mentions", "acme-robotics", 2, None),
        (doc, "mentions", "globex-corp", 2, None),
        ("acme-robotics", "co_occurs_with", "globex-corp", 2, None),
    }
    # Ingesting the same bytes again changes nothing.
    again = demo_engine.ingest(DEMO_LIBRARY, new_pdf, {"doc_id": ROBOTICS, "entity": "Acme Robotics", "period": 2024})
    assert again.status == "unchanged" and citations(demo_engine) == after


def test_a_document_turned_restricted_leaves_the_graph(demo_engine: Engine, demo_docs: list[DemoDocument]) -> None:
    before = citations(demo_engine)
    doc = next(d for d in demo_docs if d.doc_id == ROBOTICS)
    r = demo_engine.ingest(DEMO_LIBRARY, doc.path, {**doc.metadata, "sensitivity": "RESTRICTED"})
    assert r.status == "dropped_by_policy"
    assert citations(demo_engine) == before - of_doc(before, ROBOTICS)


def snapshot_json(engine: Engine) -> str:
    return json.dumps(engine.graph.snapshot(DEMO_LIBRARY), sort_keys=True, ensure_ascii=False)


def test_same_graph_whatever_the_order(demo_engine: Engine, demo_docs: list[DemoDocument], tmp_path: Path) -> None:
    """Relations first and documents in reverse order (Globex left out) give the graph that
    relations last, then deleting Globex gives."""
    demo_engine.delete_document(DEMO_LIBRARY, GLOBEX)
    other = Engine(Settings(data_dir=tmp_path / "other"))
    try:
        other.create_library(DEMO_LIBRARY)
        other.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)
        for d in reversed(demo_docs):
            if d.doc_id != GLOBEX:
                other.ingest(DEMO_LIBRARY, d.path, d.metadata)
        assert snapshot_json(other) == snapshot_json(demo_engine)
    finally:
        other.close()


def test_new_aliases_reach_documents_indexed_before(demo_engine: Engine) -> None:
    """Declaring an alias matches it in every document already indexed; taking it back
    removes those matches again."""
    def hits_of(alias: str) -> set[tuple[str, int]]:
        return {(c["doc_id"], c["page"]) for e in demo_engine.graph.snapshot(DEMO_LIBRARY)["edges"]
                for c in e["citations"] if c.get("match") == alias}

    assert hits_of("fleetpick") == set()
    extra = demo_relations_csv() + "FleetPick,derived_from,revenue,product line,metric,,,\n"
    demo_engine.graph.upload_relations(DEMO_LIBRARY, extra.encode(), RELATIONS_FILE)
    assert hits_of("fleetpick") == {("acme-holdings-ar-2023", 2), ("acme-robotics-ar-2023", 1)}
    demo_engine.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)
    assert hits_of("fleetpick") == set()


def test_a_refused_upload_changes_nothing(demo_engine: Engine) -> None:
    before = snapshot_json(demo_engine)
    bad = demo_relations_csv() + "Acme Holdings,subsidiary_of,Acme Robotics,loop,,,,\n"
    with pytest.raises(RelationCycleError, match=r"row 2\).*row 10\)"):
        demo_engine.graph.upload_relations(DEMO_LIBRARY, bad.encode(), RELATIONS_FILE)
    assert snapshot_json(demo_engine) == before


def test_merge_adds_to_the_declared_relations(demo_engine: Engine) -> None:
    more = "source,relation,target,provenance\nInitech,peer_of,Acme Holdings,press release\n"
    out = demo_engine.graph.upload_relations(DEMO_LIBRARY, more.encode(), "more.csv", mode="merge")
    assert out["rows"] == 1 and out["declared"]["relations"] == 9
    found = demo_engine.graph.neighbors(DEMO_LIBRARY, "acme-holdings", relation="peer_of")
    assert [n["id"] for n in found["neighbors"]] == ["globex-corp", "initech"]
    demo_engine.graph.upload_relations(DEMO_LIBRARY, more.encode(), "more.csv")  # replace
    found = demo_engine.graph.neighbors(DEMO_LIBRARY, "acme-holdings", relation="peer_of,subsidiary_of")
    assert [n["id"] for n in found["neighbors"]] == ["initech"]


def test_deleting_the_library_deletes_its_graph(demo_engine: Engine) -> None:
    folder = Path(demo_engine.settings.data_dir) / "graphs" / DEMO_LIBRARY
    assert folder.is_dir()
    demo_engine.delete_library(DEMO_LIBRARY)
    assert not folder.exists()
    with pytest.raises(LibraryNotFoundError):
        demo_engine.graph.entities(DEMO_LIBRARY, "Acme")
    demo_engine.create_library(DEMO_LIBRARY)
    assert demo_engine.graph.entities(DEMO_LIBRARY, "") == []


def test_a_library_indexed_before_the_graph_gets_one(demo_data_dir: Path, tmp_path: Path) -> None:
    """No graph file (a library from before the graph existed): the first lookup builds it
    from the manifest and the stored passages."""
    data_dir = tmp_path / "data"
    shutil.copytree(demo_data_dir, data_dir)
    shutil.rmtree(data_dir / "graphs")
    eng = Engine(Settings(data_dir=data_dir))
    try:
        names = [n.id for n in eng.graph.entities(DEMO_LIBRARY, "acme")]
        assert names == ["acme-energy", "acme-holdings", "acme-robotics"]  # the metadata's entities
        snap = eng.graph.snapshot(DEMO_LIBRARY)
        docs = {n["id"] for n in snap["nodes"] if n["type"] == "document"}
        assert docs == {"doc:acme-energy-bulletin-2023", "doc:acme-holdings-ar-2023", f"doc:{ROBOTICS}", f"doc:{GLOBEX}"}
        assert any(c["kind"] == "text" for e in snap["edges"] for c in e["citations"])
        # Declaring the relations then gives the very graph of the pristine library.
        eng.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)
    finally:
        eng.close()
    shutil.copytree(demo_data_dir, tmp_path / "pristine")
    a, b = Engine(Settings(data_dir=data_dir)), Engine(Settings(data_dir=tmp_path / "pristine"))
    try:
        assert snapshot_json(a) == snapshot_json(b)
    finally:
        a.close()
        b.close()


def test_a_delete_before_the_graph_exists_does_not_leave_an_empty_one(demo_data_dir: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(demo_data_dir, data_dir)
    shutil.rmtree(data_dir / "graphs")
    eng = Engine(Settings(data_dir=data_dir))
    try:
        eng.delete_document(DEMO_LIBRARY, GLOBEX)
        docs = {n["id"] for n in eng.graph.snapshot(DEMO_LIBRARY)["nodes"] if n["type"] == "document"}
        assert docs == {"doc:acme-energy-bulletin-2023", "doc:acme-holdings-ar-2023", f"doc:{ROBOTICS}"}
    finally:
        eng.close()


class CoMentionExtractor:
    """A stand-in model: relates the entities it is shown, plus noise it must not get away with."""

    name = "stub-model"

    def extract(self, text: str, entities: Sequence[Node]) -> Sequence[ExtractedRelation]:
        ids = {e.id for e in entities}
        out = [ExtractedRelation("Initech", "peer_of", "Acme Robotics"),  # not in the dictionary
               ExtractedRelation("Acme Robotics", "mentions", "Acme Energy"),  # not declarable
               ExtractedRelation("Acme Robotics", "peer_of", "acme robotics")]  # itself
        if {"acme-robotics", "globex-corp"} <= ids:
            out.append(ExtractedRelation("Globex", "Peer of", "Acme Robotics", 0.8))
        return out


class BrokenExtractor:
    name = "broken"

    def extract(self, text: str, entities: Sequence[Node]) -> Sequence[ExtractedRelation]:
        raise RuntimeError("model server down")


def test_model_extractor_edges_are_marked_unverified(demo_engine: Engine) -> None:
    assert demo_engine.graph.extractor is None  # off by default
    before = citations(demo_engine)
    demo_engine.graph.extractor = CoMentionExtractor()
    demo_engine.graph.rebuild(DEMO_LIBRARY)
    model = [(s, r, t, json.loads(c)) for s, r, t, c in citations(demo_engine) if json.loads(c)["kind"] == "model"]
    assert model and {(s, r, t) for s, r, t, _ in model} == {("acme-robotics", "peer_of", "globex-corp")}
    for *_, c in model:
        assert (c["status"], c["extractor"], c["confidence"]) == ("model-derived, unverified", "stub-model", 0.8)
        assert {"doc_id", "page", "chunk_id", "bbox"} <= set(c)
    assert {x for x in citations(demo_engine) if json.loads(x[3])["kind"] != "model"} == before

    demo_engine.graph.extractor = BrokenExtractor()
    demo_engine.graph.rebuild(DEMO_LIBRARY)  # a failing model costs its edges, nothing else
    assert citations(demo_engine) == before


def test_ingest_with_the_graph_from_scratch(tmp_path: Path, demo_docs: list[DemoDocument]) -> None:
    """Relations uploaded after the documents or before them: same graph (and the listener
    reports no warning)."""
    a = Engine(Settings(data_dir=tmp_path / "a"))
    try:
        ingest_demo(a, demo_docs)
        snap: Any = snapshot_json(a)
    finally:
        a.close()
    b = Engine(Settings(data_dir=tmp_path / "b"))
    try:
        b.create_library(DEMO_LIBRARY)
        b.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)
        for d in demo_docs:
            assert b.ingest(DEMO_LIBRARY, d.path, d.metadata).warnings == []
        assert snapshot_json(b) == snap
    finally:
        b.close()
