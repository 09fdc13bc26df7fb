"""Documents of one library written at once: each ingest holds its document's lock and the
library lock only for its short steps, so two documents render, encode and write their pages
at the same time; one document is still written by one writer at a time; a delete waits for
the write of its document; with writer leases (several replicas) the threads of one replica
share one lease, released clean by the last.

The overlap is shown, not assumed: document A's progress callback waits for document B's
first batch. With a library lock held for a whole document (before), B could not start until A
ended, A's wait would time out and the test fails.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from cluster.replica_kit import assert_consistent, close, replica, report
from ragspine.catalog import LIBRARY_POINT
from ragspine.catalog.leases import LEASE_POINT
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.scoring.tokenizer import tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Where

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

LIB = "reports"
WAIT = 30.0  # seconds a callback waits for the other document (reached only when serialized)


def _run(fn: Any, out: dict[str, Any], key: str) -> threading.Thread:
    def target() -> None:
        try:
            out[key] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out[key] = exc

    t = threading.Thread(target=target)
    t.start()
    return t


def _overlapping_ingests(engine: Engine, docs: dict[str, bytes]) -> dict[str, Any]:
    """Ingest two documents in two threads; the first waits inside its write for the second
    to write a batch. Returns each one's result and whether the first saw the second."""
    (a, pdf_a), (b, pdf_b) = docs.items()
    b_writing = threading.Event()
    seen: dict[str, bool] = {}

    def progress_a(done: int, total: int) -> None:  # after a's first batch (without a page model: all pages)
        if "b" not in seen:
            seen["b"] = b_writing.wait(WAIT)

    out: dict[str, Any] = {}
    ta = _run(lambda: engine.ingest(LIB, pdf_a, {"doc_id": a}, progress=progress_a), out, a)
    tb = _run(lambda: engine.ingest(LIB, pdf_b, {"doc_id": b}, progress=lambda d, t: b_writing.set()), out, b)
    ta.join(2 * WAIT)
    tb.join(2 * WAIT)
    out["overlapped"] = seen.get("b", False)
    return out


def _stats_equal_a_recount(engine: Engine) -> None:
    rec = engine.store.retrieve(LIB, [LIBRARY_POINT])[0].payload
    texts = engine.store.scroll(LIB, Where(), fields=["kind", "text"])
    for fname, kind in ((SPARSE_CHUNK, KIND_CHUNK), (SPARSE_PAGE, KIND_PAGE)):
        lengths = [len(tokenize(p.payload.get("text") or "")) for p in texts if p.payload.get("kind") == kind]
        got = rec["stats"][fname]
        assert (got["tokens"], got["count"]) == (sum(lengths), len(lengths)), fname


def test_two_documents_of_one_library_are_written_at_once(tmp_path: Path) -> None:
    eng = Engine(Settings(data_dir=tmp_path, reranker="none", ocr="off", page_batch_size=1))
    try:
        eng.create_library(LIB)
        out = _overlapping_ingests(eng, {"a": report(3, "harbour"), "b": report(4, "turbine")})
        assert out["overlapped"], "document b wrote nothing while document a was being written"
        assert out["a"].status == out["b"].status == "indexed"
        assert (out["a"].pages_indexed, out["b"].pages_indexed) == (3, 4)
        for word, doc in (("harbour", "a"), ("turbine", "b")):
            hits = eng.search({"query": word, "libraries": [LIB], "top_k": 10}).hits
            assert {h.doc_id for h in hits} == {doc}
        _stats_equal_a_recount(eng)
        entries = {e["doc_id"]: e for e in eng.libraries.doc_entries(LIB)}
        assert {d: e["active_version"] for d, e in entries.items()} == {"a": 1, "b": 1}
        assert all(e.get("staging_version") in (None, 1) and not e.get("retiring_version") for e in entries.values())
        assert eng.store.count(LIB, Where(kind=KIND_PAGE)) == 7
    finally:
        eng.close()


