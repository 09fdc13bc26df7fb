"""The relation graph kept in the library's own Qdrant collection: the backend for several
replicas (cluster mode), where a SQLite file on a shared network volume is not safe.

The same contributions-per-source model and in-memory ``networkx`` graph as
:class:`~ragspine.graph._networkx.NetworkXGraphStore`, persisted as points (payload only):

- ``kind=graph_src``: one row per source *per generation* that wrote it:
  ``{key, gen, txn, data}`` (``data`` the contribution's JSON, ``txn`` the writing
  transaction); a removed source leaves a tombstone row ``{hash, gen, txn}`` naming it by
  digest only (a deleted document's id does not stay).
- ``kind=graph_meta``: ``{epoch, gen, txns}``, the last committed generation and which
  transaction committed each recent one: rows of any other transaction (a writer that lost its
  lease, landing late) are not read, and the next commits sweep them.

A write (:meth:`locked`) holds the library's writer lease (``Libraries.lock``: one writer
across replicas), deletes what a failed earlier write left above the committed generation,
writes its rows at ``gen + 1`` under new point ids (nothing committed is overwritten), then
commits by writing the meta point; only then are the rows it superseded deleted. A write that
fails before its commit changes nothing anyone reads. A reader reads the meta point and applies
only the rows between the generation it holds and the committed one (a full load when the
epoch changed: library deleted and created again).

Why by hand: neither Qdrant nor networkx keeps a versioned graph; this is the SQLite backend's
generation log expressed as points, so both backends answer identically (one test suite).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragspine.catalog import Libraries, point_id
from ragspine.errors import LeaseLostError, LibraryNotFoundError
from ragspine.graph._model import Contribution
from ragspine.graph._memory import Memory, gc_paused, key_hash
from ragspine.graph._networkx import NetworkXGraphStore, _digest, _Lib
from ragspine.store.base import PointData, Store, Where

logger = logging.getLogger(__name__)

KIND_SRC = "graph_src"
KIND_META = "graph_meta"
META_POINT = point_id("graph-meta")


#: Generations whose writing transaction the meta point remembers (see _accepted).
TXN_HISTORY = 256
#: Generations back from its own that a commit sweeps for rows of writes that never committed.
SWEEP_BACK = 8


def _row_id(key_or_hash: str, gen: int, txn: str, tomb: bool = False) -> str:
    return point_id("graph-tomb" if tomb else "graph-src", key_or_hash, gen, txn)


def _accepted(row: Mapping[str, Any], txns: Mapping[str, str]) -> bool:
    """A row counts if the transaction that committed its generation wrote it: a writer that
    lost its lease may still land rows at a generation another writer committed, and those are
    not part of the graph. (Generations older than the history were swept when committed.)"""
    want = txns.get(str(row["gen"]))
    return want is None or row.get("txn") == want


class StoredGraphStore(NetworkXGraphStore):
    """Graphs of many libraries, each in its library's collection (see the module docstring)."""

    def __init__(self, store: Store, libraries: Libraries) -> None:
        # Nothing is kept in files: a root no code path may write to (it would fail loudly).
        super().__init__(Path("/nonexistent/ragspine-graph-in-store"))
        self.store = store
        self.libraries = libraries

    # -- reading the committed state ---------------------------------------------------------

    def _meta(self, library: str) -> dict[str, Any] | None:
        try:
            recs = self.store.retrieve(library, [META_POINT])
        except LibraryNotFoundError:
            return None
        return recs[0].payload if recs else None

    @staticmethod
    def _rows(lib: _Lib) -> dict[str, str]:
        rows: dict[str, str] = getattr(lib, "rows", None) or {}
        lib.rows = rows  # type: ignore[attr-defined]  # source key -> point id of its current row
        return rows

    def _catch_up_store(self, library: str, lib: _Lib) -> None:
        meta = self._meta(library)
        if meta is None:
            if lib.mem is None or lib.epoch is not None:
                lib.mem, lib.epoch, lib.gen = Memory(), None, 0
                self._rows(lib).clear()
            return
        epoch, gen = meta.get("epoch"), int(meta.get("gen", 0))
        if lib.mem is not None and epoch == lib.epoch and gen == lib.gen:
            return
        txns = meta.get("txns") or {}
        full = lib.mem is None or epoch != lib.epoch or gen < lib.gen
        where = Where(kind=KIND_SRC, gen_upto=gen, gen_above=None if full else lib.gen)
        recs = sorted((r for r in self.store.scroll(library, where) if _accepted(r.payload, txns)),
                      key=lambda r: (int(r.payload["gen"]), r.id))
        mem = Memory() if full else lib.mem
        rows = {} if full else dict(self._rows(lib))
        gens: dict[str, int] = {}  # source key -> generation of its current row
        assert mem is not None
        with gc_paused():
            for r in recs:  # in generation order: a later row of a key wins
                p = r.payload
                if p.get("data") is not None:
                    data = p["data"]
                    mem.apply(p["key"], Contribution.from_json(json.loads(data)), _digest(data))
                    rows[p["key"]], gens[p["key"]] = r.id, int(p["gen"])
                else:
                    key = mem.hashes.get(p["hash"])
                    if key is not None and gens.get(key, -1) < int(p["gen"]):
                        mem.apply(key, None)
                        rows.pop(key, None)
        lib.mem, lib.epoch, lib.gen = mem, epoch, gen
        lib.txns = dict(txns)  # type: ignore[attr-defined]
        lib.rows = rows  # type: ignore[attr-defined]

    def _mem(self, lib: _Lib) -> Memory:
        if lib.txn_depth:
            assert lib.mem is not None
            return lib.mem
        self._catch_up_store(lib.folder_name, lib)  # type: ignore[attr-defined]
        assert lib.mem is not None
        return lib.mem

    def _lib(self, library: str) -> _Lib:
        lib = super()._lib(library)
        lib.folder_name = library  # type: ignore[attr-defined]
        return lib

    # -- writes ---------------------------------------------------------------------------------

    @contextmanager
    def locked(self, library: str) -> Iterator[None]:
        lib = self._lib(library)
        with self.libraries.lock(library), lib.lock:
            if lib.txn_depth:  # nested in this thread's write: part of it
                with self._nested(lib):
                    yield
                return
            self._catch_up_store(library, lib)
            if lib.epoch is None:  # the library's first graph write
                lib.epoch = uuid.uuid4().hex
            # A write that failed before its commit left rows above the committed generation.
            self.store.delete(library, Where(kind=KIND_SRC, gen_above=lib.gen))
            lib.txn_depth, lib.txn_gen = 1, None
            lib.txn_id = uuid.uuid4().hex[:16]  # type: ignore[attr-defined]
            lib.txn_old = {}  # type: ignore[attr-defined]  # row ids this write supersedes
            lib.txn_rows = {}  # type: ignore[attr-defined]  # source key -> the row this write put
            first = self._meta(library) is None
            try:
                yield
                if lib.txn_gen is None and first:  # nothing to write, but the graph now exists
                    self.store.put_if(library, PointData(META_POINT, {
                        "kind": KIND_META, "epoch": lib.epoch, "gen": lib.gen, "txns": {}}), None)
                if lib.txn_gen is not None:
                    self._commit(library, lib, first)
            except BaseException:
                lib.mem = None  # memory holds part of the failed write: reload it
                self._rows(lib).clear()
                raise
            finally:
                lib.txn_depth, lib.txn_gen = 0, None

    def _commit(self, library: str, lib: _Lib, first: bool) -> None:
        assert lib.txn_gen is not None
        gen, txn = lib.txn_gen, lib.txn_id  # type: ignore[attr-defined]
        self.libraries.check_lease(library)
        txns = {k: v for k, v in (getattr(lib, "txns", None) or {}).items() if int(k) > gen - TXN_HISTORY}
        txns[str(gen)] = txn
        meta = PointData(META_POINT, {"kind": KIND_META, "epoch": lib.epoch, "gen": gen, "txns": txns})
        # Conditional on the generation this write started from: a writer that lost its lease
        # cannot commit over the next holder's.
        expect = None if first else {"epoch": str(lib.epoch), "gen": lib.gen}
        if not self.store.put_if(library, meta, expect):
            raise LeaseLostError(f"the graph of library '{library}' was written by another replica while "
                                 "this write ran; retry it")
        lib.gen = gen
        lib.txns = txns  # type: ignore[attr-defined]
        # What this write superseded, and rows of writes that never committed at the last few
        # generations (a writer out of its lease may land them after the holder cleaned up).
        stale = list(lib.txn_old)  # type: ignore[attr-defined]
        recent = self.store.scroll(library, Where(kind=KIND_SRC, gen_above=gen - SWEEP_BACK, gen_upto=gen),
                                   fields=["gen", "txn"])
        stale += [r.id for r in recent if not _accepted(r.payload, txns)]
        if stale:
            self.store.delete_ids(library, stale)

    def exists(self, library: str) -> bool:
        return self._meta(library) is not None

    def replace_sources(self, library: str, changes: Mapping[str, Contribution | None]) -> None:
        lib = self._lib(library)
        with self.locked(library), gc_paused():
            mem = lib.mem
            assert mem is not None
            rows = self._rows(lib)
            old: dict[str, None] = lib.txn_old  # type: ignore[attr-defined]
            written: dict[str, str] = lib.txn_rows  # type: ignore[attr-defined]
            points: list[PointData] = []
            replaced: list[str] = []  # rows this same write put before: never committed, go now
            for key, new, data, digest in self._changes(lib, changes):
                assert lib.txn_gen is not None
                gen, txn = lib.txn_gen, lib.txn_id  # type: ignore[attr-defined]
                committed_row = rows.get(key)
                if committed_row is not None and committed_row not in written.values():
                    old[committed_row] = None
                if key in written:  # a second change of this key in one write: only the last counts
                    replaced.append(written.pop(key))
                if data is None:
                    rid = _row_id(key_hash(key), gen, txn, tomb=True)
                    points.append(PointData(rid, {"kind": KIND_SRC, "hash": key_hash(key), "gen": gen, "txn": txn,
                                                  "data": None}))
                    written[key] = rid
                    rows.pop(key, None)
                else:
                    rid = _row_id(key, gen, txn)
                    points.append(PointData(rid, {"kind": KIND_SRC, "key": key, "gen": gen, "txn": txn,
                                                  "data": data}))
                    written[key] = rid
                    rows[key] = rid
                mem.apply(key, new, digest)
            self.libraries.check_lease(library)
            fresh = {p.id for p in points}
            gone = [r for r in replaced if r not in fresh]
            if gone:
                self.store.delete_ids(library, gone)
            for i in range(0, len(points), 256):
                self.store.upsert(library, points[i : i + 256])

    def drop(self, library: str) -> None:
        """The points went with the library's collection; forget the memory."""
        lib = self._lib(library)
        with lib.lock:
            lib.mem, lib.epoch, lib.gen = None, None, 0
            self._rows(lib).clear()

    def close(self) -> None:
        with self._guard:
            libs = list(self._libs.values())
        for lib in libs:
            with lib.lock:
                lib.mem = None

    def contribution(self, library: str, key: str) -> Contribution | None:
        lib = self._lib(library)
        with lib.lock:
            if key not in self._mem(lib).sources:
                return None
            rid = self._rows(lib).get(key)
        if rid is None:
            return None
        recs = self.store.retrieve(library, [rid])
        return Contribution.from_json(json.loads(recs[0].payload["data"])) if recs else None
