"""Helpers of the OCR-claim tests (test_ocr_claims, test_ocr_claims_api): two replicas with OCR
on, a stand-in OCR engine the test drives, one Qdrant double safe to call from several threads,
and the test document.

The document: page 1 born-digital text, page 2 a scan (no text layer), so phase 1 commits page 1
with ``ocr: pending`` and phase 2 reads page 2. :class:`ScriptedOcr` answers one line holding
:data:`WORD` for every image (or blocks, or fails, as a test says): after phase 2 the scan page,
and only it, must be found by a search for that word (page 2, ``text_source: ocr``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
import pytest
from qdrant_client import QdrantClient

import scans
from cluster.replica_kit import LIB
from ragspine.catalog.claims import claim_point
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.indexing import ocr as stage
from ragspine.ocr import OcrError, OcrLine
from ragspine.store.server import ServerStore

#: The only text the stand-in OCR engine reads (in no born-digital page of these tests).
WORD = "quokka"
#: Seconds a claim (and a writer lease) lasts unless renewed (every third of it).
TTL = 1.5
DOC = "scan"
WAIT = 60.0  # an upper bound on waits, never an expectation


class ScriptedOcr:
    """A stand-in OCR engine: ``hold_first`` makes its first call wait (a phase 2 in flight)
    until ``release`` is set; ``fail`` makes every call raise."""

    backend = "onnxruntime"
    name = "test:scripted"

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.hold_first = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def recognize(self, image: np.ndarray) -> list[OcrLine]:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        self.entered.set()
        if self.fail:
            raise OcrError("this scan breaks the OCR engine every time")
        if first and self.hold_first:
            self.release.wait(WAIT)
        h, w = image.shape[:2]
        return [OcrLine(text=f"{WORD} harbour", box=(1.0, 1.0, w - 1.0, min(h - 1.0, 40.0)), score=0.99)]


class Serialised:
    """The client's in-process double is not thread-safe, and here replicas' OCR threads,
    heartbeats and the test call it at once: each call goes through one lock (a server applies
    each call whole, which is all ragspine relies on)."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            with self._lock:
                return attr(*args, **kw)
        return call


def ocr_replica(client: Any, data_dir: Path, **kw: Any) -> Engine:
    """A replica with OCR on the calling thread (one worker: the stand-in engine) and leases on
    (a Qdrant URL), its claims and leases lasting :data:`TTL`."""
    s = Settings(data_dir=data_dir, qdrant_url=":memory:", reranker="none", ocr="auto", ocr_workers=1,
                 writer_lease_seconds=TTL, **kw)
    return Engine(s, store=ServerStore(client))


def close_replicas(*engines: Engine) -> None:
    """Close the replicas, not the client they share."""
    for e in engines:
        e.close(drain=0, keep_store=True)


@pytest.fixture
def ocr(monkeypatch: pytest.MonkeyPatch) -> ScriptedOcr:
    fake = ScriptedOcr()
    monkeypatch.setattr(stage, "_engine", lambda backend="auto", threads=None, device="cpu": fake)
    return fake


@pytest.fixture
def shared() -> Iterator[Serialised]:
    client = Serialised(QdrantClient(":memory:"))
    try:
        yield client
    finally:
        client.close()


@functools.cache
def report(edition: str = "this year") -> bytes:
    """The test document (the same bytes for the same ``edition``: PyMuPDF's are not stable)."""
    doc = pymupdf.open()
    doc.new_page(width=595, height=842).insert_textbox(
        pymupdf.Rect(72, 120, 523, 200), f"Harbour traffic grew strongly across every terminal {edition}.",
        fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([scans.ScanPage([scans.Line("Container volumes", y=240)])])))
    return doc.tobytes()


def phase_one(engine: Engine) -> None:
    res = engine.ingest(LIB, report(), {"doc_id": DOC}, defer_ocr=True)
    assert (res.version, res.ocr, res.ocr_pending_pages) == (1, "pending", [2])


def found(engine: Engine) -> list[tuple[str, int, str]]:
    engine.libraries.invalidate(LIB)
    hits = engine.search({"query": WORD, "libraries": [LIB], "mode": "bm25"}).hits
    return [(h.doc_id, h.page, h.text_source) for h in hits]


def stored_claim(engine: Engine, doc_id: str = DOC) -> dict[str, Any]:
    recs = engine.store.retrieve(LIB, [claim_point(doc_id)])
    assert recs, "no OCR claim point"
    return recs[0].payload


def until(what: Callable[[], Any], timeout: float = WAIT) -> Any:
    """``what()`` once it is truthy (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("the condition never held")


def settled(fut: Future[Any]) -> BaseException | None:
    """Wait for ``fut``; the exception it ended with, if any."""
    try:
        fut.result(timeout=WAIT)
    except BaseException as e:  # noqa: BLE001 - returned for the test to check
        return e
    return None


def in_flight(a: Engine, ocr: ScriptedOcr) -> Future[Any]:
    """Replica ``a``'s phase 2 of the document, stopped inside its OCR (``a`` holds the claim)."""
    phase_one(a)
    ocr.hold_first = True
    fut = a.finish_ocr_later(LIB, DOC)
    assert ocr.entered.wait(WAIT)
    return fut
