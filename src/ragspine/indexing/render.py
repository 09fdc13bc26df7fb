"""Rendering kept pages during ingest: each page's thumbnail PNG and, with a page model, the
image the model encodes; on a helper thread, or on worker processes when a GPU encoder would
otherwise wait for one CPU thread.

Only pages the RESTRICTED policy kept are ever passed here.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ragspine.indexing.pdf import ParsedPDF, render_page_image, render_page_png, render_pages_worker

logger = logging.getLogger(__name__)

#: Longest side of the image a page model gets: processors resize to far less (ColQwen2's
#: default budget is ~800k pixels), and a poster-sized page must not allocate gigabytes.
MODEL_IMAGE_MAX_PX = 2048

#: What one page renders to: thumbnail PNG bytes (None for plain text) and the model image
#: (a PIL RGB image, or None when no page model needs one).
Rendered = tuple[bytes | None, Any]


class RenderProcesses:
    """The worker processes of one indexer, started on first use and stopped by :meth:`close`.

    Spawned, not forked: the ingesting process may hold CUDA state and threads that a fork would
    copy badly. ``workers=0`` (auto) uses them only for an encoder on a CUDA device: on a CPU the
    encoder is far slower than one render thread, and spawned workers re-import the caller's
    ``__main__`` (a script without ``if __name__ == "__main__"`` cannot use them). A pool that
    breaks is given up for good, and rendering goes back to the helper thread.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.broken = False

    def size_for(self, encoder: Any) -> int:
        n = self.workers
        if n == 0:
            on_cuda = getattr(getattr(encoder, "device", None), "type", None) == "cuda"
            n = min(8, (os.cpu_count() or 1) - 1) if on_cuda else 0
        return n

    def get(self, encoder: Any) -> ProcessPoolExecutor | None:
        n = self.size_for(encoder)
        if n < 2 or self.broken:
            return None
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
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
        self.key = key
        self.thumb = (thumb_dpi, thumb_max_px)
        self.image_dpi = image_dpi
        self.pool = procs.get(encoder) if procs is not None and want_image and parsed.source is not None else None
        self._spool: str | None = None
        self._src: str | None = None
        self._fallback = False  # the pool broke: the rest renders on the caller's thread
        if self.pool is not None:
            if isinstance(parsed.source, (bytes, bytearray)):
                fd, self._spool = tempfile.mkstemp(prefix="ragspine-render-", suffix=".pdf")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(parsed.source)
            self._src = self._spool or str(parsed.source)

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
                                    self.image_dpi, MODEL_IMAGE_MAX_PX)
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
        return [(png, Image.fromarray(arr, "RGB")) for png, arr in got]

    def _fail(self) -> None:
        # From here on only the caller's thread renders (in collect): the helper thread never
        # started on this document, so the PDF is never touched by two threads.
        self._fallback = True
        if self.procs is not None:
            self.procs.mark_broken()

    def __enter__(self) -> "PageRenderer":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._spool is not None:
            os.unlink(self._spool)
            self._spool = None


def _done() -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_result(None)
    return fut
