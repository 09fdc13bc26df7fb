"""Library records and the document manifest, kept in the store itself.

A library's record (``kind=library``) says which encoder and revision produced every vector
field, the metadata field types seen so far, and the BM25 length statistics. Each document
has a manifest entry (``kind=doc``) naming its active version: writing that one point is the
commit of a document replace, so a reader sees either the old version or the new one.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ragspine.api.names import DOC_ID_PATTERN, LIBRARY_NAME_PATTERN
from ragspine.catalog.formats import LIBRARY_FORMAT, UNVERSIONED_FORMAT, check_format, check_restored
from ragspine.catalog.ids import point_id
from ragspine.catalog.layout import Layout
from ragspine.catalog.leases import Lease, WriterLeases
from ragspine.errors import (
    ConflictError,
    InvalidRequestError,
    LeaseLostError,
    LibraryNotFoundError,
    ModelMismatchError,
)
from ragspine.scoring.bm25 import BM25Params
from ragspine.store.base import (
    KIND_DOC,
    KIND_LIBRARY,
    SPARSE_CHUNK,
    SPARSE_PAGE,
    DenseField,
    PointData,
    Store,
    Where,
)

LIBRARY_NAME_RE = re.compile(LIBRARY_NAME_PATTERN)
DOC_ID_RE = re.compile(DOC_ID_PATTERN)
BM25_MODEL = "ragspine-bm25"
#: Vector fields written by models: the full page multivector and its first-stage copy (a
#: pooled multivector, or one MUVERA encoding) on page points, the dense passage vector on
#: chunk points.
PAGE_FULL = "page_full"
PAGE_POOLED = "page_pooled"
PAGE_FDE = "page_fde"
DENSE_CHUNK = "dense_chunk"
MODEL_FIELDS = (PAGE_FULL, PAGE_POOLED, PAGE_FDE, DENSE_CHUNK)
#: Re-weight every BM25 vector when the average length has drifted this much (relative)
#: from the one the vectors were built with.
AVGDL_DRIFT = 0.2


LIBRARY_POINT = point_id("library")


#: The manifest clock: a counter every manifest write moves (see Libraries.active_versions).
MANIFEST_CLOCK = point_id("manifest-clock")
KIND_CLOCK = "clock"


def doc_point(doc_id: str) -> str:
    return point_id("doc", doc_id)


def check_library_name(name: object) -> str:
    if not isinstance(name, str) or not LIBRARY_NAME_RE.match(name):
        raise InvalidRequestError(
            f"library name {name!r} is not allowed: use 1-63 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return name


def check_doc_id(doc_id: object) -> str:
    if not isinstance(doc_id, str) or not DOC_ID_RE.match(doc_id) or ".." in doc_id:
        raise InvalidRequestError(
            f"doc_id {doc_id!r} is not allowed: use 1-128 letters, digits, '.', '-' or '_', "
            "starting with a letter or digit"
        )
    return doc_id


@dataclass
class LengthStats:
    """Token counts of one BM25 field and the average length its vectors were built with."""

    tokens: int = 0
    count: int = 0
    basis: float = 0.0

    @property
    def avgdl(self) -> float:
        return self.tokens / self.count if self.count else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "count": self.count, "basis": self.basis}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "LengthStats":
        d = d or {}
        return cls(int(d.get("tokens", 0)), int(d.get("count", 0)), float(d.get("basis", 0.0)))


@dataclass
class LibraryRecord:
    name: str
    created_at: float
    encoders: dict[str, dict[str, Any]]
    field_types: dict[str, str] = field(default_factory=dict)
    stats: dict[str, LengthStats] = field(default_factory=dict)
    #: The layout the library is written in (ragspine.catalog.formats).
    format_version: int = LIBRARY_FORMAT
    #: Set while a restore writes the library (its record first): nothing reads it meanwhile.
    restoring: bool = False
    #: Shards, copies and on-disk vector fields it was created with (:mod:`ragspine.catalog.layout`;
    #: empty for a library created before layouts were recorded: the store's defaults).
    layout: dict[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        return {
            "kind": KIND_LIBRARY,
            "format_version": self.format_version,
            "name": self.name,
            "created_at": self.created_at,
            "encoders": self.encoders,
            "field_types": self.field_types,
            "stats": {k: v.to_json() for k, v in self.stats.items()},
            **({"restoring": True} if self.restoring else {}),
            **({"layout": self.layout} if self.layout else {}),
        }

    @classmethod
    def from_payload(cls, p: dict[str, Any]) -> "LibraryRecord":
        return cls(
            name=p["name"],
            created_at=float(p.get("created_at", 0.0)),
            encoders={k: dict(v) for k, v in (p.get("encoders") or {}).items()},
            field_types=dict(p.get("field_types") or {}),
            stats={k: LengthStats.from_json(v) for k, v in (p.get("stats") or {}).items()},
            format_version=int(p.get("format_version", UNVERSIONED_FORMAT)),
            restoring=bool(p.get("restoring", False)),
            layout=dict(p.get("layout") or {}),
        )


def expected_encoders(bm25: BM25Params) -> dict[str, dict[str, str]]:
    enc = {"model": BM25_MODEL, "revision": bm25.revision}
    return {SPARSE_CHUNK: dict(enc), SPARSE_PAGE: dict(enc)}


class Libraries:
    """Create, open and describe libraries; one writer per library at a time: an in-process
    lock, and with ``leases`` (several replicas on one Qdrant) the library's writer lease
    (:mod:`ragspine.catalog.leases`)."""

    def __init__(self, store: Store, bm25: BM25Params, active_ttl: float = float("inf"),
                 leases: WriterLeases | None = None) -> None:
        self.store = store
        self.bm25 = bm25
        self.leases = leases
        self._on_takeover: weakref.WeakMethod[Callable[[str], None]] | None = None
        self._held: dict[str, Lease] = {}
        self._lease_users: dict[str, int] = {}
        self._lease_dirty: dict[str, bool] = {}
        #: Taking or releasing a lease (re-entrant: a takeover's rollback writes under it).
        self._lease_guard = threading.RLock()
        self._locks: dict[str, threading.RLock] = {}
        self._doc_locks: dict[tuple[str, str], list[Any]] = {}
        self._guard = threading.Lock()
        # Active version per document, per library: read by every search, so cached and
        # invalidated by every manifest write made here. ``ttl`` bounds staleness when other
        # processes write the same store (Qdrant server with several replicas).
        self._active: dict[str, tuple[float, dict[str, int], tuple[str, int] | None]] = {}
        #: Full manifest reads (scrolls of every entry) made by active_versions.
        self.manifest_scrolls = 0
        self.active_ttl = active_ttl
        # The library record, read by every search (three times): cached as its payload,
        # dropped by every save made here, re-read after ``active_ttl`` (other processes).
        self._records: dict[str, tuple[float, dict[str, Any]]] = {}

    @property
    def on_takeover(self) -> Callable[[str], None] | None:
        """Called with a library's name when this replica takes over the lease of a writer that
        did not release it, inside the lock, before the write (the indexer's rollback). Held
        weakly: the indexer owns this object, and a cycle would keep an unclosed engine (and
        its unflushed store) alive past its last reference."""
        return self._on_takeover() if self._on_takeover is not None else None

    @on_takeover.setter
    def on_takeover(self, fn: Callable[[str], None] | None) -> None:
        self._on_takeover = weakref.WeakMethod(fn) if fn is not None else None  # type: ignore[arg-type]

    def _rlock(self, name: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(name, threading.RLock())

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the right to write ``name``: re-entrant on one thread, one thread at a time;
        across replicas the writer lease (:meth:`writing`). The lease first: no thread holds
        this lock while it waits to take or give back the lease (a takeover's rollback takes
        this lock while it holds the lease guard)."""
        with self.writing(name), self._rlock(name):
            yield

    @contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """Hold the writer lease of ``name`` (no-op without leases) for a write that takes
        :meth:`lock` only for its short steps: a document ingest renders, encodes and writes
        its pages under this and the document's :meth:`doc_lock`, so several documents of one
        library are written at once. The lease is shared by every thread of this process
        inside ``writing``: taken by the first, released by the last (as dirty when any of
        them failed). A replica that takes the lease re-reads the library record and manifest
        (another replica may have written them) and, after a holder that did not release it,
        rolls back first."""
        if self.leases is None:
            yield
            return
        with self._lease_guard:
            users = self._lease_users.get(name, 0)
            if users == 0:
                lease = self.leases.acquire(name)
                self._held[name] = lease
                self._lease_dirty[name] = False
                self._lease_users[name] = 1  # before the takeover: its own writes nest in this one
                try:
                    self._records.pop(name, None)
                    self._active.pop(name, None)
                    take_over = self.on_takeover
                    if lease.took_over and take_over is not None:
                        take_over(name)
                except BaseException:
                    del self._held[name], self._lease_users[name], self._lease_dirty[name]
                    self.leases.release(lease, clean=False)
                    raise
            else:
                self._lease_users[name] = users + 1
        clean = False
        try:
            yield
            clean = True
        finally:
            with self._lease_guard:
                if not clean:
                    self._lease_dirty[name] = True
                self._lease_users[name] -= 1
                if self._lease_users[name] == 0:
                    lease = self._held.pop(name)
                    dirty = self._lease_dirty.pop(name)
                    del self._lease_users[name]
                    # A write that failed may have left work half-done (its own cleanup may
                    # have failed too): released as dirty, the next holder rolls back as after
                    # a death.
                    self.leases.release(lease, clean=not dirty)

    @contextmanager
    def doc_lock(self, name: str, doc_id: str) -> Iterator[None]:
        """One writer per document of a library in this process (re-entrant): taken before
        :meth:`lock`, never after it."""
        key = (name, doc_id)
        with self._guard:
            entry = self._doc_locks.setdefault(key, [threading.RLock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    self._doc_locks.pop(key, None)

    def check_lease(self, name: str) -> None:
        """Raise :class:`~ragspine.errors.LeaseLostError` when this replica's lease of ``name``
        ran out or was taken over (no-op without leases)."""
        lease = self._held.get(name)
        if lease is not None and self.leases is not None:
            self.leases.check(lease)

    def lease_lost(self, name: str) -> bool:
        """Whether this replica's lease of ``name`` was taken over or ran out (by its own
        clock): a writer then writes nothing more, not even a cleanup."""
        lease = self._held.get(name)
        return lease is not None and self.leases is not None and self.leases.expired(lease)

    @property
    def leased(self) -> bool:
        return self.leases is not None

    def create(
        self,
        name: str,
        dense: tuple[DenseField, ...] = (),
        model_encoders: dict[str, dict[str, Any]] | None = None,
        layout: Layout | None = None,
    ) -> LibraryRecord:
        """A new library; ``dense`` are its model vector fields, ``model_encoders`` says
        which model (id, revision, dim, pooling) writes each of them, and ``layout`` how its
        collection is sharded, copied and kept on disk (default: the store's)."""
        check_library_name(name)
        layout = layout or Layout()
        encoders: dict[str, dict[str, Any]] = {**expected_encoders(self.bm25), **(model_encoders or {})}
        rec = LibraryRecord(name=name, created_at=time.time(), encoders=encoders, layout=layout.to_json())
        with self._rlock(name):  # no lease yet: it lives in the collection made here
            if self.store.has_collection(name):
                raise ConflictError(
                    f"library '{name}' already exists; delete it first or choose another name"
                )
            self.store.create_collection(name, layout.spec(dense))
            self.save(rec)
        return rec

    def save(self, rec: LibraryRecord) -> None:
        try:
            self.store.upsert(rec.name, [PointData(LIBRARY_POINT, rec.to_payload())])
        finally:
            self._records.pop(rec.name, None)

    def get(self, name: str) -> LibraryRecord:
        """The record (a new object each call: callers change it and ``save`` it)."""
        check_library_name(name)
        now = time.monotonic()
        cached = self._records.get(name)
        if cached is not None and now - cached[0] < self.active_ttl:
            return LibraryRecord.from_payload(cached[1])
        if not self.store.has_collection(name):
            raise LibraryNotFoundError(f"unknown library '{name}'")
        recs = self.store.retrieve(name, [LIBRARY_POINT])
        if not recs:
            raise LibraryNotFoundError(f"library '{name}' has no record; it was not created by ragspine")
        self._records[name] = (now, recs[0].payload)
        return LibraryRecord.from_payload(recs[0].payload)

    def open(self, name: str) -> LibraryRecord:
        """The record, after checking the library was built with the encoders configured now."""
        rec = self.get(name)
        check_restored(name, rec.restoring)
        check_format(name, rec.format_version)  # an older or newer layout is never read as this one
        want = expected_encoders(self.bm25)
        for fname, enc in want.items():
            have = rec.encoders.get(fname)
            if have != enc:
                raise ModelMismatchError(
                    f"library '{name}' field '{fname}' was indexed with {have}, but this server is "
                    f"configured for {enc}. Re-index it: create a new library and ingest the "
                    f"documents again (or restore the settings it was built with)."
                )
        return rec

    def names(self) -> list[str]:
        # Not every collection is a library: ragspine's own (the jobs, "_jobs") have names no
        # library may take.
        return [n for n in self.store.list_collections() if LIBRARY_NAME_RE.match(n)]

    def drop(self, name: str) -> None:
        check_library_name(name)
        with self.lock(name):
            try:
                self.store.drop_collection(name)
            finally:
                self._active.pop(name, None)
                self._records.pop(name, None)

    # -- manifest -----------------------------------------------------------------------------

    def doc_entry(self, name: str, doc_id: str) -> dict[str, Any] | None:
        recs = self.store.retrieve(name, [doc_point(doc_id)])
        return recs[0].payload if recs else None

    def _changed(self, name: str) -> None:
        """A manifest entry was written: drop the cached manifest and move the library's
        manifest clock on, so every other replica re-reads it at its next check (one point
        read, not a scroll of every entry, while nothing changes). Writers hold the lock."""
        self._active.pop(name, None)
        if self.active_ttl == float("inf"):
            return  # one process owns the store (embedded): nobody else reads the clock
        recs = self.store.retrieve(name, [MANIFEST_CLOCK])
        p = recs[0].payload if recs else {}
        # A clock made afresh gets a new epoch: a library dropped and created again under the
        # same name counts from 1 again, and must not match another replica's cached (epoch, seq).
        clock = {"kind": KIND_CLOCK, "epoch": p.get("epoch") or uuid.uuid4().hex, "seq": int(p.get("seq", 0)) + 1}
        self.store.upsert(name, [PointData(MANIFEST_CLOCK, clock)])

    def manifest_seq(self, name: str) -> tuple[str, int]:
        """The library's manifest clock: ``(epoch, manifest writes seen)``; ``("", 0)`` before
        the first write."""
        recs = self.store.retrieve(name, [MANIFEST_CLOCK])
        return (str(recs[0].payload.get("epoch", "")), int(recs[0].payload.get("seq", 0))) if recs else ("", 0)

    def put_doc_entry(self, name: str, entry: dict[str, Any]) -> None:
        entry = {**entry, "kind": KIND_DOC}
        try:
            self.store.upsert(name, [PointData(doc_point(entry["doc_id"]), entry)])
        finally:
            self._active.pop(name, None)
        self._changed(name)

    def commit_doc_entry(self, name: str, entry: dict[str, Any], staging_version: int) -> None:
        """Write ``entry`` (the commit of a replace) only if the stored entry still stages
        ``staging_version``: a writer whose lease was taken over finds it rolled back, and its
        commit is refused with :class:`~ragspine.errors.LeaseLostError`."""
        self.check_lease(name)
        entry = {**entry, "kind": KIND_DOC}
        try:
            ok = self.store.put_if(name, PointData(doc_point(entry["doc_id"]), entry),
                                   {"staging_version": staging_version, "kind": KIND_DOC})
        finally:
            self._active.pop(name, None)
        if ok:
            self._changed(name)
        else:
            lease = self._held.get(name)
            if lease is not None:
                lease.lost = True
            raise LeaseLostError(
                f"document '{entry['doc_id']}' of library '{name}' was not committed: its staging entry was "
                "rolled back by another writer (this replica's lease ran out). Retry the request"
            )

    def update_doc_entry(self, name: str, entry: dict[str, Any], expect: dict[str, Any]) -> bool:
        """Write ``entry`` only if the stored entry matches ``expect`` (``Store.put_if``);
        whether it was written."""
        entry = {**entry, "kind": KIND_DOC}
        try:
            ok = self.store.put_if(name, PointData(doc_point(entry["doc_id"]), entry), {**expect, "kind": KIND_DOC})
        finally:
            self._active.pop(name, None)
        if ok:
            self._changed(name)
        return ok

    def delete_doc_entry(self, name: str, doc_id: str) -> None:
        try:
            self.store.delete(name, Where(kind=KIND_DOC, doc_id=doc_id))
        finally:
            self._active.pop(name, None)
        self._changed(name)

    def invalidate(self, name: str) -> None:
        """Forget the cached manifest (this process's copy only)."""
        self._active.pop(name, None)

    def manifest_changed(self, name: str) -> None:
        """Entries were removed by a direct store write (a document delete): tell every replica."""
        self._changed(name)

    def active_versions(self, name: str) -> dict[str, int]:
        """``doc_id → active version`` of every committed document of the library. Cached;
        after ``active_ttl`` (other replicas write the same store) the manifest clock is read
        and the entries scrolled again only when it moved. While nothing changes the same dict
        comes back (the lexical index compares it by identity)."""
        cached = self._active.get(name)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.active_ttl:
            return cached[1]
        # Read the clock before the entries: a commit after this read moves it again.
        seq = self.manifest_seq(name) if self.active_ttl != float("inf") else None
        if cached is not None and seq is not None and cached[2] == seq:
            self._active[name] = (now, cached[1], seq)
            return cached[1]
        versions = {
            e["doc_id"]: int(e["active_version"]) for e in self.doc_entries(name) if e.get("active_version")
        }
        self.manifest_scrolls += 1
        self._active[name] = (now, versions, seq)
        return versions

    def doc_entries(self, name: str) -> list[dict[str, Any]]:
        recs = self.store.scroll(name, Where(kind=KIND_DOC))
        return sorted((r.payload for r in recs), key=lambda p: p["doc_id"])