def test_one_document_is_written_by_one_writer_at_a_time(tmp_path: Path) -> None:
    eng = Engine(Settings(data_dir=tmp_path, reranker="none", ocr="off"))
    try:
        eng.create_library(LIB)
        pdf = report(3, "harbour")
        out: dict[str, Any] = {}
        threads = [_run(lambda: eng.ingest(LIB, pdf, {"doc_id": "d"}), out, k) for k in ("x", "y")]
        for t in threads:
            t.join(60)
        # The second waited for the first and found its content committed.
        assert sorted(r.status for r in out.values()) == ["indexed", "unchanged"]
        assert {r.version for r in out.values()} == {1}
        assert eng.store.count(LIB, Where(kind=KIND_PAGE)) == 3
    finally:
        eng.close()


def test_a_delete_waits_for_the_write_of_its_document(tmp_path: Path) -> None:
    eng = Engine(Settings(data_dir=tmp_path, reranker="none", ocr="off", page_batch_size=1))
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, report(2, "harbour"), {"doc_id": "d"})
        writing, release = threading.Event(), threading.Event()

        def progress(done: int, total: int) -> None:
            writing.set()
            release.wait(WAIT)

        out: dict[str, Any] = {}
        tw = _run(lambda: eng.ingest(LIB, report(3, "turbine"), {"doc_id": "d"}, progress=progress), out, "w")
        assert writing.wait(WAIT)
        td = _run(lambda: eng.delete_document(LIB, "d"), out, "del")
        td.join(0.5)
        assert td.is_alive()  # waiting for the write of version 2
        release.set()
        tw.join(60)
        td.join(60)
        assert out["w"].version == 2 and out["del"] is None
        assert eng.store.count(LIB, Where(doc_id="d")) == 0  # no page of either version is left
        assert not (eng.libraries.doc_entry(LIB, "d") or {}).get("active_version")
    finally:
        eng.close()


def test_threads_of_one_replica_share_its_writer_lease(tmp_path: Path) -> None:
    client = QdrantClient(":memory:")
    eng = replica(client, tmp_path, page_batch_size=1)
    try:
        eng.create_library(LIB)
        out = _overlapping_ingests(eng, {"a": report(3, "harbour"), "b": report(4, "turbine")})
        assert out["overlapped"]
        assert out["a"].status == out["b"].status == "indexed"
        assert_consistent(eng, {"a": 3, "b": 4})
        lease = eng.store.retrieve(LIB, [LEASE_POINT])[0].payload
        assert lease["released"] is True and lease["dirty"] is False  # released once, by the last
        assert not eng.libraries._held and not eng.libraries._lease_users
    finally:
        close(eng, client=client)


def test_a_failed_document_releases_the_shared_lease_dirty(tmp_path: Path) -> None:
    client = QdrantClient(":memory:")
    eng = replica(client, tmp_path, page_batch_size=1)
    try:
        eng.create_library(LIB)
        started = threading.Event()

        def fail(done: int, total: int) -> None:
            started.set()
            raise RuntimeError("encoder lost")

        def slow(done: int, total: int) -> None:
            assert started.wait(WAIT)

        out: dict[str, Any] = {}
        ta = _run(lambda: eng.ingest(LIB, report(2, "harbour"), {"doc_id": "a"}, progress=fail), out, "a")
        tb = _run(lambda: eng.ingest(LIB, report(2, "turbine"), {"doc_id": "b"}, progress=slow), out, "b")
        ta.join(60)
        tb.join(60)
        assert isinstance(out["a"], RuntimeError) and out["b"].status == "indexed"
        lease = eng.store.retrieve(LIB, [LEASE_POINT])[0].payload
        assert lease["released"] is True and lease["dirty"] is True  # the next holder rolls back
        assert_consistent(eng, {"b": 2})
    finally:
        close(eng, client=client)
