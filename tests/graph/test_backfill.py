"""A library's whole graph is built outside its writer lease (cluster mode: the graph in Qdrant,
one writer per library across replicas): the passages are read and matched while ingests
commit freely, then the sources are written under the lease, and what was committed meanwhile
is caught up. The result is the graph a build under the lease gives."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from graph_kit import clean_settings, ingest_demo

from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.engine import Engine
from ragspine.store.base import KIND_CHUNK, Where
from ragspine.store.server import ServerStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]


@pytest.fixture
def cluster(tmp_path: Path, demo_docs: list[DemoDocument]) -> Iterator[Engine]:
    eng = Engine(clean_settings(data_dir=tmp_path / "data", writer_leases="on"), store=ServerStore.from_url(":memory:"))
    assert type(eng.graph.graphs).__name__ == "StoredGraphStore"
    ingest_demo(eng, demo_docs, relations=False)  # a library from before graphs had no declared relations
    yield eng
    eng.close()


def _forget_graph(eng: Engine) -> None:
    """The library as one indexed before graphs existed: no graph points, nothing in memory."""
    for kind in ("graph_src", "graph_meta"):
        eng.store.delete(DEMO_LIBRARY, Where(kind=kind))
    eng.graph.graphs.drop(DEMO_LIBRARY)
    assert not eng.graph.graphs.exists(DEMO_LIBRARY)


def _full_build_under_the_lease(eng: Engine) -> dict[str, Any]:
    """The reference: every source derived again under the lease, as builds used to run."""
    with eng.graph.graphs.locked(DEMO_LIBRARY):
        eng.graph.derive.sync_documents(DEMO_LIBRARY, force_text=True)
    return eng.graph.graphs.snapshot(DEMO_LIBRARY)


def _watch_passage_reads(eng: Engine, monkeypatch: pytest.MonkeyPatch, during: Any = None) -> list[bool]:
    """Record, for every read of a document's passages, whether this replica held the lease."""
    held: list[bool] = []
    real = eng.store.scroll

    def scroll(name: str, where: Any, *a: Any, **kw: Any) -> Any:
        if where.kind == KIND_CHUNK and where.doc_id is not None:
            held.append(eng.libraries._lease_users.get(name, 0) > 0)
            if during is not None and len(held) == 1:
                during()
        return real(name, where, *a, **kw)

    monkeypatch.setattr(eng.store, "scroll", scroll)
    return held


def test_a_library_without_a_graph_gets_it_built_outside_the_lease(cluster: Engine,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    before = copy.deepcopy(cluster.graph.graphs.snapshot(DEMO_LIBRARY))
    _forget_graph(cluster)
    held = _watch_passage_reads(cluster, monkeypatch)
    assert cluster.graph.entities(DEMO_LIBRARY, "")  # the first read builds it
    assert held and not any(held)  # every document's passages were read without the lease
    monkeypatch.undo()
    built = copy.deepcopy(cluster.graph.graphs.snapshot(DEMO_LIBRARY))
    full = copy.deepcopy(_full_build_under_the_lease(cluster))
    assert built == full == before


@pytest.mark.parametrize("change", ["ingest", "delete"])
def test_documents_committed_during_the_build_are_caught_up(cluster: Engine, monkeypatch: pytest.MonkeyPatch,
                                                            change: str) -> None:
    _forget_graph(cluster)
    done = threading.Event()

    def meanwhile() -> None:
        def go() -> None:
            if change == "ingest":
                # An entity the library knows: the alias dictionary stays, so only this text is
                # matched under the lease (a new entity matches every text again, as any commit does).
                cluster.ingest_text(DEMO_LIBRARY, "late-memo", "Acme Robotics signed a supply deal with Globex Corp.",
                                    {"entity": "Acme Holdings"}, title="Late memo")
            else:  # the last document of its entity: every text is matched again
                cluster.delete_document(DEMO_LIBRARY, "acme-energy-bulletin-2023")
            done.set()

        t = threading.Thread(target=go)
        t.start()
        t.join(timeout=120)  # it commits now: the build holds no lease
        assert done.is_set()

    held = _watch_passage_reads(cluster, monkeypatch, during=meanwhile)
    cluster.graph.rebuild(DEMO_LIBRARY)
    # Every document's passages were read without the lease; under it, what the change needs.
    assert held[:4] == [False] * 4
    assert held[4:] == ([True] if change == "ingest" else [True] * 3)
    monkeypatch.undo()
    built = copy.deepcopy(cluster.graph.graphs.snapshot(DEMO_LIBRARY))
    docs = {n["id"] for n in built["nodes"] if n["type"] == "document"}
    assert any("late-memo" in d for d in docs) == (change == "ingest")
    assert any("acme-energy-bulletin-2023" in d for d in docs) == (change == "ingest")
    assert built == _full_build_under_the_lease(cluster)


def test_readers_arriving_together_build_the_graph_once(cluster: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reads of a library without a graph at the same moment: one builds it, the other waits
    for it and reads the built graph (GraphService._ensure_built's per-library lock)."""
    import ragspine.graph._service as service_mod

    _forget_graph(cluster)
    builds: list[str] = []
    gate = threading.Event()
    real = service_mod.backfill

    def counted(service: Any, library: str) -> Any:
        builds.append(library)
        gate.wait(10)  # the second reader arrives while this build runs
        return real(service, library)

    monkeypatch.setattr(service_mod, "backfill", counted)
    results: list[int] = []
    readers = [threading.Thread(target=lambda: results.append(len(cluster.graph.entities(DEMO_LIBRARY, ""))))
               for _ in range(2)]
    for t in readers:
        t.start()
    while not builds:
        threading.Event().wait(0.01)
    threading.Event().wait(0.2)
    gate.set()
    for t in readers:
        t.join(60)
    assert builds == [DEMO_LIBRARY] and len(results) == 2 and results[0] == results[1] > 0
