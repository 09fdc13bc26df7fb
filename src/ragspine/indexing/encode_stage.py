"""The page encoder as a stage of its own in an ingest, between the renders and the points.

Before this stage the ingesting thread called the page encoder itself, batch after batch: while
the device encoded a batch the thread waited, and while the thread built that batch's points
(BM25 weights, the MUVERA first stage, the dense passage encoder, thumbnails) the device sat
idle. A GPU that encodes 80 ColPali pages a second and a thread that spends ~20 ms a page on its
own work gave 0.6x the model's rate at best, before any preprocessing.

Now a document's page batches go to an encode thread in the order they were rendered; the
ingesting thread hands batch k+1 over before it builds the points of batch k
(:data:`ENCODE_AHEAD` batches in flight, a bounded queue), so the device and the thread work at
once. An encoder that splits preparing from encoding (:meth:`BasePageEncoder.prepare_pages
<ragspine.models.base.BasePageEncoder.prepare_pages>`, the processor's resize and normalise)
has its batches prepared on :class:`PagePrep`'s threads, so the encode thread feeds the device
and nothing else. Encoders without the split (a Ray Serve proxy, a test double) run whole on the
encode thread.

With the page model on a GPU and a MUVERA first stage, the encode thread also encodes each
batch's MUVERA vectors on the device (:func:`device_first_stage`), taking them off the
ingesting thread, whose own work per page bounds an ingest on a GPU node.

The encode thread's own seconds are the ``encode`` stage; the ingesting thread's wait for it is
``encode_wait`` (:mod:`ragspine.indexing.stages`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ragspine.catalog import PAGE_FDE
from ragspine.scoring.muvera import muvera

if TYPE_CHECKING:
    from ragspine.catalog import LibraryModels

#: Device types whose page model's encode thread computes the MUVERA first stage there too.
FIRST_STAGE_DEVICES = ("cuda",)

#: Batches the page encoder runs ahead of the ingesting thread's points: one keeps the device
#: busy while the thread builds the previous batch's points; 0 encodes inline (the old order,
#: for ``bench/ingest_ceiling.py --encode-ahead`` to compare).
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
    from ragspine.models.muvera_device import DeviceMuvera  # torch: only with a page model on a device

    key = (models.muvera, str(device))
    dm = _DEVICE_MUVERA.get(key)
    if dm is None:
        dm = _DEVICE_MUVERA[key] = DeviceMuvera(muvera(models.muvera), device)
    return lambda pages: [{PAGE_FDE: e} for e in dm.documents([p.vectors for p in pages])]


class PagePrep:
    """Threads that preprocess page batches for encoders that can (``prepare_pages``), shared by
    every document an indexer writes and kept between them: an encoder keeps one copy of its
    processor per thread (a fast tokenizer cannot be shared), made once. ``workers(encoder)``
    threads: the encoder's ``prefetch`` (4 on CUDA, 0 on a CPU, where preprocessing inline costs
    nothing beside the model)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0

    @staticmethod
    def workers(encoder: Any) -> int:
        if not callable(getattr(encoder, "prepare_pages", None)):
            return 0
        return max(0, int(getattr(encoder, "prefetch", 0) or 0))

    def submit(self, encoder: Any, images: Sequence[Any]) -> Future[Any] | None:
        """``encoder.prepare_pages(images)`` on a prep thread, or None for an encoder that
        prepares inline."""
        n = self.workers(encoder)
        if n == 0:
            return None
        with self._lock:
            if self._pool is None or self._size < n:
                old = self._pool
                self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="ragspine-prep")
                self._size = n
                if old is not None:  # a larger encoder came: the old threads finish what they hold
                    old.shutdown(wait=False)
            return self._pool.submit(encoder.prepare_pages, list(images))

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


class EncodeStage:
    """One document's page batches through the page encoder on a thread of their own, in order.

    ``submit(images)`` returns a future of the batch's :class:`EncodedPage` list and, with
    ``first_stage``, each page's first-stage vectors by field (else None). Use as a context
    manager: leaving it drops batches not yet started and waits for the one running, so no
    encoder call outlives the document's write. ``clock`` gains the encode thread's seconds under
    ``encode``."""

    def __init__(self, encoder: Any, prep: PagePrep, clock: MutableMapping[str, float],
                 first_stage: FirstStage | None = None) -> None:
        self.encoder = encoder
        self.prep = prep
        self.clock = clock
        self.first_stage = first_stage
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-encode")
        self._inflight: list[Future[Any]] = []

    def submit(self, images: Sequence[Any]) -> Future[Any]:
        prepared = self.prep.submit(self.encoder, images)
        if prepared is None:
            fut = self._thread.submit(self._timed, self.encoder.encode_pages, list(images))
        else:
            fut = self._thread.submit(self._encode_prepared, prepared)
        self._inflight = [f for f in self._inflight if not f.done()] + [fut]
        return fut

    def _encode_prepared(self, prepared: Future[Any]) -> Any:
        ready = prepared.result()  # the prep threads' time, not the encoder's
        return self._timed(self.encoder.encode_prepared, ready)

    def _timed(self, fn: Callable[..., Any], arg: Any) -> tuple[list[Any], list[dict[str, Any]] | None]:
        t = time.perf_counter()
        try:
            pages = fn(arg)
            return pages, (self.first_stage(pages) if self.first_stage is not None else None)
        finally:
            self.clock["encode"] = self.clock.get("encode", 0.0) + time.perf_counter() - t

    def __enter__(self) -> EncodeStage:
        return self

    def __exit__(self, *exc: object) -> None:
        for fut in self._inflight:
            fut.cancel()
        self._thread.shutdown(wait=True, cancel_futures=True)
