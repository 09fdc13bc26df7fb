"""Rendering kept pages during ingest: each page's thumbnail PNG and, with a page model, the
image the model encodes; on a helper thread, or on worker processes when the ingesting process
would otherwise wait for one render thread.

Worker processes (:func:`render_workers`) render when a GPU encoder would wait for one CPU
thread, and, on a machine with a core to spare, the thumbnails of a text-only ingest: PyMuPDF
keeps the GIL while it renders, so a helper thread cannot run beside the parsing and BM25
weighing of the ingesting thread, and a text-only ingest used one core of two
(docs/measured.md, "Text-only ingest on both cores").

Only pages the RESTRICTED policy kept are ever passed here.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from ragspine.config.machine import pid_alive, usable_cpus
from ragspine.indexing.pdf import ParsedPDF, render_page_image, render_page_png, render_pages_worker

logger = logging.getLogger(__name__)

#: Longest side of the image a page model gets: processors resize to far less (ColQwen2's
#: default budget is ~800k pixels), and a poster-sized page must not allocate gigabytes.
MODEL_IMAGE_MAX_PX = 2048

#: What one page renders to: thumbnail PNG bytes (None for plain text) and the model image
#: (a PIL RGB image, or None when no page model needs one).
Rendered = tuple[bytes | None, Any]

#: Worker processes for the thumbnails of a text-only ingest (``RAGSPINE_RENDER_WORKERS=0``), on
#: a machine of two cores or more. A thumbnail costs ~15 ms (9 to rasterise, 6 for the PNG),
#: more than parsing and weighing its page in the ingesting process, which waits for renders
#: part of each document; so two, even on two cores (MMLongBench, 2 cores: one worker 29.1 s,
#: two 23.4 s, against 36.9 s on the helper thread; docs/measured.md).
THUMBNAIL_WORKERS = 2
#: Kept pages a document needs before its thumbnails alone go to the worker processes: the first
#: use starts them (about a second), and a few thumbnails cost less on the helper thread.
POOL_MIN_PAGES = 8
#: Pages per batch when thumbnails alone render on the worker processes: small enough that the
#: ingesting thread weighs one batch while the next renders, large enough to pay the round trip.
THUMBNAIL_BATCH = 16


#: A spooled PDF's name: the prefix, the pid of the process that wrote it, a random part.
SPOOL_PREFIX = "ragspine-render-"


def sweep_spools(folder: str | None = None) -> int:
    """Remove the spooled PDFs that a process no longer running left behind (killed while it
    wrote a document: the whole PDF, RESTRICTED pages and all, would stay in the temp dir). A
    live process's spools are its own to remove. Returns how many were removed."""
    removed = 0
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*.pdf"):
        pid = path.name[len(SPOOL_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    if removed:
        logger.info("removed %d render spools of processes no longer running", removed)
    return removed



def render_workers(setting: int, *, page_model: bool, on_cuda: bool, cpus: int | None = None) -> int:
    """Worker processes that render (0: the helper thread). ``setting`` is
    ``RAGSPINE_RENDER_WORKERS``: 1 the helper thread, 2 or more that many processes, 0 (auto)
    ``min(8, cores - 1)`` for a page model on a CUDA device, the helper thread for a page model
    on a CPU (the encoder, far slower than one render thread, bounds it), and
    :data:`THUMBNAIL_WORKERS` for thumbnails alone (none on one core)."""
    if setting == 1:
        return 0
    if setting >= 2:
        return setting
    cores = usable_cpus() if cpus is None else cpus
    if page_model:
        return max(0, min(8, cores - 1)) if on_cuda else 0
    return THUMBNAIL_WORKERS if cores > 1 else 0


class RenderProcesses:
    """The worker processes of one indexer, started on first use and stopped by :meth:`close`.

    Spawned, not forked: the ingesting process may hold CUDA state and threads that a fork would
    copy badly. How many: :func:`render_workers` (a use that needs more than the pool has gets a
    larger pool). Spawned workers re-import the caller's ``__main__`` (a script without ``if
    __name__ == "__main__"`` cannot use them): a pool that breaks is given up for good, and
    rendering goes back to the helper thread.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._size = 0
        self._swept = False
        self._lock = threading.Lock()
        self.broken = False

    def size_for(self, encoder: Any, want_image: bool = True) -> int:
        """Processes for a document whose page model is ``encoder`` (None: thumbnails alone)."""
        on_cuda = getattr(getattr(encoder, "device", None), "type", None) == "cuda"
        return render_workers(self.workers, page_model=encoder is not None and want_image, on_cuda=on_cuda)

    def get(self, encoder: Any, want_image: bool = True) -> ProcessPoolExecutor | None:
        n = self.size_for(encoder, want_image)
        if n < 1 or self.broken:
            return None
        with self._lock:
            if self._pool is not None and n > self._size:
                # A use that needs more (a GPU encoder after text-only documents started the pool):
                # a larger pool; the old one finishes what it holds.
                self._pool.shutdown(wait=False)
                self._pool = None
            if self._pool is None:
                if not self._swept:
                    sweep_spools()
                    self._swept = True
                self._pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
                self._size = n
            return self._pool

    @property
    def started(self) -> bool:
        return self._pool is not None

    def mark_broken(self) -> None:
        if not self.broken:
            logger.warning("render processes failed (a script without 'if __name__ == \"__main__\"'?); "
                           "rendering on one thread")
            self.broken = True

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


class PageRenderer:
    """Renders one document's pages in batches, ahead of the encoder.

    ``submit(numbers)`` starts a batch and returns a future; ``collect(future, numbers)`` gives
    one :data:`Rendered` per page, in order. With worker processes each batch goes to the pool
    (the PDF is spooled to a temp file once, never into the data dir); otherwise to ``thread``,
    the one helper thread allowed to touch the open PDF (MuPDF documents are not thread-safe).
    Use as a context manager: the spool goes when the document is written.
    """

    def __init__(self, parsed: ParsedPDF, *, thread: Executor, procs: RenderProcesses | None, encoder: Any,
                 want_image: bool, key: str, thumb_dpi: int, thumb_max_px: int, image_dpi: int) -> None:
        self.parsed = parsed
        self.thread = thread
        self.procs = procs
        self.want_image = want_image
        # The workers keep their last documents open by this name: a name of its own per renderer,
        # or a library deleted, recreated and given another PDF under the same doc_id and version
        # would be rendered from the old one.
        self.key = f"{key}#{uuid.uuid4().hex}"
        self.thumb = (thumb_dpi, thumb_max_px)
        self.image_dpi = image_dpi
        # Thumbnails alone go to the processes only for a document long enough to pay for them.
        worth = want_image or len(parsed.pages) >= POOL_MIN_PAGES
        self.pool = (procs.get(encoder, want_image)
                     if procs is not None and worth and parsed.doc is not None and parsed.source is not None else None)
        self._spool: str | None = None
        self._src: str | None = None
        self._fallback = False  # the pool broke: the rest renders on the caller's thread
        if self.pool is not None and isinstance(parsed.source, (bytes, bytearray)):
            try:
                fd, self._spool = tempfile.mkstemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", suffix=".pdf")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(parsed.source)
            except OSError as exc:  # no room, or no writable temp dir: render on the thread
                logger.warning("could not spool a PDF for the render processes (%s); rendering on one thread", exc)
                self._drop_spool()
                self.pool = None
        if self.pool is not None:
            self._src = self._spool or str(parsed.source)

    def _drop_spool(self) -> None:
        if self._spool is not None:
            Path(self._spool).unlink(missing_ok=True)
            self._spool = None

    def batch_size(self, default: int) -> int:
        """Pages per batch: ``default``, or :data:`THUMBNAIL_BATCH` for thumbnails alone on the
        worker processes."""
        return min(default, THUMBNAIL_BATCH) if self.pool is not None and not self.want_image else default

    @property
    def ahead(self) -> int:
        """Batches to keep in flight: every worker busy, or one batch ahead on the thread."""
        return 2 * self.pool._max_workers if self.pool is not None else 1  # noqa: SLF001

    def render(self, numbers: Sequence[int]) -> list[Rendered]:
        doc = self.parsed.doc
        out: list[Rendered] = []
        for n in numbers:
            if doc is None:  # plain text has nothing to render
                out.append((None, None))
                continue
            png = render_page_png(doc, n, *self.thumb)
            img = render_page_image(doc, n, self.image_dpi, MODEL_IMAGE_MAX_PX) if self.want_image else None
            out.append((png, img))
        return out

    def submit(self, numbers: Sequence[int]) -> Future[Any]:
        if self._fallback:
            return _done()
        if self.pool is None:
            return self.thread.submit(self.render, list(numbers))
        try:
            return self.pool.submit(render_pages_worker, self.key, self._src, list(numbers), *self.thumb,
                                    self.image_dpi, MODEL_IMAGE_MAX_PX, self.want_image)
        except BrokenProcessPool:
            self._fail()
            return _done()

    def collect(self, fut: Future[Any], numbers: Sequence[int]) -> list[Rendered]:
        if self._fallback:
            return self.render(numbers)
        if self.pool is None:
            return fut.result()
        from PIL import Image

        try:
            got = fut.result()
        except BrokenProcessPool:
            self._fail()
            return self.render(numbers)
        return [(png, None if arr is None else Image.fromarray(arr, "RGB")) for png, arr in got]

    def _fail(self) -> None:
        # From here on only the caller's thread renders (in collect): the helper thread never
        # started on this document, so the PDF is never touched by two threads.
        self._fallback = True
        if self.procs is not None:
            self.procs.mark_broken()

    def __enter__(self) -> "PageRenderer":
        return self

    def __exit__(self, *exc: object) -> None:
        self._drop_spool()


def _done() -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_result(None)
    return fut
