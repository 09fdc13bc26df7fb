"""The page encoder as a stage of its own in an ingest, between the renders and the points.

Before this stage the ingesting thread called the page encoder itself, batch after batch: while
the device encoded a batch the thread waited, and while the thread built that batch's points
(BM25 weights, the MUVERA first stage, the dense passage encoder, thumbnails) the device sat
idle. A GPU that encodes 80 ColPali pages a second and a thread that spends ~20 ms a page on its
own work gave 0.6x the model's rate at best, before any preprocessing.

Now a document's page batches go to an encode thread in the order they were rendered; while
the encoder still works on batch k, the ingesting thread hands it batch k+1 before it builds the
points of batch k (:data:`ENCODE_AHEAD` batches in flight, a bounded queue), so the device and
the thread work at once. A local model (one that splits preparing from encoding,
:meth:`BasePageEncoder.prepare_pages <ragspine.models.base.BasePageEncoder.prepare_pages>`: the
processor's resize and normalise) has its batches prepared on the prep threads and encoded on
the one device thread (:class:`EncodeThreads`), which feeds the device and nothing else. Other
encoders (a Ray Serve proxy, a test double) run whole on a thread of the document's own.

With the page model on a GPU and a MUVERA first stage, the encode thread also encodes each
batch's MUVERA vectors on the device (:func:`device_first_stage`), taking them off the
ingesting thread, whose own work per page bounds an ingest on a GPU node.

The encode thread's own seconds are the ``encode`` stage; the ingesting thread's wait for it is
``encode_wait`` (:mod:`ragspine.indexing.stages`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ragspine.catalog import PAGE_FDE
from ragspine.errors import ServiceUnavailableError
from ragspine.scoring.muvera import muvera

if TYPE_CHECKING:
    from ragspine.catalog import LibraryModels

logger = logging.getLogger(__name__)

#: Device types whose page model's encode thread computes the MUVERA first stage there too.
FIRST_STAGE_DEVICES = ("cuda",)

#: MUVERA parameters the device encodes: its empty-bucket step holds a (batch x repetitions,
#: buckets, buckets) table, 10 MB at 64 buckets for 16 pages; more buckets stay on numpy.
DEVICE_MUVERA_MAX_K_SIM = 6

#: Batches the page encoder runs ahead of the ingesting thread's points: one keeps the device
#: busy while the thread builds the previous batch's points; 0 encodes inline (the old order,
#: for ``bench/encode_overlap.py`` to compare).
ENCODE_AHEAD = 1


FirstStage = Callable[[list[Any]], list[dict[str, Any]]]
_DEVICE_MUVERA: dict[tuple[Any, str], Any] = {}


def device_first_stage(models: LibraryModels) -> FirstStage | None:
    """The first-stage vectors of a batch of encoded pages, computed on the page model's device,
    for a MUVERA library whose page model runs on one of :data:`FIRST_STAGE_DEVICES`; None
    otherwise (the ingesting thread computes them, :func:`~ragspine.catalog.first_stage_vectors`)."""
    device = getattr(models.page, "device", None)
    if models.muvera is None or getattr(device, "type", None) not in FIRST_STAGE_DEVICES:
        return None
    if models.muvera.k_sim > DEVICE_MUVERA_MAX_K_SIM:
        return None
    from ragspine.models.muvera_device import DeviceMuvera  # torch: only with a page model on a device

    key = (models.muvera, str(device))
    dm = _DEVICE_MUVERA.get(key)
    if dm is None:
        dm = _DEVICE_MUVERA[key] = DeviceMuvera(muvera(models.muvera), device)
    return lambda pages: [{PAGE_FDE: e} for e in dm.documents([p.vectors for p in pages])]


class EncodeThreads:
    """The threads an indexer's encode stages share, kept between documents.

    - The device thread: one thread that runs every local page model's batches (encoders with
      ``prepare_pages``), in the order they come: one device, used by one caller at a time, and
      one copy of the processor for it, made once (a fast tokenizer cannot be shared between
      threads, so each thread keeps its own copy; a thread per document copied it per document).
    - The prep threads: ``prepare_pages`` of those encoders, ``workers(encoder)`` threads (the
      encoder's ``prefetch``: 4 on CUDA, 0 on a CPU, where preparing inline costs nothing beside
      the model), shared by the documents ingested at once.

    An encoder without ``prepare_pages`` (a Ray Serve proxy, whose replicas may serve several
    documents at once) gets a thread per document instead (:class:`EncodeStage`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._device: ThreadPoolExecutor | None = None
        self._prep: ThreadPoolExecutor | None = None
        self._prep_size = 0
        self._closed = False

    @staticmethod
    def local(encoder: Any) -> bool:
        return callable(getattr(encoder, "prepare_pages", None))

    @classmethod
    def workers(cls, encoder: Any) -> int:
        if not cls.local(encoder):
            return 0
        return max(0, int(getattr(encoder, "prefetch", 0) or 0))

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceUnavailableError("the indexer is closing: no more pages are encoded")

    def device(self) -> ThreadPoolExecutor:
        """The device thread (started at first use)."""
        with self._lock:
            self._check_open()
            if self._device is None:
                self._device = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-encode")
            return self._device

    def prepare(self, encoder: Any, images: Sequence[Any]) -> Future[Any] | None:
        """``encoder.prepare_pages(images)`` on a prep thread, or None for an encoder that
        prepares inline."""
        n = self.workers(encoder)
        if n == 0:
            return None
        with self._lock:
            self._check_open()
            if self._prep is None or self._prep_size < n:
                old = self._prep
                self._prep = ThreadPoolExecutor(max_workers=n, thread_name_prefix="ragspine-prep")
                self._prep_size = n
                if old is not None:  # a larger encoder came: the old threads finish what they hold
                    old.shutdown(wait=False)
            return self._prep.submit(encoder.prepare_pages, list(images))

    def close(self) -> None:
        """Stop the threads; later stages are refused (:class:`ServiceUnavailableError`)."""
        with self._lock:
            self._closed = True
            pools, self._device, self._prep = (self._device, self._prep), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


class EncodeStage:
    """One document's page batches through the page encoder, in order, off the ingesting thread.

    ``submit(images)`` returns a future of the batch's :class:`EncodedPage` list and, with
    ``first_stage``, each page's first-stage vectors by field (else None). A local model runs on
    the shared device thread (:class:`EncodeThreads`), any other encoder on a thread of this
    document's own. Use as a context manager: leaving it cancels this document's batches not yet
    started (and their preparation) and waits for the one running, so no encoder call outlives
    the document's write. ``clock`` gains the encoder's seconds under ``encode``.
    """

    def __init__(self, encoder: Any, threads: EncodeThreads, clock: MutableMapping[str, float],
                 first_stage: FirstStage | None = None) -> None:
        self.encoder = encoder
        self.threads = threads
        self.clock = clock
        self.first_stage = first_stage
        self._own: ThreadPoolExecutor | None = None
        self._inflight: list[Future[Any]] = []

    def _executor(self) -> ThreadPoolExecutor:
        if EncodeThreads.local(self.encoder):
            return self.threads.device()
        if self._own is None:
            self._own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-encode-doc")
        return self._own

    def submit(self, images: Sequence[Any]) -> Future[Any]:
        executor = self._executor()
        prepared = self.threads.prepare(self.encoder, images)
        if prepared is None:
            fut = executor.submit(self._timed, self.encoder.encode_pages, list(images))
        else:
            self._inflight.append(prepared)
            fut = executor.submit(self._encode_prepared, prepared)
        self._inflight = [f for f in self._inflight if not f.done()] + [fut]
        return fut

    def _encode_prepared(self, prepared: Future[Any]) -> Any:
        ready = prepared.result()  # the prep threads' time, not the encoder's
        return self._timed(self.encoder.encode_prepared, ready)

    def _timed(self, fn: Callable[..., Any], arg: Any) -> tuple[list[Any], list[dict[str, Any]] | None]:
        t = time.perf_counter()
        try:
            pages = fn(arg)
            return pages, self._first_stage(pages)
        finally:
            self.clock["encode"] = self.clock.get("encode", 0.0) + time.perf_counter() - t

    def _first_stage(self, pages: list[Any]) -> list[dict[str, Any]] | None:
        if self.first_stage is None:
            return None
        try:
            return self.first_stage(pages)
        except Exception as exc:  # noqa: BLE001 - the ingesting thread makes them instead
            # Out of device memory, say: the numpy encoder on the ingesting thread gives the same
            # vectors, so the batch is not lost for want of them.
            logger.warning("first-stage vectors on the device failed (%s: %s); the ingesting thread "
                           "makes them", type(exc).__name__, exc)
            return None

    def __enter__(self) -> EncodeStage:
        return self

    def __exit__(self, *exc: object) -> None:
        for fut in self._inflight:
            fut.cancel()
        wait(self._inflight)
        if self._own is not None:
            self._own.shutdown(wait=True, cancel_futures=True)
