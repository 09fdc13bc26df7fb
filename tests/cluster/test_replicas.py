"""Two replicas over one Qdrant: two Engines (their own locks, caches, recovery state and lease
holders) sharing one ``QdrantClient(":memory:")`` (the client's in-process double of a server,
as several Ingress pods share one Qdrant cluster) and one data dir (the shared volume).

After every scenario the store is checked against what was committed, worked out from the
documents the test ingested (not from ragspine's own bookkeeping): each document is readable
at exactly its latest committed version with all its pages and passages, no point belongs to a
version that is not active (orphans, a half-written or mixed version), no entry is left staging,
and the library's BM25 statistics equal the sum over the committed documents.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from cluster.replica_kit import LIB, assert_consistent, close, committed, readable, replica, report
from ragspine.catalog.leases import LEASE_POINT
from ragspine.engine import Engine
from ragspine.errors import LeaseLostError, LibraryBusyError
from ragspine.store.base import KIND_PAGE, Where

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

def test_concurrent_ingests_of_different_documents(cluster: tuple[Engine, Engine]) -> None:
    a, b = cluster
    errors: list[BaseException] = []

    def run(engine: Engine, docs: list[tuple[str, str]]) -> None:
        try:
            for doc_id, word in docs:
                engine.ingest(LIB, report(6, word), {"doc_id": doc_id})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ta = threading.Thread(target=run, args=(a, [("a1", "alpha"), ("a2", "amber")]))
    tb = threading.Thread(target=run, args=(b, [("b1", "bravo"), ("b2", "beryl")]))
    ta.start(), tb.start()
    ta.join(), tb.join()
    assert not errors, errors
    assert_consistent(a, {"a1": 6, "a2": 6, "b1": 6, "b2": 6})
    for engine in (a, b):  # every replica reads every replica's documents
        readable(engine, "a2", "amber", 4)
        readable(engine, "b1", "bravo", 6)


def test_concurrent_ingests_of_the_same_document(cluster: tuple[Engine, Engine]) -> None:
    a, b = cluster
    results: dict[str, Any] = {}

    def run(name: str, engine: Engine, word: str, pages: int) -> None:
        results[name] = engine.ingest(LIB, report(pages, word), {"doc_id": "same"})

    ta = threading.Thread(target=run, args=("a", a, "alpha", 5))
    tb = threading.Thread(target=run, args=("b", b, "bravo", 7))
    ta.start(), tb.start()
    ta.join(), tb.join()
    assert sorted(r.version for r in results.values()) == [1, 2]  # one after the other
    last = max(results.values(), key=lambda r: r.version)
    pages = last.pages_indexed
    assert_consistent(a, {"same": pages})
    assert committed(a.store)["same"]["active_version"] == 2
    readable(b, "same", "alpha" if pages == 5 else "bravo", pages)


def test_a_replica_opening_a_library_mid_ingest_keeps_the_other_replicas_write(cluster: tuple[Engine, Engine]) -> None:
    """The issue's reproduction: A has written all 45 pages but not made them live; B serves
    its first request for the library, then ingests another PDF. Before leases B's first open
    rolled A's staged version back and A committed a document with 0 of 45 pages."""
    a, b = cluster
    b_done = threading.Event()
    b_errors: list[BaseException] = []

    def b_ingests() -> None:
        try:
            b.ingest(LIB, report(3, "bravo"), {"doc_id": "b-doc"})
        except BaseException as e:  # noqa: BLE001
            b_errors.append(e)
        finally:
            b_done.set()

    def at_step(step: str) -> None:
        if step != "written":
            return
        a.indexer.step_hook = None
        out = b.search({"query": "alpha revenue", "libraries": [LIB], "mode": "bm25"})  # B's first request
        assert out.hits == []  # A's pages are staged, not live: not visible yet
        threading.Thread(target=b_ingests).start()
        assert not b_done.wait(1.0), "B wrote while A held the library's lease"

    a.indexer.step_hook = at_step
    res = a.ingest(LIB, report(45, "alpha"), {"doc_id": "a-doc"})
    assert res.pages_indexed == 45
    assert b_done.wait(30) and not b_errors, b_errors
    assert_consistent(a, {"a-doc": 45, "b-doc": 3})
    readable(b, "a-doc", "alpha", 45)
    readable(a, "b-doc", "bravo", 3)


