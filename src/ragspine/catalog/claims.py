"""Who runs a document's owed OCR across replicas: one claim per document, in the library's
collection.

With writer leases on (several replicas on one Qdrant), phase 2 of a two-phase ingest
(:mod:`ragspine.indexing.ocr_phase`) runs on the replica that holds the document's **OCR claim**,
one point of ``kind=ocr_claim``::

    {claim_doc, holder, epoch, expires_at, released, attempts, content_key}

- **take** (try once, never wait): read the claim; if it is free (released, expired or absent)
  write ``{holder: me, epoch: epoch + 1, attempts: ...}`` conditional on the holder and epoch
  just read (:meth:`Store.put_if`). Of replicas that saw the same free claim exactly one write
  matches. A claim held by a live replica means someone else is on it: the caller skips. A
  claim held for another ``content_key`` (an older version of the document: its run can only
  end superseded) is taken over as a free one, so a new version's OCR is not held up by it.
- **renew**: a heartbeat every ``ttl / 3`` while the claim is held (queued or running),
  conditional on ``{holder: me, epoch}``; a renewal that does not match means the claim was
  taken over, and it is marked lost (the run stops at its next page).
- **release**: ``released: true`` at the end, conditional again. A holder that dies stops
  renewing; after ``ttl`` its claim is free, and another replica's sweep
  (:mod:`ragspine.indexing.ocr_sweep`) takes the document over.
- **attempts**: how many times a claim was taken for the same ``content_key`` (a new version of
  the document starts again at 0). The automatic sweep stops at ``RAGSPINE_OCR_MAX_ATTEMPTS``
  (a document whose OCR fails every time, or kills its replica, is not retried forever); an
  explicit resume takes the claim whatever the count. A run stopped by a server stop gives its
  attempt back (the document is not to blame).

The protocol is the writer lease's (:mod:`ragspine.catalog.leases`): the same free test
(:func:`~ragspine.catalog.leases.is_free`), the same conditional write on ``{holder, epoch}``,
the same heartbeat (:class:`~ragspine.catalog.leases.Heartbeat`), the same holder name, so the
two cannot drift apart. It is not a :class:`~ragspine.catalog.leases.WriterLeases` because the
differences are the point: a lease is per library, waits until it is free and guards writes
(losing it aborts a write); a claim is per document, never waits, and only avoids double work.
Correctness does not rest on the claim: phase 2 commits under the writer lease, conditional on
the entry still owing the OCR of its content key, so two runs at once (a paused holder whose
claim was taken over) cost work, never a wrong version.

The claim field is ``claim_doc``, not ``doc_id``: deletes and scrolls by ``doc_id`` (a
document's versions) must never match it, and every reader selects points by ``kind``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragspine.catalog.ids import point_id
from ragspine.catalog.leases import Heartbeat, is_free
from ragspine.errors import LibraryNotFoundError
from ragspine.store.base import PointData, Store

logger = logging.getLogger(__name__)

KIND_OCR_CLAIM = "ocr_claim"


def claim_point(doc_id: str) -> str:
    """The id of a document's OCR claim point (one per document and library)."""
    return point_id("ocr-claim", doc_id)


