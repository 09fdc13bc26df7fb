"""The int8 multivector columns of an embedded store's libraries, beside their Edge shards.

A multivector field of datatype ``int8`` is not in the shard: it is a
:class:`~ragspine.store.columns.MultivectorColumn` under ``<library>/columns/<field>.sqlite``.
:class:`EdgeColumns` opens them with their library, gives each a device copy when the store
scores on a GPU (:class:`~ragspine.store.resident.ResidentColumn`, built in the background), and
holds the per-library lock that keeps an upsert (column, then shard) from interleaving with the
removal of rows the shard lacks.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ragspine.store.base import CollectionSpec
from ragspine.store.columns import MultivectorColumn
from ragspine.store.resident import ResidentColumn, resolve_device


class EdgeColumns:
    """``get(library)``: the library's int8 columns by field name (empty for a library without
    any), opened on first use under ``root/<library>/columns``."""

    def __init__(self, root: Path, exact_device: str = "numpy") -> None:
        self.root = root
        # Resolved at the first int8 column (a library with page vectors): "auto" asks torch
        # whether a GPU is there, and a store of text libraries never needs torch (~400 MB of
        # mapped libraries with the GPU extra installed).
        self._exact_device = exact_device
        self._device_resolved = False
        self._device: str | None = None
        self._columns: dict[str, dict[str, MultivectorColumn]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.RLock()

    def _dir(self, name: str) -> Path:
        return self.root / name / "columns"

    def create(self, name: str, spec: CollectionSpec) -> dict[str, MultivectorColumn]:
        """The columns of a new library's int8 fields (closed again by the caller on failure)."""
        cols: dict[str, MultivectorColumn] = {}
        try:
            for f in spec.dense:
                if f.datatype == "int8":
                    cols[f.name] = MultivectorColumn(self._dir(name) / f"{f.name}.sqlite", dim=f.size)
                    self._make_resident(cols[f.name])
        except BaseException:
            for c in cols.values():
                c.close()
            raise
        return cols

    def register(self, name: str, cols: dict[str, MultivectorColumn]) -> None:
        with self._lock:
            self._columns[name] = cols

    def get(self, name: str) -> dict[str, MultivectorColumn]:
        """The library's columns; call after its shard opened (that check names a missing library)."""
        cols = self._columns.get(name)
        if cols is not None:
            return cols
        with self._lock:
            cols = self._columns.get(name)
            if cols is None:
                cols = {p.stem: MultivectorColumn(p) for p in sorted(self._dir(name).glob("*.sqlite"))}
                for col in cols.values():
                    self._make_resident(col)
                self._columns[name] = cols
            return cols

    def _make_resident(self, col: MultivectorColumn) -> None:
        if not self._device_resolved:
            self._device = resolve_device(self._exact_device)
            self._device_resolved = True
        if self._device is not None:
            res = ResidentColumn(col, self._device)
            col.attach(res)
            res.start()

    def lock(self, name: str) -> threading.Lock:
        """The library's write lock for columns and shard together."""
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def drop(self, name: str) -> None:
        """Close a library's columns (its folder is removed with the library's)."""
        with self._lock:
            for c in self._columns.pop(name, {}).values():
                c.close()

    def close(self) -> None:
        with self._lock:
            for cols in self._columns.values():
                for c in cols.values():
                    c.close()
            self._columns.clear()
