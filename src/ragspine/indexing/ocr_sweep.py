"""OCR owed by a replica that stopped, resumed by the others (cluster mode).

With writer leases on, several replicas share the libraries, and a document's ``ocr: pending``
says nothing about whether the replica running its phase 2 is alive. Each phase 2 therefore
runs under the document's OCR claim (:mod:`ragspine.catalog.claims`), and each server replica
sweeps its libraries (at start, then every ``RAGSPINE_OCR_SWEEP_SECONDS``): a document whose OCR
is owed (pending or failed) and whose claim is free (released, or run out because its holder
stopped renewing it) is queued here, where the queue claims it first
(:class:`ClaimGate`). Of several replicas sweeping at once, one claim write matches; the
others skip the document.

- A sweep queues only while this replica's OCR queue has room (twice its threads), so the owed
  OCR of many documents spreads over the replicas instead of piling onto the first to sweep.
- A sweep takes a document's claim at most ``RAGSPINE_OCR_MAX_ATTEMPTS`` times for the same
  content (counted in the claim, across replicas); after that the document stays ``failed`` and
  only ``ragspine ocr --resume`` (or :meth:`Engine.resume_ocr`) runs it again.
- The embedded store (one process) has no claims and no sweep: a server start marks what a
  stopped process owed ``failed`` and resumes it (``serving.app``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ragspine.catalog.claims import Claim, OcrClaims
from ragspine.indexing.ocr_phase import OPEN_STATES, OcrQueue, Ticket

logger = logging.getLogger(__name__)


class _Held:
    """A phase 2 queued under this replica's claim."""

    def __init__(self, claims: OcrClaims, claim: Claim) -> None:
        self.claims, self.claim = claims, claim

    def lost(self) -> bool:
        return self.claims.expired(self.claim)

    def release(self, *, refund: bool) -> None:
        self.claims.release(self.claim, refund=refund)


class _Unclaimed:
    """Nothing owed when queued: phase 2 finds nothing to do, and needs no claim."""

    def lost(self) -> bool:
        return False

    def release(self, *, refund: bool) -> None:
        pass


class ClaimGate:
    """:class:`~ragspine.indexing.ocr_phase.OcrQueue`'s gate in cluster mode: a document is
    queued only under this replica's claim on its OCR. ``entry(library, doc_id)`` is its
    manifest entry; ``max_attempts`` applies unless the caller forces the run."""

    def __init__(self, claims: OcrClaims, entry: Callable[[str, str], dict[str, Any] | None],
                 max_attempts: int) -> None:
        self.claims = claims
        self.entry = entry
        self.max_attempts = max_attempts

    def __call__(self, library: str, doc_id: str, force: bool) -> Ticket | None:
        e = self.entry(library, doc_id)
        if not e or e.get("ocr") not in OPEN_STATES:
            return _Unclaimed()
        claim = self.claims.take(library, doc_id, str(e.get("content_key")),
                                 max_attempts=None if force else self.max_attempts)
        return None if claim is None else _Held(self.claims, claim)


class OcrSweep:
    """Every ``every`` seconds (and at :meth:`start`): queue the owed OCR of every library whose
    claim is free. ``libraries()`` names them, ``prepare(name)`` opens one (raises if it cannot
    be read now), ``owed(name)`` lists the entries whose OCR is owed."""

    def __init__(self, *, libraries: Callable[[], list[str]], prepare: Callable[[str], Any],
                 owed: Callable[[str], list[dict[str, Any]]], claims: OcrClaims, queue: OcrQueue,
                 every: float, max_attempts: int) -> None:
        self.libraries, self.prepare, self.owed = libraries, prepare, owed
        self.claims = claims
        self.queue = queue
        self.every = every
        self.max_attempts = max_attempts
        #: Queue no more once this many documents are queued or running here.
        self.room = 2 * queue.threads
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._given_up: set[tuple[str, str, str]] = set()

    def run_once(self) -> list[Future[Any]]:
        """One sweep; the futures of the documents it queued (each None if another replica
        claimed it first)."""
        out: list[Future[Any]] = []
        for name in self.libraries():
            if self._stop.is_set():
                break
            try:
                self.prepare(name)
                entries = self.owed(name)
            except Exception as exc:  # dropped meanwhile, being restored, an older format: not ours to fix
                logger.debug("OCR sweep: library %s skipped (%s)", name, type(exc).__name__)
                continue
            for e in entries:
                if self._stop.is_set() or self.queue.backlog >= self.room:
                    return out
                fut = self._one(name, e)
                if fut is not None:
                    out.append(fut)
        return out

    def _one(self, library: str, e: dict[str, Any]) -> Future[Any] | None:
        doc_id, key = str(e["doc_id"]), str(e.get("content_key"))
        if self.queue.queued(library, doc_id):
            return None
        try:
            cur = self.claims.peek(library, doc_id)
        except Exception as exc:
            logger.debug("OCR sweep: the claim of %s/%s unreadable (%s)", library, doc_id, type(exc).__name__)
            return None
        if not self.claims.available(cur, key, None):
            return None  # another replica is on it (its claim is live)
        if not self.claims.available(cur, key, self.max_attempts):
            if (library, doc_id, key) not in self._given_up:
                self._given_up.add((library, doc_id, key))
                logger.warning("library %s: the OCR of document %s failed %d times; the sweep leaves it failed "
                               "('ragspine ocr --resume' runs it again)", library, doc_id,
                               self.claims.attempts(cur, key))
            return None
        return self.queue.submit(library, doc_id, force=False)

    def start(self) -> None:
        with self._guard:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name="ragspine-ocr-sweep", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                queued = self.run_once()
                if queued:
                    logger.info("OCR sweep: resuming the OCR of %d documents", len(queued))
            except Exception:  # the store does not answer: the next round tries again
                logger.warning("OCR sweep failed", exc_info=True)
            if self._stop.wait(self.every):
                return

    def stop(self, timeout: float | None = None) -> None:
        """No more sweeps (what was queued stays queued: the queue's own close decides)."""
        self._stop.set()
        with self._guard:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)
