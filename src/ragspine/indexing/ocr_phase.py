"""Two-phase ingest: a document is searchable before its OCR ends.

Phase 1 (:meth:`Indexer.ingest` with ``defer_ocr=True``) commits a version with the pages that
are complete without OCR: pages with no region to read, and pages whose only regions are
stamp-sized images in the marker bands, which phase 1 reads first (they are small). The
policy runs on them as always. Pages with *content* to read (a page without a text layer, a
large raster image) are **held**: nothing of them is embedded, thumbnailed, counted in BM25
statistics or searchable until phase 2 has read them, because a RESTRICTED stamp may be
anywhere in those pixels (the policy's stamp rule reads every OCR line of a page), and a stamp
must be found before any part of its page goes live.

Phase 2 (:meth:`Indexer.finish_ocr`) ingests the same bytes again with every region read: a
new version, committed with the same atomic swap as a re-ingest. Until it commits, the
document's entry says ``ocr: pending``; after it, ``done``; if it fails or the process dies,
``failed`` (the phase-1 version stays live), and the next ingest of the same bytes or
``ragspine ocr --resume`` finishes it. A document whose OCR is pending or failed is never
``unchanged``.

Between the phases the PDF's bytes and its metadata wait in :class:`PendingSources`, under the
data dir (``ocr-pending/<library>/``, owner-only files named by content key, never by a
document's name). They are the upload as received (the same class of file as an upload
spool), removed when phase 2 commits, when the document or library is deleted, or when a newer
version supersedes them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ragspine.errors import DocumentError, OcrClaimLostError, ServerStoppingError
from ragspine.indexing.results import IngestResult
from ragspine.indexing.states import OcrState

if TYPE_CHECKING:
    from ragspine.catalog import Libraries

logger = logging.getLogger(__name__)

#: States in which phase 2 is still owed: such a document is never "unchanged".
OPEN_STATES = ("pending", "failed")


class Ticket(Protocol):
    """What a phase 2 runs under in cluster mode: this replica's claim on the document's OCR
    (:mod:`ragspine.indexing.ocr_sweep`)."""

    def lost(self) -> bool:
        """The claim ran out or was taken over: stop."""
        ...

    def release(self, *, refund: bool) -> None:
        """The run ended (``refund``: it never ran, or a server stop ended it)."""
        ...


#: ``gate(library, doc_id, force)``: the ticket to run phase 2 under, or None: skip it (another
#: replica is on it, or, unless ``force``, it was tried too often already).
Gate = Callable[[str, str, bool], Ticket | None]


class Superseded(Exception):
    """Phase 2 found a newer version of its document committed since phase 1: nothing to do."""


class PendingSources:
    """The PDFs and metadata that wait for phase 2 (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _paths(self, library: str, key: str) -> tuple[Path, Path]:
        name = hashlib.sha256(key.encode()).hexdigest()[:40]  # the key is already a digest; bounded
        folder = self.root / library
        return folder / f"{name}.pdf", folder / f"{name}.json"

    def put(self, library: str, key: str, data: bytes, meta: dict[str, Any], filename: str | None) -> None:
        pdf, side = self._paths(library, key)
        pdf.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path, body in ((pdf, data), (side, json.dumps({"meta": meta, "filename": filename}).encode())):
            tmp = path.with_suffix(path.suffix + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)

    def get(self, library: str, key: str) -> tuple[bytes, dict[str, Any], str | None] | None:
        pdf, side = self._paths(library, key)
        try:
            info = json.loads(side.read_text())
            return pdf.read_bytes(), dict(info["meta"]), info.get("filename")
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def has(self, library: str, key: str) -> bool:
        pdf, side = self._paths(library, key)
        return pdf.is_file() and side.is_file()

    def remove(self, library: str, key: str) -> None:
        for path in self._paths(library, key):
            path.unlink(missing_ok=True)

    def remove_library(self, library: str) -> None:
        shutil.rmtree(self.root / library, ignore_errors=True)


class Reingest(Protocol):
    """How phase 2 ingests a document's bytes again (:meth:`Indexer.ingest`)."""

    def __call__(self, library: str, data: bytes, meta: Any, *, filename: str | None,
                 ocr_progress: Callable[[int, int], None] | None, expect_key: str) -> Any: ...


class DeferredOcr:
    """Phase 2 and the OCR state of documents: the manifest it reads and writes, the kept PDFs,
    and the ingest that reads them again (``reingest``, held weakly: a cycle would keep the
    indexer, and its store, alive after its engine is dropped unclosed)."""

    def __init__(self, libraries: "Libraries", pending: PendingSources, reingest: Reingest) -> None:
        self.libraries = libraries
        self.pending = pending
        self._reingest = weakref.WeakMethod(reingest)  # type: ignore[arg-type]

    def _ingest(self) -> Reingest:
        fn = self._reingest()
        if fn is None:
            raise ServerStoppingError("the indexer of this OCR phase was closed")
        return fn  # type: ignore[return-value]

    def finish(self, library: str, doc_id: str, progress: Callable[[int, int], None] | None = None) -> Any:
        """Phase 2 of a document whose OCR is ``pending`` or ``failed``: the same bytes ingested
        again with every region read, as a new version. None when nothing is owed (done, or a
        newer version superseded it). A failure leaves the phase-1 version live and the entry
        ``failed``, and raises."""
        entry = self.libraries.doc_entry(library, doc_id)
        if not entry or entry.get("ocr") not in OPEN_STATES:
            return None
        key = str(entry.get("content_key"))
        got = self.pending.get(library, key)
        if got is None:
            self._state(library, doc_id, key, "failed")
            raise DocumentError(
                f"the PDF of document '{doc_id}' kept for its OCR is gone from the data dir; ingest it again "
                "to finish its OCR")
        data, meta, filename = got
        self._state(library, doc_id, key, "pending")
        try:
            res = self._ingest()(library, data, meta, filename=filename, ocr_progress=progress, expect_key=key)
        except Superseded:
            self.pending.remove(library, key)
            return None
        except OcrClaimLostError:
            raise  # the claim's new holder runs it now: its state is that run's to say
        except BaseException:
            self._state(library, doc_id, key, "failed")
            raise
        return res

    def owed(self, library: str) -> list[str]:
        """Documents of ``library`` whose OCR is pending or failed (live or not yet)."""
        return [e["doc_id"] for e in self.owed_entries(library)]

    def owed_entries(self, library: str) -> list[dict[str, Any]]:
        return [e for e in self.libraries.doc_entries(library) if e.get("ocr") in OPEN_STATES]

    def owe_whole(self, library: str, doc_id: str, key: str, data: bytes, meta: Any, filename: str | None,
                  pages: list[int], t0: float) -> Any:
        """Every page of a document needs OCR: keep its bytes and record the owed OCR in its
        entry (no version is written; an earlier version of the document stays live until
        phase 2 commits), and answer ``ocr_pending`` at once."""
        self.pending.put(library, key, data, meta.model_dump(mode="json"), filename)
        with self.libraries.writing(library), self.libraries.doc_lock(library, doc_id), \
                self.libraries.lock(library):
            prev = self.libraries.doc_entry(library, doc_id)
            self.libraries.check_lease(library)
            self.libraries.put_doc_entry(library, {
                **(prev or {"doc_id": doc_id}), "content_key": key, "ocr": "pending",
                "ocr_pending_pages": list(pages), "filename": filename,
            })
        return IngestResult(library, doc_id, "ocr_pending", (prev or {}).get("active_version"), len(pages),
                            seconds=time.perf_counter() - t0, ocr="pending", ocr_pending_pages=list(pages))

    def interrupted(self, library: str) -> int:
        """Mark ``pending`` OCR of a library ``failed``: called once per process before its first
        use, when no phase 2 of this process can be running; how many were marked."""
        n = 0
        for e in self.libraries.doc_entries(library):
            if e.get("ocr") == "pending":
                n += self._state(library, e["doc_id"], str(e.get("content_key")), "failed")
        return n

    def _state(self, library: str, doc_id: str, key: str, state: OcrState) -> bool:
        """Set the entry's OCR state (pending or failed) if it is still the version with content
        ``key`` and its OCR is still owed: a late run (a replica whose claim ran out) never marks
        an OCR that another run finished meanwhile ``failed``."""
        with self.libraries.lock(library):
            e = self.libraries.doc_entry(library, doc_id)
            if not e or e.get("content_key") != key or e.get("ocr") == state or e.get("ocr") not in OPEN_STATES:
                return False
            return self.libraries.update_doc_entry(library, {**e, "ocr": state}, {"content_key": key})


class OcrQueue:
    """Phase 2 of the documents whose OCR was deferred, run in the background on a few threads
    (their OCR goes to the shared worker pool, so a few documents at once keep every worker
    busy). ``run(library, doc_id, progress)`` is :meth:`Indexer.finish_ocr`.

    ``gate`` (cluster mode): each document is queued only under a ticket, this replica's claim on
    its OCR (:mod:`ragspine.indexing.ocr_sweep`), taken when it is queued (so a document queued
    behind others is not taken by another replica meanwhile), renewed while it waits and runs,
    released when it ends. A document whose claim another replica holds is not queued: its
    future is already done, with None."""

    def __init__(self, run: Callable[..., Any], threads: int, gate: Gate | None = None) -> None:
        self._run = run
        self._gate = gate
        self.threads = max(1, threads)
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="ragspine-ocr")
        self._submitting = threading.Lock()  # one submission at a time: a document is claimed once
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, str], Future[Any]] = {}
        #: Set when a stop's drain time is over: a running phase 2 stops at its next page, before
        #: its version is live (its document reads ``failed``; the next start finishes it).
        self.stopping = threading.Event()

    def _guarded(self, library: str, doc_id: str, progress: Callable[[int, int], None] | None,
                 ticket: Ticket | None = None) -> Any:
        def checked(done: int, total: int) -> None:
            if progress is not None:
                progress(done, total)
            if self.stopping.is_set():
                raise ServerStoppingError(
                    f"the server is stopping: the OCR of document '{doc_id}' stopped before its new version went "
                    "live; its first version stays, and the next start (or 'ragspine ocr --resume') finishes it")
            if ticket is not None and ticket.lost():
                raise OcrClaimLostError(
                    f"this replica's claim on the OCR of document '{doc_id}' ran out or was taken over; the "
                    "replica that holds it now finishes it")

        stopped = False
        try:
            if self.stopping.is_set():
                raise ServerStoppingError(f"the server is stopping: the OCR of document '{doc_id}' did not start")
            return self._run(library, doc_id, checked)
        except ServerStoppingError:
            stopped = True
            raise
        finally:
            # Released before the future resolves: whoever sees it end may claim it again. A run
            # a server stop ended gives its attempt back (the document was not to blame).
            if ticket is not None:
                ticket.release(refund=stopped)

    def submit(self, library: str, doc_id: str, progress: Callable[[int, int], None] | None = None,
               done: Callable[[Future[Any]], None] | None = None, *, force: bool = True) -> Future[Any]:
        """Phase 2 of ``doc_id``; a document already queued is not queued twice (its future
        is returned). ``force=False`` (the sweep): not a document tried too often already."""
        key = (library, doc_id)
        with self._submitting:
            with self._lock:
                fut = self._queued.get(key)
            if fut is None or fut.done():
                fut = self._queue(key, progress, force)
        if done is not None:
            fut.add_done_callback(done)
        return fut

    def _queue(self, key: tuple[str, str], progress: Callable[[int, int], None] | None, force: bool) -> Future[Any]:
        ticket = None
        if self._gate is not None:
            ended: Future[Any] = Future()
            try:
                ticket = self._gate(key[0], key[1], force)
            except Exception as exc:  # the store does not answer, the library is gone: the run's own failure
                logger.warning("the OCR of a document could not be claimed (%s)", type(exc).__name__)
                ended.set_exception(exc)
                return ended
            if ticket is None:
                ended.set_result(None)
                return ended
        try:
            with self._lock:
                fut = self._pool.submit(self._guarded, key[0], key[1], progress, ticket)
                self._queued[key] = fut
        except BaseException:
            if ticket is not None:
                ticket.release(refund=True)
            raise
        fut.add_done_callback(lambda f, k=key: self._forget(k, f))
        if ticket is not None:
            fut.add_done_callback(lambda f, t=ticket: _dropped(t, f))
        return fut

    def _forget(self, key: tuple[str, str], fut: Future[Any]) -> None:
        with self._lock:
            if self._queued.get(key) is fut:
                del self._queued[key]
        exc = fut.exception() if not fut.cancelled() else None
        if exc is not None:
            logger.warning("OCR of a document failed (%s); its first version stays live, "
                           "'ragspine ocr --resume' retries", type(exc).__name__)

    def queued(self, library: str, doc_id: str) -> bool:
        """Whether phase 2 of the document is queued or running here."""
        with self._lock:
            fut = self._queued.get((library, doc_id))
        return fut is not None and not fut.done()

    @property
    def backlog(self) -> int:
        """Documents queued or being read."""
        with self._lock:
            return sum(1 for f in self._queued.values() if not f.done())

    def close(self, drain: float | None = None) -> None:
        """Drop what is queued; wait for what is running: to its end (``drain=None``), or for
        ``drain`` seconds, after which it stops at its next page (:attr:`stopping`)."""
        if drain is not None:
            with self._lock:
                running = [f for f in self._queued.values() if not f.done()]
            for f in running:
                f.cancel()  # the queued ones: they never start
            _, late = wait(running, timeout=max(0.0, drain))
            if late:
                logger.warning("stopping: the OCR of %d documents did not finish within the drain time; it stops "
                               "at its next page and resumes at the next start", len(late))
                self.stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


def _dropped(ticket: Ticket, fut: Future[Any]) -> None:
    """A claimed document dropped from the queue before it ran (a stop): its claim goes back,
    and its attempt with it. (A run releases its own claim as it ends.)"""
    if fut.cancelled():
        ticket.release(refund=True)
