"""The knowledge-gap log: queries a library could not answer, counted.

A search that returns no hit, or that the corrective loop abstains on, records one gap per
library searched: the query (normalised: NFKC, case-folded, whitespace collapsed), its filters
(canonical JSON), how often it was asked, and when first and last. Identical misses are one
gap with a count. Only the user's own query and filters are kept, never anything a search
found: a RESTRICTED canary typed as a query is stored as typed, no RESTRICTED content ever is.

Each gap is a point of ``kind=gap`` in the library's collection (the id: a hash of query and
filters), so it goes with the library and every replica reads it. Counting is a
read-modify-write under a per-library lock: exact for the threads of one process.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ragspine.catalog import Libraries, point_id
from ragspine.errors import InvalidRequestError, NotFoundError
from ragspine.graph import norm
from ragspine.store.base import PointData, Store, Where

logger = logging.getLogger(__name__)

KIND_GAP = "gap"
#: Conditional writes one miss may try before it gives up counting (each lost try means
#: another replica's increment landed: with N replicas missing together, at most N - 1 tries).
MAX_RECORD_TRIES = 64
#: Write ids kept on a gap point (see GapLog.record): more than the replicas that may miss at once.
RECENT_WRITES = 32
#: Most gaps listed at once.
MAX_GAPS_LISTED = 1000
_FIELDS = ("gap_id", "query", "filters", "scope", "hit_count", "first_seen", "last_seen", "reason")


def gap_id(query: str, filters: list[dict[str, Any]], scope: Sequence[dict[str, Any]] = ()) -> str:
    """One gap per query, filters and key filter (a gap without a key filter keeps the id it
    had before key filters existed)."""
    if scope:
        return point_id("gap", norm(query), canonical_filters(filters), canonical_filters(list(scope)))
    return point_id("gap", norm(query), canonical_filters(filters))


def canonical_filters(filters: list[dict[str, Any]]) -> str:
    return json.dumps(filters, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class GapLog:
    def __init__(self, store: Store, libraries: Libraries) -> None:
        self.store = store
        self.libraries = libraries
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, library: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(library, threading.Lock())

    def record(self, library: str, query: str, filters: list[dict[str, Any]], reason: str,
               scope: Sequence[dict[str, Any]] = ()) -> None:
        """Count one miss of ``query`` with ``filters`` in ``library``, searched through an API
        key's filter ``scope`` (empty: none)."""
        gid = gap_id(query, filters, scope)
        # The lock counts exactly within this process; across replicas (one Qdrant, several
        # processes) each increment is a conditional write on the count it read, retried when
        # another replica's landed first (Store.put_if: Qdrant's update_filter).
        mine = uuid.uuid4().hex
        with self._lock(library):
            for _ in range(MAX_RECORD_TRIES):
                now = time.time()
                recs = self.store.retrieve(library, [gid], fields=[*_FIELDS, "writes"])
                prev = recs[0].payload if recs else None
                # The last writes' ids ride along: a write that landed and was then built on by
                # another replica's is still seen as landed (put_if's read-back alone would call
                # it lost and count the miss twice).
                if prev and mine in (prev.get("writes") or []):
                    return
                payload = {
                    "kind": KIND_GAP,
                    "gap_id": gid,
                    "query": norm(query),
                    "filters": canonical_filters(filters),
                    "scope": canonical_filters(list(scope)),
                    "hit_count": int(prev["hit_count"]) + 1 if prev else 1,
                    "first_seen": prev["first_seen"] if prev else now,
                    "last_seen": now,
                    "reason": reason,
                    "writes": [*(prev.get("writes") or [] if prev else [])][-(RECENT_WRITES - 1):] + [mine],
                }
                expect = {"kind": KIND_GAP, "hit_count": int(prev["hit_count"])} if prev else None
                if self.store.put_if(library, PointData(id=gid, payload=payload), expect):
                    return
            logger.warning("gap log of %s: a miss was not counted (%d conflicting writers)", library, MAX_RECORD_TRIES)

    def list(self, library: str, limit: int = 100, scope: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """Gaps by hit count (most asked first), then most recent; with ``scope`` (an API key's
        filter) only those searched through the same filter."""
        if not 1 <= limit <= MAX_GAPS_LISTED:
            raise InvalidRequestError(f"limit must be between 1 and {MAX_GAPS_LISTED}, got {limit}")
        self.libraries.open(library)
        recs = self.store.scroll(library, Where(kind=KIND_GAP), fields=list(_FIELDS))
        gaps = [_public(library, r.payload) for r in recs if _seen_by(r.payload, scope)]
        gaps.sort(key=lambda g: (-g["hit_count"], -g["last_seen"], g["gap_id"]))
        return gaps[:limit]

    def delete(self, library: str, gid: str, scope: Sequence[dict[str, Any]] = ()) -> None:
        self.libraries.open(library)
        with self._lock(library):
            # Only a gap point: the id of a document's point must not delete it through this route.
            recs = self.store.retrieve(library, [gid], fields=["kind", "scope"]) if _is_uuid(gid) else []
            if not recs or recs[0].payload.get("kind") != KIND_GAP or not _seen_by(recs[0].payload, scope):
                raise NotFoundError(f"no gap '{gid}' in library '{library}'")
            self.store.delete_ids(library, [gid])

    def clear(self, library: str, scope: Sequence[dict[str, Any]] = ()) -> int:
        """Delete every gap of the library (with ``scope``: those searched through it)."""
        self.libraries.open(library)
        with self._lock(library):
            if scope:
                recs = self.store.scroll(library, Where(kind=KIND_GAP), fields=["scope"])
                ids = [r.id for r in recs if _seen_by(r.payload, scope)]
                if ids:
                    self.store.delete_ids(library, ids)
                return len(ids)
            n = self.store.count(library, Where(kind=KIND_GAP))
            if n:
                self.store.delete(library, Where(kind=KIND_GAP))
            return n


def _public(library: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "gap_id": p["gap_id"],
        "library": library,
        "query": p["query"],
        "filters": json.loads(p.get("filters") or "[]"),
        "scope": json.loads(p.get("scope") or "[]"),
        "hit_count": int(p["hit_count"]),
        "first_seen": p["first_seen"],
        "last_seen": p["last_seen"],
        "reason": p.get("reason"),
    }


def _seen_by(payload: dict[str, Any], scope: Sequence[dict[str, Any]]) -> bool:
    """A caller without a key filter sees every gap; one with a filter, the gaps searched
    through the same filter."""
    return not scope or (payload.get("scope") or "[]") == canonical_filters(list(scope))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