def test_a_dead_writer_is_rolled_back_by_the_next_owner_only(data_dir: Path) -> None:
    """A dies after writing its staged pages (no renewals, no release). B's write waits until
    A's lease runs out, takes it over, and rolls A's leftovers back first. When A wakes up it
    can neither write nor commit nor clean up over B's work."""
    client = QdrantClient(":memory:")
    a = replica(client, data_dir, writer_lease_seconds=1.0)
    b = replica(client, data_dir, writer_lease_seconds=1.0)
    a.create_library(LIB)
    try:
        b.ingest(LIB, report(2, "bravo"), {"doc_id": "keep"})
        wake, paused = threading.Event(), threading.Event()
        a_result: list[BaseException | Any] = []

        def at_step(step: str) -> None:
            if step == "written":
                a.leases.frozen = True  # the process is gone: nothing renews or releases
                paused.set()
                wake.wait(30)

        def a_ingests() -> None:
            try:
                a_result.append(a.ingest(LIB, report(8, "alpha"), {"doc_id": "dead"}))
            except BaseException as e:  # noqa: BLE001
                a_result.append(e)

        a.indexer.step_hook = at_step
        ta = threading.Thread(target=a_ingests)
        ta.start()
        assert paused.wait(30)
        staged = [p for p in a.store.scroll(LIB, Where(doc_id="dead")) if p.payload.get("kind") == KIND_PAGE]
        assert len(staged) == 8  # A's pages are in the store, staged
        t0 = time.monotonic()
        b.ingest(LIB, report(3, "bravo"), {"doc_id": "keep"})  # a replace, after A's lease ran out
        assert time.monotonic() - t0 >= 0.5  # B waited for the lease
        lease = b.store.retrieve(LIB, [LEASE_POINT])[0].payload
        assert lease["released"] is True and lease["epoch"] >= 3
        assert_consistent(b, {"keep": 3})  # A's staged version and its entry are gone
        wake.set()
        ta.join(30)
        assert len(a_result) == 1 and isinstance(a_result[0], LeaseLostError), a_result
        assert_consistent(b, {"keep": 3})  # A's late steps changed nothing
        readable(a, "keep", "bravo", 3)
        # the rolled-back version's number is never handed out again (A might land a late batch)
        assert committed(b.store)["dead"].get("max_version") == 1
        assert b.ingest(LIB, report(2, "delta"), {"doc_id": "dead"}).version == 2
        assert_consistent(b, {"keep": 3, "dead": 2})
    finally:
        close(a, b, client=client)


def test_a_writer_waits_for_a_live_lease_then_answers_busy(data_dir: Path) -> None:
    client = QdrantClient(":memory:")
    a = replica(client, data_dir, writer_lease_seconds=5)
    b = replica(client, data_dir, writer_lease_seconds=5, writer_lease_wait_seconds=0.3)
    a.create_library(LIB)
    try:
        held = threading.Event()
        done = threading.Event()

        def hold() -> None:
            with a.libraries.lock(LIB):
                held.set()
                done.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(5)
        with pytest.raises(LibraryBusyError, match=r"library 'reports' is being written by replica"):
            b.ingest(LIB, report(1, "bravo"), {"doc_id": "x"})
        done.set()
        t.join()
        assert b.ingest(LIB, report(1, "bravo"), {"doc_id": "x"}).status == "indexed"
        assert_consistent(a, {"x": 1})
    finally:
        close(a, b, client=client)


def test_a_replica_rereads_the_manifest_only_when_another_changed_it(cluster: tuple[Engine, Engine]) -> None:
    """Each check after ``active_ttl`` reads one point (the manifest clock); the entries are
    scrolled again only after a manifest write, by any replica."""
    a, b = cluster
    a.ingest(LIB, report(2, "alpha"), {"doc_id": "one"})
    b.libraries.active_ttl = 0.0  # check on every call (the server default is once a second)
    first = b.libraries.active_versions(LIB)
    assert first == {"one": 1}
    scrolls = b.libraries.manifest_scrolls
    for _ in range(20):
        assert b.libraries.active_versions(LIB) is first  # unchanged: the same object
    assert b.libraries.manifest_scrolls == scrolls
    a.ingest(LIB, report(3, "amber"), {"doc_id": "two"})
    assert b.libraries.active_versions(LIB) == {"one": 1, "two": 1}
    assert b.libraries.manifest_scrolls == scrolls + 1
    a.delete_document(LIB, "one")  # a delete moves the clock too
    assert b.libraries.active_versions(LIB) == {"two": 1}
    assert b.libraries.manifest_scrolls == scrolls + 2