@dataclass
class Claim:
    library: str
    doc_id: str
    content_key: str
    epoch: int
    #: Attempts counted for ``content_key``, this one included.
    attempts: int
    #: ``time.monotonic()`` after which this holder takes the claim for lost (ttl minus a margin).
    deadline: float
    lost: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class OcrClaims:
    """This replica's OCR claims (see the module doc)."""

    def __init__(self, store: Store, holder: str, ttl: float, clock: Callable[[], float] = time.time) -> None:
        if ttl <= 0:
            raise ValueError("the claim ttl must be positive")
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.margin = ttl / 5
        self.clock = clock
        self._held: dict[tuple[str, str], Claim] = {}
        self._guard = threading.Lock()
        self._beat = Heartbeat(ttl / 3, self._renew_held, "ragspine-ocr-claims")
        #: Set by tests to stand for a dead process: no renewals, no release.
        self.frozen = False

    def _payload(self, c: Claim, expires_at: float, *, released: bool = False, attempts: int | None = None
                 ) -> dict[str, Any]:
        return {"kind": KIND_OCR_CLAIM, "claim_doc": c.doc_id, "holder": self.holder, "epoch": c.epoch,
                "expires_at": expires_at, "released": released,
                "attempts": c.attempts if attempts is None else attempts, "content_key": c.content_key}

    def peek(self, library: str, doc_id: str) -> dict[str, Any] | None:
        """The claim as stored (None: never claimed)."""
        recs = self.store.retrieve(library, [claim_point(doc_id)])
        return recs[0].payload if recs else None

    def available(self, payload: dict[str, Any] | None, content_key: str, max_attempts: int | None) -> bool:
        """Whether a claim read by :meth:`peek` could be taken now for ``content_key`` (with at
        most ``max_attempts`` attempts; None: any number)."""
        return self._free(payload, content_key, self.clock()) and (
            max_attempts is None or self.attempts(payload, content_key) < max_attempts)

    @staticmethod
    def _free(payload: dict[str, Any] | None, content_key: str, now: float) -> bool:
        """Absent, released, run out, or held for another content (a superseded version's run)."""
        return payload is None or is_free(payload, now) or payload.get("content_key") != content_key

    @staticmethod
    def attempts(payload: dict[str, Any] | None, content_key: str) -> int:
        """Attempts counted for ``content_key`` (another key's count does not carry over)."""
        if not payload or payload.get("content_key") != content_key:
            return 0
        return int(payload.get("attempts") or 0)

    def take(self, library: str, doc_id: str, content_key: str, *, max_attempts: int | None = None) -> Claim | None:
        """This replica's claim on the document's OCR, or None: another live replica holds it (or
        took it at the same moment), or ``max_attempts`` attempts were counted already."""
        pid = claim_point(doc_id)
        recs = self.store.retrieve(library, [pid])
        t0 = time.monotonic()
        now = self.clock()
        cur = recs[0].payload if recs else None
        if not self._free(cur, content_key, now):
            logger.info("library %s: the OCR of document %s is claimed by replica %s; skipped here",
                        library, doc_id, cur.get("holder"))
            return None
        done = self.attempts(cur, content_key)
        if max_attempts is not None and done >= max_attempts:
            logger.info("library %s: the OCR of document %s was tried %d times; not retried automatically "
                        "('ragspine ocr --resume' runs it)", library, doc_id, done)
            return None
        epoch = int(cur.get("epoch", 0)) if cur is not None else 0
        claim = Claim(library, doc_id, content_key, epoch + 1, done + 1, t0 + self.ttl - self.margin)
        expect = None if cur is None else {"holder": str(cur.get("holder")), "epoch": epoch}
        if not self.store.put_if(library, PointData(pid, self._payload(claim, now + self.ttl)), expect):
            logger.info("library %s: another replica claimed the OCR of document %s first", library, doc_id)
            return None
        if cur is not None and not is_free(cur, now):
            logger.info("library %s: the OCR of document %s taken over from replica %s, whose claim was for an "
                        "older version", library, doc_id, cur.get("holder"))
        elif cur is not None and not cur.get("released"):
            logger.warning("library %s: the OCR of document %s taken over from replica %s, whose claim ran out",
                           library, doc_id, cur.get("holder"))
        with self._guard:
            self._held[(library, doc_id)] = claim
        self._beat.start()
        return claim

    def renew(self, claim: Claim) -> bool:
        with claim.lock:
            if claim.lost or self.frozen:
                return False
            t0 = time.monotonic()
            try:
                ok = self.store.put_if(claim.library, PointData(claim_point(claim.doc_id),
                                                                self._payload(claim, self.clock() + self.ttl)),
                                       {"holder": self.holder, "epoch": claim.epoch})
            except Exception:
                logger.warning("library %s: renewing the OCR claim of %s failed", claim.library, claim.doc_id,
                               exc_info=True)
                return False  # the deadline stands
            if ok:
                claim.deadline = t0 + self.ttl - self.margin
            else:
                claim.lost = True
                logger.warning("library %s: the OCR claim of document %s was taken over by another replica",
                               claim.library, claim.doc_id)
            return ok

    def expired(self, claim: Claim) -> bool:
        """Taken over, or past its deadline by this holder's clock (then marked lost)."""
        if not claim.lost and time.monotonic() > claim.deadline:
            claim.lost = True
        return claim.lost

    def release(self, claim: Claim, *, refund: bool = False) -> None:
        """Give the claim up (``refund``: the attempt does not count: it never ran, or a server
        stop ended it). Conditional: a claim taken over meanwhile is left to its new holder."""
        with self._guard:
            self._held.pop((claim.library, claim.doc_id), None)
        if self.frozen:
            return
        attempts = max(0, claim.attempts - 1) if refund else claim.attempts
        with claim.lock:
            try:
                self.store.put_if(claim.library, PointData(claim_point(claim.doc_id), self._payload(
                    claim, 0.0, released=True, attempts=attempts)), {"holder": self.holder, "epoch": claim.epoch})
            except LibraryNotFoundError:
                pass  # the library was dropped meanwhile
            except Exception:  # it runs out by itself
                logger.warning("library %s: releasing the OCR claim of %s failed", claim.library, claim.doc_id,
                               exc_info=True)

    def _renew_held(self) -> None:
        with self._guard:
            held = list(self._held.values())
        for claim in held:
            self.renew(claim)

    def close(self) -> None:
        self._beat.close(timeout=self.ttl)
