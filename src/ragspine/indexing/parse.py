"""Reading a long PDF's pages (text layer, lines, tables) on worker processes, a range each.

PyMuPDF keeps the GIL while it extracts text, and the rest of the ingesting process's Python
work holds it too, so on a GPU node that one process bounds ingest: about 20 ms of a page's time
on these cores, 6 of it parsing, against ~300 pages/s from eight render processes
(docs/measured.md, "The ingest ceiling as users ingest"). With ``RAGSPINE_PARSE_WORKERS`` the
pages of a document of :data:`PARSE_MIN_PAGES` or more are read by that many processes, each a
contiguous range of pages, and come back as the same :class:`~ragspine.indexing.pdf.PageContent`
objects, in order. The ingesting process still opens the PDF itself: its checks, metadata, the
OCR plan and the renders use that copy.

Auto (0) starts them only on a machine of 8 cores or more: on 2 cores both are already busy with
rendering and weighing (a parse process there measured no faster; docs/measured.md). The pages
read are every page of the PDF, RESTRICTED ones too, exactly as on the ingesting thread: the
policy drops them after parsing, and nothing of them is logged or kept by the workers.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

from ragspine.config import Settings
from ragspine.config.machine import usable_cpus
from ragspine.indexing.pdf import PageContent, ParsedPDF, open_pdf, parse_pages_worker
from ragspine.indexing.render import SPOOL_PREFIX
from ragspine.spawn_pool import SpawnedPool

logger = logging.getLogger(__name__)

#: Pages a document needs before its parsing goes to the worker processes: a short one is read
#: faster on the ingesting thread than it is shipped out and back.
PARSE_MIN_PAGES = 16
#: Cores a machine needs before auto starts parse processes, and cores per process then.
AUTO_MIN_CORES = 8
CORES_PER_WORKER = 4
#: Most parse processes auto starts.
AUTO_MAX_WORKERS = 4


def parse_workers(setting: int, cpus: int | None = None) -> int:
    """Processes that parse (0: the ingesting thread). ``setting`` is ``RAGSPINE_PARSE_WORKERS``:
    1 the ingesting thread, 2 or more that many processes, 0 (auto) one per
    :data:`CORES_PER_WORKER` cores up to :data:`AUTO_MAX_WORKERS` on a machine of
    :data:`AUTO_MIN_CORES` or more, else none."""
    if setting == 1:
        return 0
    if setting >= 2:
        return setting
    cores = usable_cpus() if cpus is None else cpus
    return min(AUTO_MAX_WORKERS, cores // CORES_PER_WORKER) if cores >= AUTO_MIN_CORES else 0


def open_parsed(data: bytes, settings: Settings, parses: ParseProcesses) -> ParsedPDF:
    """:func:`~ragspine.indexing.pdf.open_pdf` with the settings' limits and table mode, the
    pages read on ``parses`` when it takes the document."""
    return open_pdf(data, max_pages=settings.max_pages, max_page_side_pt=settings.max_page_side_pt,
                    max_image_pixels=settings.max_image_pixels, tables=settings.tables, read_pages=parses.read)


def page_ranges(pages: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` 0-based page ranges, ``parts`` of them at most, sizes within one."""
    parts = max(1, min(parts, pages))
    step, extra = divmod(pages, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + step + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


class ParseProcesses(SpawnedPool):
    """The parse worker processes of one indexer, started at the first long document and
    stopped by :meth:`close`. Spawned, as the render processes are; a pool that breaks is given
    up for good and pages are read on the ingesting thread again (:meth:`read` answers None)."""

    what = "parse processes"
    fallback = "parsing on the ingesting thread"

    def wants(self, pages: int) -> bool:
        """Whether a document of ``pages`` pages is parsed here."""
        return self.workers >= 2 and not self.broken and pages >= PARSE_MIN_PAGES

    def read(self, source: bytes | str | Path, pages: int, max_side: float, tables: bool) -> list[PageContent] | None:
        """Every page of the PDF ``source`` (its bytes or a path), in order, read on the worker
        processes (a :data:`~ragspine.indexing.pdf.PagesReader`); None for a document this does
        not want (:meth:`wants`) or when the pool is broken: the caller reads them itself. A
        page's own error (corrupt, too large) is raised as the ingesting thread would raise it."""
        if not self.wants(pages):
            return None
        pool = self._get()
        if pool is None:
            return None
        try:
            with _spooled(source) as path:
                futures = [pool.submit(parse_pages_worker, path, start, stop, max_side, tables)
                           for start, stop in page_ranges(pages, self.workers)]
                try:
                    return [page for fut in futures for page in fut.result()]
                except BrokenProcessPool:
                    for fut in futures:
                        fut.cancel()
                    self._mark_broken()
                    return None
        except OSError as exc:  # no room for the spool, say: this document is read here
            logger.warning("could not hand a PDF to the parse processes (%s); reading it on the ingesting thread", exc)
            return None


@contextmanager
def _spooled(source: bytes | str | Path) -> Iterator[str]:
    """A path the workers open: ``source`` itself, or its bytes written once to a temp file
    (never into the data dir) named as the render spools are, so that one a killed process
    left behind is swept with them (:func:`~ragspine.indexing.render.sweep_spools`)."""
    if not isinstance(source, (bytes, bytearray)):
        yield str(source)
        return
    fd, path = tempfile.mkstemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", suffix=".pdf")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(source)
        yield path
    finally:
        Path(path).unlink(missing_ok=True)
