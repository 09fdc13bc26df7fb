"""What runs inside an OCR worker process (:mod:`ragspine.indexing.ocr_pool` starts them): its
priority, its exit with the process that started it, its engine, and the pages it reads.

Apart from the pool because it changes for other reasons: what a worker needs to run well on
its own (scheduling groups, oneDNN's cache, the heap) against how pages are handed out.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from collections.abc import Callable
from typing import Any

import pymupdf

from ragspine.ocr import OcrCache, OcrEngine, PageOcr, ocr_page
from ragspine.ocr.plan import Part

logger = logging.getLogger(__name__)

#: Builds the engine inside a worker process: ``factory(backend)``. Module-level and
#: picklable; tests pass their own to stand in for RapidOCR.
EngineFactory = Callable[[str], OcrEngine]

#: Documents a worker keeps open (and their OCR caches): the ones being read right now.
_OPEN_DOCS = 4

_ENGINE: OcrEngine | None = None
_DOCS: dict[str, tuple[pymupdf.Document, OcrCache]] = {}


#: oneDNN's primitive cache in a worker (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``; oneDNN's default
#: is 1,024 primitives). OpenVINO's CPU plugin builds oneDNN primitives per input shape, and
#: recognition meets new crop widths on most pages, so the cache keeps JIT code and buffers for
#: shapes that rarely come back. One one-thread engine over 24 MMLongBench pages (same machine,
#: one after the other, twice): anonymous memory 656 MB both times with the cache off against
#: 737 and 767 MB with it, in 86-88 s against 83-95 s. An operator's own value is kept.
ONEDNN_PRIMITIVE_CACHE = "0"


def _exit_with_the_parent() -> None:
    """A daemon thread that ends this worker when the process that started it is gone.

    Written here because the executor does not: its workers wait on a queue whose write end
    every worker holds too, so a parent killed without closing the pool (SIGKILL, an OOM kill,
    or uvicorn re-raising SIGTERM past the code that closes it) left them waiting for good,
    ~0.6 GB each. The spawned child has its parent's sentinel (a pipe end that closes when the
    parent exits): waiting on it costs nothing until then."""
    parent = multiprocessing.parent_process()  # set in every spawned worker
    assert parent is not None, "the OCR worker initializer runs only in a pool's worker"

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)  # no cleanup to do: the engine's state dies with the process

    threading.Thread(target=watch, name="ragspine-ocr-parent-watch", daemon=True).start()


#: Where Linux groups CPU time by session (autogroup scheduling), this file holds the group's
#: own nice value; it is absent where the kernel has no autogroups.
AUTOGROUP = "/proc/self/autogroup"


def _lower_priority(nice: int) -> None:
    """Run this worker ``nice`` steps below normal priority, against every process on the
    machine.

    ``os.nice`` alone is not that. With autogroup scheduling (``CONFIG_SCHED_AUTOGROUP``, on by
    default in the kernels of most distributions, for processes outside a CPU cgroup) the
    scheduler first shares a core between sessions, each weighted as one nice-0 process, and
    only then between the processes of a session by their nice values. Workers left in the
    server's session were niced against the server alone: a search client in another session
    (another program, a shell, ``bench/serve_load.py``) shared the cores with the server *and*
    its OCR as equals, and searches got slow while OCR ran (AMD EPYC, 2 cores: OCR took a whole
    core, search p99 2.0-3.1x that of the same searches alone). So the worker starts its own
    session (its own autogroup) and gives the group its nice value: the OCR workers then yield
    to every other session, and searches during OCR keep their latency (p99 1.14x and 1.24x;
    docs/measured.md, "OCR workers niced against the whole machine"). Where there are no autogroups
    (a container's CPU cgroup, a kernel without them) the file is absent, and nice already
    counts machine-wide."""
    try:
        os.nice(nice)
    except OSError:  # not permitted here: run at the parent's priority
        return
    if not os.path.exists(AUTOGROUP):
        return
    try:
        os.setsid()  # not a group leader (a spawned child): cannot fail for that reason
        with open(AUTOGROUP, "w", encoding="ascii") as fh:
            fh.write(str(nice))
    except OSError as exc:  # /proc read-only, or a sandbox that forbids it: nice as before
        logger.debug("OCR worker keeps its parent's scheduling group: %s", exc)


def _init_worker(nice: int, factory: EngineFactory, backend: str) -> None:
    global _ENGINE
    _exit_with_the_parent()
    # Before the engine loads OpenVINO: oneDNN reads it when it first builds a primitive.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_PRIMITIVE_CACHE)
    if nice:
        _lower_priority(nice)
    _ENGINE = factory(backend)


def _ready() -> bool:
    """The probe a new pool answers before pages are sent to it (see :class:`PoolUnavailable`)."""
    return _ENGINE is not None


def _read_page(path: str, number: int, opts: Any, part: Part = "all") -> PageOcr:
    """OCR of the 1-based page ``number`` of the PDF at ``path`` with the options ``opts``
    (:class:`ragspine.indexing.ocr.OcrOptions`), the regions of ``part`` only."""
    assert _ENGINE is not None, "OCR worker used before its initializer ran"
    got = _DOCS.get(path)
    if got is None:
        while len(_DOCS) >= _OPEN_DOCS:
            _DOCS.pop(next(iter(_DOCS)))[0].close()
        got = _DOCS[path] = (pymupdf.open(path, filetype="pdf"), OcrCache())
    doc, cache = got
    try:
        return ocr_page(doc.load_page(number - 1), _ENGINE, mode=opts.mode, dpi=opts.dpi,
                        min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction,
                        band=opts.band, cache=cache, part=part)
    finally:
        _give_back_freed_memory()


def _give_back_freed_memory() -> None:
    """Hand the heap's free pages back to the OS after a page (glibc's ``malloc_trim``): the
    renders and activations of a page are hundreds of MB, freed, but kept by the allocator
    and counted in the worker's resident memory. Nothing to do elsewhere (musl, macOS)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()
