"""OCR on every core: a pool of worker processes, each with a one-thread engine.

Why processes with one thread each, not one engine on every core: recognition is a chain of
small convolutions over one line batch at a time, and a second thread inside one session buys
far less than a second session (tesseract #3109 found the same for Tesseract). Measured with
``bench/ocr.py --workers 1 2``: see the README's OCR section for the figures.

One :class:`OcrProcesses` per indexer (so per server, CLI run or eval), shared by every
document being ingested at once: pages of one document and of many go to the same workers,
one page a task, so a long scan and a short deck are read side by side. Workers are spawned,
not forked (the ingesting process may hold CUDA state and threads), and started on first use:
a server that never meets a scanned page never starts them.

Workers run at a lower priority (``RAGSPINE_OCR_WORKER_NICE``): on an idle machine they take
every core, and a search arriving meanwhile gets the CPU first. Each worker leaves its parent's
session so that its nice value counts against every process on the machine, not only against
the server it works for (see :func:`ragspine.indexing.ocr_worker._lower_priority`).

A worker that dies (killed, out of memory, a crash in a native library) breaks the pool. The
pool is replaced and the pages that had not come back are read once more; if the new pool
breaks too, :class:`~ragspine.ocr.OcrError` names the pages, and the document's OCR fails
without touching what is already indexed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import multiprocessing
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from ragspine.indexing.ocr_worker import EngineFactory, _init_worker, _read_page, _ready
from ragspine.ocr import OcrEngine, OcrError, PageOcr, RapidOcrEngine
from ragspine.ocr.plan import Part

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

#: How many times the pages of one call are handed to a fresh pool after the old one broke.
RETRIES = 1
#: Pages a pool reads per worker before new pages go to a fresh pool (the old one finishes what
#: it holds, then its workers exit). OpenVINO keeps buffers for every input shape it meets, so
#: a worker's memory grows with the variety of what it reads: two workers reached ~2.9 GB each
#: over MMLongBench's 48 PDFs. A fresh worker starts in ~2 s at ~0.4 GB. (Not the executor's
#: own max_tasks_per_child: under CPython 3.11 it hung replacing a worker mid-run.)
PAGES_PER_WORKER = 48

#: Priorities of :meth:`OcrProcesses.read`: a caller waiting (the stamp-sized images of a first
#: phase, a one-phase ingest) before the second phase running in the background.
URGENT = 0
BACKGROUND = 1
#: How often a call waiting for a free worker collects its own pages that came back (seconds).
_POLL_S = 0.05

def rapid_one_thread(backend: str) -> OcrEngine:
    """The product's engine in a worker: RapidOCR with one inference thread."""
    return RapidOcrEngine(threads=1, backend=backend)  # type: ignore[arg-type]


def auto_workers(setting: int) -> int:
    """``RAGSPINE_OCR_WORKERS``: 0 (auto) is one worker per CPU core."""
    return setting if setting > 0 else max(1, os.cpu_count() or 1)


# -- in the ingesting process -------------------------------------------------------------------


class PoolUnavailable(OcrError):
    """Worker processes cannot start here (no page was involved): most often a script that
    starts ragspine without ``if __name__ == "__main__":``, which spawned workers re-run. The
    caller reads on its own thread instead."""


