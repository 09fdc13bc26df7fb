"""One writer per library across replicas: a lease record in the library's own collection.

Several replicas (Ray Serve Ingress pods) share one Qdrant. Each library has one lease point
(``kind=lease``): ``{holder, epoch, expires_at, released}``. A replica writes a library only
while it holds the lease:

- **acquire**: read the lease; if it is free (released, expired, or absent) write it as
  ``{holder: me, epoch: epoch + 1, ...}`` with a conditional update that matches the holder and
  epoch just read (:meth:`Store.put_if`: Qdrant's ``update_filter`` / ``insert_only``). Of
  several replicas that saw the same free lease exactly one write matches; the others read
  again and wait. A lease held by a live writer is polled until ``wait`` seconds have passed
  (then :class:`LibraryBusyError`, a 409).
- **renew**: a heartbeat thread moves ``expires_at`` forward every ``ttl / 3`` while a write
  runs, again conditional on ``{holder: me, epoch}``; a renewal that does not match means the
  lease was taken over, and the lease is marked lost.
- **check**: before each batch of points and before its commit, a writer checks its lease has
  not run out by its own clock (with ``ttl / 5`` to spare) and was not lost; it stops with
  :class:`LeaseLostError` otherwise. The commit itself is conditional too (see
  :meth:`Libraries.commit_doc_entry`), so a writer paused past its lease cannot commit.
- **release**: ``released: true``, conditional on ``{holder: me, epoch}``.

A holder that dies stops renewing: after at most ``ttl`` seconds the lease is free and the next
writer takes it over. A takeover from a holder that did not release is *not clean*: the new
holder (and only it) rolls back what the dead one left half-done (:meth:`Libraries.lock` calls
``on_takeover``). Bystanders never clean up: searches and reads take no lease.

What it assumes: replicas' wall clocks agree to well under ``ttl / 5`` (NTP on Kubernetes
nodes), and Qdrant applies one point's conditional update atomically (it does: a shard's updates
are applied in order).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragspine.catalog.ids import point_id
from ragspine.errors import LeaseLostError, LibraryBusyError, LibraryNotFoundError
from ragspine.store.base import PointData, Store

logger = logging.getLogger(__name__)

LEASE_POINT = point_id("writer-lease")
KIND_LEASE = "lease"


def is_free(payload: Mapping[str, Any], now: float) -> bool:
    """Whether a lease-like record (``{holder, epoch, expires_at, released}``: a writer lease, an
    OCR claim) may be taken: released by its holder, or past ``expires_at`` (a holder that
    stopped renewing is taken for dead)."""
    return bool(payload.get("released")) or float(payload.get("expires_at") or 0) <= now


class Heartbeat:
    """One daemon thread that calls ``tick`` every ``period`` seconds from its first
    :meth:`start` until :meth:`close`: the renewal loop of the writer leases and of the OCR
    claims (:mod:`ragspine.catalog.claims`)."""

    def __init__(self, period: float, tick: Callable[[], None], name: str) -> None:
        self.period = period
        self._tick = tick
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def start(self) -> None:
        with self._guard:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._tick()

    def close(self, timeout: float | None = None) -> None:
        self._stop.set()
        with self._guard:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=timeout)


def replica_id(configured: str | None = None) -> str:
    """This process's name among the replicas: ``configured`` (``RAGSPINE_REPLICA_ID``, the pod
    name from the Kubernetes downward API) else the host name and pid, with a random suffix:
    unique per process start, so a restarted pod never mistakes its predecessor's lease for its
    own. Safe as a folder name."""
    base = (configured or "").strip() or f"{socket.gethostname()}-{os.getpid()}"
    base = "".join(c if c.isalnum() or c in "-_." else "-" for c in base)[:80].strip(".") or "replica"
    return f"{base}-{uuid.uuid4().hex[:6]}"


@dataclass
class Lease:
    library: str
    holder: str
    epoch: int
    #: ``time.monotonic()`` after which this holder must not write (ttl minus the margin).
    deadline: float
    #: The lease was not released by its previous holder (it died, or this is the first lease
    #: of the library): what it left half-done must be rolled back by this holder.
    took_over: bool
    previous: str | None
    lost: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class WriterLeases:
    def __init__(self, store: Store, holder: str, ttl: float, wait: float,
                 clock: Callable[[], float] = time.time) -> None:
        if ttl <= 0:
            raise ValueError("the lease ttl must be positive")
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.wait = wait
        self.margin = ttl / 5
        self.clock = clock
        self._held: dict[str, Lease] = {}
        self._guard = threading.Lock()
        self._beat = Heartbeat(ttl / 3, self._renew_held, "ragspine-lease")
        #: Set by tests to stand for a dead process: no renewals, no release.
        self.frozen = False

    # -- acquire / renew / release -------------------------------------------------------------

    def _payload(self, epoch: int, expires_at: float, released: bool = False, dirty: bool = False
                 ) -> dict[str, object]:
        return {"kind": KIND_LEASE, "holder": self.holder, "epoch": epoch, "expires_at": expires_at,
                "released": released, "dirty": dirty}

    def acquire(self, library: str) -> Lease:
        give_up = time.monotonic() + self.wait
        while True:
            recs = self.store.retrieve(library, [LEASE_POINT])
            t0 = time.monotonic()
            now = self.clock()
            if not recs:
                payload = self._payload(1, now + self.ttl)
                if self.store.put_if(library, PointData(LEASE_POINT, payload), None):
                    return self._hold(Lease(library, self.holder, 1, t0 + self.ttl - self.margin, True, None))
                continue
            cur = recs[0].payload
            epoch = int(cur.get("epoch", 0))
            if is_free(cur, now):
                payload = self._payload(epoch + 1, now + self.ttl)
                if self.store.put_if(library, PointData(LEASE_POINT, payload),
                                     {"holder": str(cur.get("holder")), "epoch": epoch}):
                    took_over = not cur.get("released") or bool(cur.get("dirty"))
                    if took_over:
                        logger.warning("library %s: writer lease taken over from %s, whose lease ran out",
                                       library, cur.get("holder"))
                    return self._hold(Lease(library, self.holder, epoch + 1, t0 + self.ttl - self.margin,
                                            took_over, str(cur.get("holder"))))
                continue  # another replica took it first: read again
            if time.monotonic() >= give_up:
                left = float(cur.get("expires_at", 0)) - now
                raise LibraryBusyError(
                    f"library '{library}' is being written by replica {cur.get('holder')!r} (its lease runs "
                    f"{left:.0f} s more unless renewed); waited {self.wait:.0f} s "
                    "(RAGSPINE_WRITER_LEASE_WAIT). Retry later"
                )
            time.sleep(min(0.2, max(0.01, give_up - time.monotonic())))

    def _hold(self, lease: Lease) -> Lease:
        with self._guard:
            self._held[lease.library] = lease
        self._beat.start()
        return lease

    def renew(self, lease: Lease) -> bool:
        with lease.lock:
            if lease.lost or self.frozen:
                return False
            t0 = time.monotonic()
            payload = self._payload(lease.epoch, self.clock() + self.ttl)
            try:
                ok = self.store.put_if(lease.library, PointData(LEASE_POINT, payload),
                                       {"holder": self.holder, "epoch": lease.epoch})
            except Exception:
                logger.exception("library %s: writer lease renewal failed", lease.library)
                return False  # the deadline stands; the writer stops when it passes
            if ok:
                lease.deadline = t0 + self.ttl - self.margin
            else:
                lease.lost = True
                logger.error("library %s: writer lease lost to another replica", lease.library)
            return ok

    def release(self, lease: Lease, *, clean: bool = True) -> None:
        """Give the lease up; ``clean=False``: the write under it failed and may have left work
        half-done, so the next holder takes it over as from a dead one (and rolls back)."""
        with self._guard:
            self._held.pop(lease.library, None)
        if self.expired(lease) or self.frozen:
            return  # not this holder's to release any more: the next one takes it over
        with lease.lock:
            try:
                payload = self._payload(lease.epoch, 0.0, released=True, dirty=not clean)
                self.store.put_if(lease.library, PointData(LEASE_POINT, payload),
                                  {"holder": self.holder, "epoch": lease.epoch})
            except LibraryNotFoundError:
                pass  # the library was dropped under this lease: nothing left to release
            except Exception:  # the lease runs out by itself; the next holder rolls back
                logger.exception("library %s: writer lease release failed", lease.library)

    def expired(self, lease: Lease) -> bool:
        """Taken over, or past its deadline by this holder's clock (then marked lost)."""
        if not lease.lost and time.monotonic() > lease.deadline:
            lease.lost = True
        return lease.lost

    def check(self, lease: Lease) -> None:
        """Raise :class:`LeaseLostError` unless ``lease`` is still this holder's to write under."""
        if self.expired(lease):
            raise LeaseLostError(
                f"the writer lease of library '{lease.library}' ran out or was taken over by another "
                "replica before this write committed; nothing of it is visible. Retry the request"
            )

    # -- heartbeat ------------------------------------------------------------------------------

    def _renew_held(self) -> None:
        with self._guard:
            held = list(self._held.values())
        for lease in held:
            self.renew(lease)

    def close(self) -> None:
        self._beat.close(timeout=self.ttl)