def test_a_library_created_again_is_not_mistaken_for_its_cached_predecessor(cluster: tuple[Engine, Engine]) -> None:
    """Dropped and created again by B with as many manifest writes as before: A's cached
    manifest (same count) must not be served (the clock has a new epoch)."""
    a, b = cluster
    b.ingest(LIB, report(2, "alpha"), {"doc_id": "old"})
    a.libraries.active_ttl = 0.0
    assert a.libraries.active_versions(LIB) == {"old": 1}
    b.delete_library(LIB)
    b.create_library(LIB)
    b.ingest(LIB, report(2, "bravo"), {"doc_id": "new"})
    assert a.libraries.active_versions(LIB) == {"new": 1}


@pytest.mark.parametrize("pause_at", ["committed", "written"])
def test_a_writer_past_its_lease_writes_nothing_over_the_next_holder(data_dir: Path, pause_at: str) -> None:
    """A pauses past its lease (its renewals stop, as in a network partition) right after its
    commit, or after writing its pages and then fails with an ordinary error. B takes the lease
    over and commits version 3. Whatever A does when it wakes (retire, rewrite the entry, count
    statistics, clean up after its error), B's version stays whole and readable."""
    client = QdrantClient(":memory:")
    a = replica(client, data_dir, writer_lease_seconds=1.0)
    b = replica(client, data_dir, writer_lease_seconds=1.0)
    a.create_library(LIB)
    try:
        b.ingest(LIB, report(2, "bravo"), {"doc_id": "same"})  # version 1
        wake, paused = threading.Event(), threading.Event()

        def at_step(step: str) -> None:
            if step == pause_at:
                a.leases.frozen = True
                paused.set()
                wake.wait(30)
                if pause_at == "written":
                    raise RuntimeError("Qdrant timed out")  # an ordinary error, not a lost lease

        a.indexer.step_hook = at_step
        out: list[Any] = []

        def a_ingests() -> None:
            try:
                out.append(a.ingest(LIB, report(4, "alpha"), {"doc_id": "same"}))
            except BaseException as e:  # noqa: BLE001
                out.append(e)

        t = threading.Thread(target=a_ingests)
        t.start()
        assert paused.wait(30)
        assert b.ingest(LIB, report(3, "charlie"), {"doc_id": "same"}).version == 3
        wake.set()
        t.join(30)
        assert len(out) == 1
        entry = committed(b.store)["same"]
        assert entry["active_version"] == 3 and entry["max_version"] == 3, entry
        assert_consistent(b, {"same": 3})
        readable(b, "same", "charlie", 3)
    finally:
        close(a, b, client=client)


def test_a_failed_write_whose_cleanup_failed_is_rolled_back_by_the_next_writer(cluster: tuple[Engine, Engine]) -> None:
    """A's write fails after staging its pages and its own cleanup fails too: it releases the
    lease dirty, so B's next write takes it over and rolls A's leftovers back."""
    a, b = cluster

    def fail(step: str) -> None:
        if step == "written":
            raise RuntimeError("disk full")

    a.indexer.step_hook = fail
    a.indexer.versions.abort = lambda *args: None  # type: ignore[method-assign]  # cleanup fails
    with pytest.raises(RuntimeError, match="disk full"):
        a.ingest(LIB, report(5, "alpha"), {"doc_id": "failed"})
    lease = a.store.retrieve(LIB, [LEASE_POINT])[0].payload
    assert lease["released"] is True and lease["dirty"] is True
    assert len([p for p in a.store.scroll(LIB, Where(doc_id="failed")) if p.payload.get("kind") == KIND_PAGE]) == 5
    b.ingest(LIB, report(2, "bravo"), {"doc_id": "ok"})
    assert_consistent(b, {"ok": 2})  # A's staged pages are gone
    assert b.store.retrieve(LIB, [LEASE_POINT])[0].payload["dirty"] is False