class OcrProcesses:
    """The OCR worker pool of one indexer; see the module doc. Thread-safe: documents ingested
    on several threads submit to it at once."""

    def __init__(self, workers: int, *, nice: int = 10, backend: str = "auto",
                 factory: EngineFactory = rapid_one_thread, pages_per_worker: int = PAGES_PER_WORKER) -> None:
        if workers < 1:
            raise ValueError(f"an OCR pool needs at least one worker, got {workers}")
        if pages_per_worker < 1:
            raise ValueError(f"pages_per_worker must be at least 1, got {pages_per_worker}")
        self.workers = workers
        self.nice = nice
        self.backend = backend
        self.factory = factory
        self.pages_per_worker = pages_per_worker
        self._pool: ProcessPoolExecutor | None = None
        self._served = 0  # pages submitted to the current pool
        #: Worker processes of pools replaced by a fresh one, still finishing their page: kept
        #: for close(), as a pool forgets its processes the moment it is shut down.
        self._retired: list[Any] = []
        self._lock = threading.Lock()
        #: Pools replaced after a worker died (observable: metrics, tests).
        self.restarts = 0
        #: Pools retired after their share of pages (the memory bound).
        self.recycled = 0
        self._pending = 0  # pages submitted and not yet back, over all documents
        # One page per worker in the pool at a time, over every call: the executor's queue is
        # first come, first served, so priority lives here. A first phase's few stamp images
        # then wait for one page to finish on some worker, not behind the second phases of
        # every document uploaded before it (eval: every first phase live 3.6x later than with
        # OCR off when calls shared the queue).
        self._slots = _Slots(workers)
        #: The workers could not start (the probe failed): callers read on their own thread.
        self.unavailable = False
        self._closed = False
        #: read() calls of URGENT priority in progress (a first phase waiting for its stamp
        #: images, or any caller that waits), for :meth:`wait_urgent`.
        self._urgent = 0
        self._urgent_done = threading.Condition()

    @property
    def started(self) -> bool:
        return self._pool is not None

    @property
    def backlog(self) -> int:
        """Pages handed to the workers and not yet read."""
        return self._pending

    @property
    def urgent(self) -> int:
        """URGENT reads in progress (see :meth:`wait_urgent`)."""
        return self._urgent

    def wait_urgent(self, timeout: float) -> bool:
        """Wait until no URGENT read is in progress (True at once when none is), or ``timeout``
        seconds (False).

        For background work in this process that would otherwise take the cores from the
        workers: they run niced in a scheduling group of their own (``ocr_worker._lower_priority``), so
        anything this process computes meanwhile comes first. The dense phase encoding the
        passages of earlier uploads made every first phase of an eval wait 2.4x as long for
        its stamp images (docs/measured.md, "The dense phase in the background"); it now calls
        this before each batch."""
        with self._urgent_done:
            return self._urgent_done.wait_for(lambda: self._urgent == 0, timeout)

    def pids(self) -> list[int]:
        """Process ids of the current pool's live workers (for tests and diagnostics)."""
        return [p.pid for p in _processes(self._pool) if p.pid is not None]

    def _get(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise OcrError("the OCR worker processes were stopped (the process is shutting down); "
                               "the pages not read yet are read at the next ingest or 'ragspine ocr --resume'")
            if self.unavailable:
                raise PoolUnavailable("OCR worker processes could not start here")
            if self._pool is not None and self._served >= self.pages_per_worker * self.workers:
                old, self._pool, self._served = self._pool, None, 0
                self._retired = [p for p in self._retired if p.is_alive()] + _processes(old)
                old.shutdown(wait=False)  # it finishes the pages it holds, then its workers exit
                self.recycled += 1
            if self._pool is None:
                pool = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker, initargs=(self.nice, self.factory, self.backend))
                # A probe before any page: a pool that breaks now breaks for a reason of its own
                # (the workers cannot start), which no retry and no page can fix.
                try:
                    pool.submit(_ready).result()
                except Exception as exc:
                    pool.shutdown(wait=False, cancel_futures=True)
                    self.unavailable = True
                    logger.warning(
                        "OCR worker processes could not start (%s); OCR runs on the ingesting thread. A script "
                        "that uses ragspine needs 'if __name__ == \"__main__\":' for worker processes, or "
                        "RAGSPINE_OCR_WORKERS=1", type(exc).__name__)
                    raise PoolUnavailable("OCR worker processes could not start here") from exc
                self._pool = pool
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:  # another document's call may have replaced it already
                self._pool = None
                self._served = 0
                self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)

    def read(self, source: bytes | str, numbers: Sequence[int], opts: Any,
             progress: Progress | None = None, part: Part = "all", priority: int = URGENT) -> dict[int, PageOcr]:
        """OCR of the 1-based pages ``numbers`` of one PDF (its bytes or its path): page
        number -> what was read. ``progress(done, total)`` after each page. Pages of a lower
        ``priority`` number go to the workers first (:data:`URGENT`, :data:`BACKGROUND`)."""
        if priority == URGENT:
            with self._urgent_done:
                self._urgent += 1
        try:
            return self._read(source, numbers, opts, progress, part, priority)
        finally:
            if priority == URGENT:
                with self._urgent_done:
                    self._urgent -= 1
                    self._urgent_done.notify_all()

    def _read(self, source: bytes | str, numbers: Sequence[int], opts: Any, progress: Progress | None,
              part: Part, priority: int) -> dict[int, PageOcr]:
        out: dict[int, PageOcr] = {}
        with _spooled(source) as path:
            left = list(numbers)
            for attempt in range(RETRIES + 1):
                try:
                    self._collect(path, left, opts, part, priority, out, progress, len(numbers))
                    return out
                except _Broken as broke:
                    left = [n for n in numbers if n not in out]
                    self._replace(broke.pool)
                    if attempt < RETRIES:
                        logger.warning("an OCR worker process died; reading %d pages again on a new pool",
                                       len(left))
            raise OcrError(
                f"OCR worker processes died {RETRIES + 1} times while reading pages {left[:10]}"
                + (" ..." if len(left) > 10 else "")
                + " (out of memory, or a crash in a native library on these pages); "
                "the rest of the document is unaffected")

    def _collect(self, path: str, numbers: Sequence[int], opts: Any, part: Part, priority: int,
                 out: dict[int, PageOcr], progress: Progress | None, total: int) -> None:
        queue = list(numbers)
        futs: dict[Future[PageOcr], tuple[int, ProcessPoolExecutor]] = {}

        def collect(done: set[Future[PageOcr]]) -> None:
            for fut in done:
                n, pool = futs.pop(fut)
                try:
                    out[n] = fut.result()
                except BrokenProcessPool:  # a worker of that pool died
                    raise _Broken(pool) from None
                if progress is not None:
                    progress(len(out), total)

        try:
            while queue:
                ticket = self._slots.enter(priority)
                try:
                    # Waiting for a slot, this call's own pages keep coming back (and reporting).
                    while not self._slots.take(ticket, timeout=_POLL_S):
                        collect({f for f in futs if f.done()})
                except BaseException:
                    self._slots.leave(ticket)
                    raise
                try:
                    pool = self._get()  # a fresh pool once the current one has read its share
                    fut = pool.submit(_read_page, path, queue[0], opts, part)
                except BaseException as exc:
                    self._slots.release()
                    if isinstance(exc, BrokenProcessPool):
                        raise _Broken(pool) from None
                    raise
                with self._lock:
                    self._pending += 1
                    self._served += 1
                fut.add_done_callback(self._page_back)  # frees the slot, whoever is waiting
                futs[fut] = (queue.pop(0), pool)
                collect({f for f in futs if f.done()})
            while futs:
                done, _ = wait(set(futs), return_when=FIRST_COMPLETED)
                collect(done)
        finally:
            for fut in futs:  # what did not come back (a broken pool): never waited for again
                fut.cancel()

    def _page_back(self, fut: Future[PageOcr]) -> None:
        """A page's future is done (read, failed, cancelled or its pool broke): runs once per
        submitted page, on the pool's thread or the caller's."""
        with self._lock:
            self._pending -= 1
        self._slots.release()

    def close(self) -> None:
        """Stop every worker now. A page still being read is not waited for: whoever waits on it
        gets an :class:`~ragspine.ocr.OcrError`, and so does a later call. (Each worker runs in a
        session of its own, see ``ocr_worker._lower_priority``, so a Ctrl-C in the terminal reaches only
        the ingesting process; its stop must not wait seconds for a page nobody will use.)"""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            procs, self._retired = self._retired, []
        if pool is not None:
            procs += _processes(pool)
            pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        # Reaped here: shutdown(wait=False) drops the executor's own join, so a second
        # shutdown(wait=True) would return at once and leave zombies behind.
        for proc in procs:
            proc.join(10)


