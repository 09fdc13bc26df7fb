"""The relation graph with two replicas over one Qdrant: kept in the library's collection
(no SQLite file on the shared volume), written under the library's writer lease. Replica A
ingests the demo reports while replica B uploads the declared relations, at the same time;
both replicas then answer exactly the graph one embedded engine builds from the same input
(the graph does not depend on the order of its inputs: tests/graph/test_lifecycle.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from cluster.replica_kit import close, replica
from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, build_demo_corpus
from ragspine.demo.corpus import demo_relations_csv
from ragspine.engine import Engine
from ragspine.graph._stored import StoredGraphStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]


def test_concurrent_ingest_and_relation_upload_on_two_replicas(tmp_path: Path) -> None:
    docs = build_demo_corpus(tmp_path / "pdfs")
    relations = demo_relations_csv().encode()
    single = Engine(Settings(data_dir=tmp_path / "single", reranker="none", ocr="off"))
    try:
        single.create_library(DEMO_LIBRARY)
        for d in docs:
            single.ingest(DEMO_LIBRARY, d.path, d.metadata)
        single.graph.upload_relations(DEMO_LIBRARY, relations, "demo-relations.csv")
        want = json.dumps(single.graph.snapshot(DEMO_LIBRARY), sort_keys=True)
    finally:
        single.close()

    client = QdrantClient(":memory:")
    shared = tmp_path / "shared"
    a, b = replica(client, shared), replica(client, shared)
    try:
        assert isinstance(a.graph.graphs, StoredGraphStore) and isinstance(b.graph.graphs, StoredGraphStore)
        a.create_library(DEMO_LIBRARY)
        errors: list[BaseException] = []

        def ingest_all() -> None:
            try:
                for d in docs:
                    a.ingest(DEMO_LIBRARY, d.path, d.metadata)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        def upload() -> None:
            try:
                b.graph.upload_relations(DEMO_LIBRARY, relations, "demo-relations.csv")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=ingest_all), threading.Thread(target=upload)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for engine in (a, b):
            assert json.dumps(engine.graph.snapshot(DEMO_LIBRARY), sort_keys=True) == want
        assert not (shared / "graphs").exists()  # nothing on the shared volume
    finally:
        close(a, b, client=client)


def test_graph_writes_of_two_replicas_queue_on_the_lease(tmp_path: Path) -> None:
    """B is inside a graph write when A commits a document: A's graph update waits for B's
    commit (the lease), so neither overwrites the other's generation."""
    docs = build_demo_corpus(tmp_path / "pdfs")
    client = QdrantClient(":memory:")
    a, b = replica(client, tmp_path / "shared"), replica(client, tmp_path / "shared")
    try:
        a.create_library(DEMO_LIBRARY)
        a.ingest(DEMO_LIBRARY, docs[0].path, docs[0].metadata)
        inside, go_on, a_done = threading.Event(), threading.Event(), threading.Event()

        def b_uploads() -> None:
            real = b.graph.graphs.replace_sources

            def slow(library: str, changes: dict) -> None:
                real(library, changes)
                inside.set()
                go_on.wait(10)

            b.graph.graphs.replace_sources = slow  # type: ignore[method-assign]
            try:
                b.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), "demo-relations.csv")
            finally:
                b.graph.graphs.replace_sources = real  # type: ignore[method-assign]

        def a_ingests() -> None:
            a.ingest(DEMO_LIBRARY, docs[1].path, docs[1].metadata)
            a_done.set()

        tb = threading.Thread(target=b_uploads)
        tb.start()
        assert inside.wait(10)
        ta = threading.Thread(target=a_ingests)
        ta.start()
        assert not a_done.wait(1.0), "A wrote the library while B held its lease"
        go_on.set()
        tb.join(20), ta.join(20)
        assert a_done.is_set()
        snaps = [json.dumps(e.graph.snapshot(DEMO_LIBRARY), sort_keys=True) for e in (a, b)]
        assert snaps[0] == snaps[1]
        snap = json.loads(snaps[0])
        doc_nodes = {n["id"] for n in snap["nodes"] if n["type"] == "document"}
        assert doc_nodes == {f"doc:{docs[0].doc_id}", f"doc:{docs[1].doc_id}"}
        assert any(e["relation"] != "mentions" for e in snap["edges"])  # the declared relations too
    finally:
        close(a, b, client=client)