def _processes(pool: ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes (``multiprocessing.Process``), read before it is shut down:
    ``shutdown`` drops them. Read from a private attribute, as the executor offers no other way
    to stop a worker in the middle of a task."""
    return list((getattr(pool, "_processes", None) or {}).values())


class _Slots:
    """``n`` slots handed out by priority (lower first), then by arrival. A caller enters the
    line with its priority (:meth:`enter`), waits for its turn (:meth:`take`), and gives the
    slot back (:meth:`release`). Written here because the standard library's semaphores do not
    order their waiters."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._cv = threading.Condition()
        self._waiting: list[tuple[int, int]] = []  # heap of (priority, arrival)
        self._arrivals = itertools.count()

    def enter(self, priority: int) -> tuple[int, int]:
        ticket = (priority, next(self._arrivals))
        with self._cv:
            heapq.heappush(self._waiting, ticket)
        return ticket

    def take(self, ticket: tuple[int, int], timeout: float) -> bool:
        """Whether ``ticket`` got its slot within ``timeout`` seconds (it keeps its place if not)."""
        with self._cv:
            ok = self._cv.wait_for(lambda: self.free > 0 and self._waiting[0] == ticket, timeout)
            if ok:
                heapq.heappop(self._waiting)
                self.free -= 1
                self._cv.notify_all()  # the next in line may find a slot free too
            return ok

    def leave(self, ticket: tuple[int, int]) -> None:
        """``ticket`` gives up its place in line (its caller is gone)."""
        with self._cv:
            if ticket in self._waiting:
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
                self._cv.notify_all()

    def release(self) -> None:
        with self._cv:
            self.free += 1
            self._cv.notify_all()


class _Broken(Exception):
    """A worker of ``pool`` died: the pool is unusable."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        super().__init__("an OCR worker process died")
        self.pool = pool


@contextmanager
def _spooled(source: bytes | str) -> Iterator[str]:
    """A path the workers can open: ``source`` itself, or its bytes spooled once to a temp
    file (never into the data dir), removed afterwards."""
    if isinstance(source, str):
        yield source
        return
    fd, path = tempfile.mkstemp(prefix="ragspine-ocr-", suffix=".pdf")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(source)
        yield path
    finally:
        os.unlink(path)
