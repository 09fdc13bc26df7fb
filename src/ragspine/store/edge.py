"""Embedded backend: Qdrant Edge (``qdrant-edge-py``), the Rust engine in-process.

One Edge shard per library under ``<data_dir>/libraries/<name>/shard``. Measured on the
development machines it reopens in ~0.5 s and runs pooled MaxSim 3–8x faster than
qdrant-client's pure-Python local mode, which is why it is the default (docs/measured.md).

A multivector field of datatype ``int8`` is not in the shard: it is a
:class:`~ragspine.store.columns.MultivectorColumn` under ``<name>/columns/<field>.sqlite``
(:class:`~ragspine.store._edge_columns.EdgeColumns`), written before the shard on every upsert
and deleted with the shard's points. A search on it asks the shard for the first stage's
candidates (filters included) and scores them in numpy.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from ragspine.errors import LibraryNotFoundError, StoreError
from ragspine.scoring.bm25 import SparseVector
from ragspine.store._edge_qdrant import (
    RESCORE,
    compile_where,
    ensure_indexes,
    payload_selector,
    shard_config,
    stage_params,
)
from ragspine.store.base import (
    DEFAULT_PREFETCH_LIMIT,
    FDE_OVERSAMPLING,
    TIE_OVERFETCH,
    CollectionSpec,
    DenseField,
    Fields,
    Hit,
    PointData,
    Record,
    Where,
    check_addable,
    check_query_multivector,
    check_query_vector,
    sort_hits,
    stored_vector,
)
from ragspine.store._edge_columns import EdgeColumns
from ragspine.store.columns import MultivectorColumn
from ragspine.store.datadir import lock_data_dir

logger = logging.getLogger(__name__)

_SCROLL_PAGE = 1000


class EdgeStore:
    """:class:`~ragspine.store.base.Store` on Qdrant Edge shards."""

    backend = "embedded"

    def __init__(self, data_dir: Path, search_threads: int = 0, exact_device: str = "numpy") -> None:
        """``exact_device``: where int8 columns are scored (``RAGSPINE_EXACT_DEVICE``: ``numpy``,
        ``auto`` or a torch device); a device copy of each column is built in the background."""
        self.root = Path(data_dir) / "libraries"
        self.root.mkdir(parents=True, exist_ok=True)
        self._dir_lock = lock_data_dir(self.root)
        self._search_threads = search_threads or None
        self._shards: dict[str, qe.EdgeShard] = {}
        #: Dense vector field names per library, read once from the shard's config.
        self._dense_names: dict[str, frozenset[str]] = {}
        #: int8 multivector fields per library (store.columns), opened with the shard. Per
        #: library with columns, an upsert (column, then shard) and optimize's removal of column
        #: rows the shard lacks never interleave (it would drop an upsert's vectors).
        self._columns = EdgeColumns(self.root, exact_device)
        self._lock = threading.RLock()

    # -- collections --------------------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        return self.root / name / "shard"

    def create_collection(self, name: str, spec: CollectionSpec) -> None:
        with self._lock:
            d = self._dir(name)
            if d.exists():
                raise StoreError(f"library '{name}' already exists in {d.parent}")
            d.mkdir(parents=True)
            cols: dict[str, MultivectorColumn] = {}
            try:
                cols = self._columns.create(name, spec)
                shard = qe.EdgeShard.create(str(d), shard_config(spec, self._search_threads))
                ensure_indexes(shard)
                self._shards[name] = shard
                self._columns.register(name, cols)
            except Exception as exc:
                for c in cols.values():
                    c.close()
                shutil.rmtree(d.parent, ignore_errors=True)
                raise StoreError(f"could not create library '{name}': {exc}") from exc

    def _cols(self, name: str) -> dict[str, MultivectorColumn]:
        """The library's int8 multivector columns (empty for a library without any)."""
        self._shard(name)  # LibraryNotFoundError / in use, as for any access
        return self._columns.get(name)

    def _shard(self, name: str) -> qe.EdgeShard:
        shard = self._shards.get(name)
        if shard is not None:
            return shard
        with self._lock:
            shard = self._shards.get(name)
            if shard is None:
                d = self._dir(name)
                if not d.exists():
                    raise LibraryNotFoundError(f"unknown library '{name}'")
                try:
                    shard = qe.EdgeShard.load(str(d))
                    ensure_indexes(shard)
                except Exception as exc:
                    if "WouldBlock" in str(exc) or "lock" in str(exc).lower():
                        raise StoreError(
                            f"library '{name}' is in use by another process (a running "
                            "'ragspine serve'?); stop it, or use the REST API of that server"
                        ) from exc
                    raise StoreError(f"could not open library '{name}': {exc}") from exc
                self._shards[name] = shard
            return shard

    def drop_collection(self, name: str) -> None:
        with self._lock:
            self._dense_names.pop(name, None)
            self._columns.drop(name)
            shard = self._shards.pop(name, None)
            if shard is not None:
                shard.close()
            d = self.root / name
            if not (d / "shard").exists():
                raise LibraryNotFoundError(f"unknown library '{name}'")
            shutil.rmtree(d)

    def has_collection(self, name: str) -> bool:
        return name in self._shards or self._dir(name).exists()

    def list_collections(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/shard") if p.is_dir())

    # -- points -------------------------------------------------------------------------------

    @staticmethod
    def _vector(p: PointData) -> dict[str, Any]:
        vec: dict[str, Any] = {n: qe.SparseVector(v.indices, v.values) for n, v in p.sparse.items()}
        vec.update(p.dense)
        return vec

    def upsert(self, name: str, points: Sequence[PointData]) -> None:
        if not points:
            return
        shard = self._shard(name)
        cols = self._cols(name)
        if not cols:
            shard.update(qe.UpdateOperation.upsert_points([qe.Point(p.id, self._vector(p), p.payload) for p in points]))
            return
        with self._columns.lock(name):
            # Columns first: a point the shard has always has its vectors; vectors whose shard
            # write failed are found by no search and removed by optimize().
            for fname, col in cols.items():
                col.put([(p.id, p.dense[fname]) for p in points if fname in p.dense])
            pts = [qe.Point(p.id, self._vector(PointData(p.id, p.payload, p.sparse,
                                                         {k: v for k, v in p.dense.items() if k not in cols})),
                            p.payload) for p in points]
            shard.update(qe.UpdateOperation.upsert_points(pts))

    def update_sparse(self, name: str, vector: str, items: Sequence[tuple[str, SparseVector]]) -> None:
        if not items:
            return
        pvs = [qe.PointVectors(pid, {vector: qe.SparseVector(v.indices, v.values)}) for pid, v in items]
        self._shard(name).update(qe.UpdateOperation.update_vectors(pvs))

    def add_dense_field(self, name: str, field: DenseField) -> None:
        check_addable(field)
        with self._columns.lock(name):
            if field.name in self.dense_fields(name):
                return
            self._shard(name).update(qe.UpdateOperation.create_dense_vector(field.name, field.size, qe.Distance.Cosine))
            self._shard(name).flush()  # edge_config.json now lists it: what dense_fields reads
            self._dense_names.pop(name, None)

    def update_dense(self, name: str, field: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        if not items:
            return
        if field not in self.dense_fields(name):
            raise ValueError(f"library '{name}' has no dense vector field '{field}'")
        pvs = [qe.PointVectors(pid, {field: np.asarray(v, dtype=np.float32).tolist()}) for pid, v in items]
        self._shard(name).update(qe.UpdateOperation.update_vectors(pvs))

    def set_payload(self, name: str, where: Where, payload: dict[str, Any]) -> None:
        flt = compile_where(where)
        if flt is None:
            raise ValueError("set_payload needs a filter")
        self._shard(name).update(qe.UpdateOperation.set_payload_by_filter(flt, payload))

    def delete(self, name: str, where: Where) -> None:
        flt = compile_where(where)
        if flt is None:
            raise ValueError("refusing to delete with an empty filter")
        cols = self._cols(name)
        ids = [r.id for r in self.scroll(name, where, fields=[])] if cols else []
        self._shard(name).update(qe.UpdateOperation.delete_points_by_filter(flt))
        for col in cols.values():
            col.delete(ids)

    def put_if(self, name: str, point: PointData, expect: Mapping[str, str | int] | None) -> bool:
        """One process owns an Edge shard, so the check and the write are made one under this
        store's lock (every ``put_if`` of the process takes it)."""
        if point.dense or point.sparse:
            raise ValueError("put_if writes payload-only points")
        with self._lock:
            have = self.retrieve(name, [point.id])
            if expect is None and have:
                return False
            if expect is not None and (not have or any(have[0].payload.get(k) != v for k, v in expect.items())):
                return False
            self.upsert(name, [point])
            return True

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        if ids:
            self._shard(name).update(qe.UpdateOperation.delete_points(list(ids)))
            for col in self._cols(name).values():
                col.delete(ids)

    def retrieve(self, name: str, ids: Sequence[str], *, fields: Fields = None) -> list[Record]:
        recs = self._shard(name).retrieve(list(ids), with_payload=payload_selector(fields), with_vector=False)
        return [Record(str(r.id), dict(r.payload or {})) for r in recs]

    def dense_fields(self, name: str) -> frozenset[str]:
        """Names of the dense vector fields of a library (int8 columns included; a restore checks
        a native copy's against its record), from the config the shard was created
        with (``edge_config.json``, which ``EdgeShard.load`` reads back). The binding exposes no
        config, and only rejects an unknown vector name when a requested point exists."""
        names = self._dense_names.get(name)
        if names is None:
            self._shard(name)  # LibraryNotFoundError for an unknown library
            try:
                cfg = json.loads((self._dir(name) / "edge_config.json").read_text(encoding="utf-8"))
                names = frozenset(cfg.get("vectors") or {}) | frozenset(self._cols(name))
            except (OSError, ValueError) as exc:
                raise StoreError(f"could not read the vector config of library '{name}': {exc}") from exc
            self._dense_names[name] = names
        return names

    def retrieve_vectors(self, name: str, ids: Sequence[str], field: str) -> dict[str, np.ndarray]:
        shard = self._shard(name)
        if field not in self.dense_fields(name):
            raise ValueError(f"library '{name}' has no dense vector field '{field}'")
        if not ids:
            return {}
        col = self._cols(name).get(field)
        if col is not None:
            return col.get(ids)
        # Reads the stored originals: a quantized field keeps them beside the quantized copy.
        recs = shard.retrieve(list(ids), with_payload=False, with_vector=[field])
        out: dict[str, np.ndarray] = {}
        for r in recs:
            v = r.vector.get(field) if isinstance(r.vector, dict) else None
            if v is not None:
                out[str(r.id)] = stored_vector(field, v)
        return out

    def scroll(
        self, name: str, where: Where, limit: int | None = None, *, fields: Fields = None
    ) -> list[Record]:
        shard = self._shard(name)
        flt = compile_where(where)
        with_payload = payload_selector(fields)
        out: list[Record] = []
        offset = None
        while True:
            page = _SCROLL_PAGE if limit is None else min(_SCROLL_PAGE, limit - len(out))
            recs, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=page, filter=flt, with_payload=with_payload)
            )
            out.extend(Record(str(r.id), dict(r.payload or {})) for r in recs)
            if offset is None or (limit is not None and len(out) >= limit):
                return out

    def count(self, name: str, where: Where) -> int:
        return self._shard(name).count(qe.CountRequest(filter=compile_where(where), exact=True))

    def scroll_points(self, name: str, where: Where, offset: Any = None, limit: int = 256
                      ) -> tuple[list[PointData], Any]:
        recs, nxt = self._shard(name).scroll(qe.ScrollRequest(
            offset=offset, limit=limit, filter=compile_where(where), with_payload=True, with_vector=True))
        ids = [str(r.id) for r in recs]
        columns = {f: col.get(ids) for f, col in self._cols(name).items()}
        out: list[PointData] = []
        for pid, r in zip(ids, recs, strict=True):
            sparse: dict[str, SparseVector] = {}
            dense: dict[str, Any] = {}
            for k, v in (r.vector or {}).items() if isinstance(r.vector, dict) else ():
                if hasattr(v, "indices"):
                    sparse[k] = SparseVector(list(v.indices), list(v.values))
                else:
                    dense[k] = stored_vector(k, v)
            for f, vecs in columns.items():
                if pid in vecs:
                    dense[f] = vecs[pid]
            out.append(PointData(pid, dict(r.payload or {}), sparse, dense))
        return out, nxt

    def search_sparse(
        self,
        name: str,
        vector: str,
        query: SparseVector,
        where: Where,
        limit: int,
        *,
        fields: Fields = None,
    ) -> list[Hit]:
        with_payload = payload_selector(fields)
        if not query.indices:
            return []
        req = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(qe.SparseVector(query.indices, query.values), using=vector),
            filter=compile_where(where),
            with_payload=with_payload,
        )
        return self._hits(name, req)

    def search_dense(
        self,
        name: str,
        field: str,
        vector: Sequence[float],
        where: Where,
        limit: int,
        *,
        fields: Fields = None,
        exact: bool = False,
    ) -> list[Hit]:
        fetch = limit + TIE_OVERFETCH
        vec = [float(x) for x in vector]
        if not vec:
            raise ValueError("dense query vector is empty")
        req = qe.QueryRequest(
            limit=fetch,
            query=qe.Query.Nearest(vec, using=field),
            filter=compile_where(where),
            with_payload=payload_selector(fields),
            params=qe.SearchParams(exact=True) if exact else RESCORE,
        )
        return sort_hits(self._hits(name, req), limit)

    def search_multivector(
        self,
        name: str,
        query: Sequence[Sequence[float]],
        where: Where,
        limit: int,
        *,
        full_field: str,
        pooled_field: str | None = None,
        prefetch_query: Sequence[float] | None = None,
        prefetch_limit: int = DEFAULT_PREFETCH_LIMIT,
        hnsw_ef: int | None = None,
        oversampling: float | None = None,
        fields: Fields = None,
        prefetch_oversampling: float | None = None,
    ) -> list[Hit]:
        q = check_query_multivector(query)  # (nq, d)
        fetch = limit + TIE_OVERFETCH
        # The single-vector first stage's oversampling (None: a pooled multivector, no copy).
        pre_over = (prefetch_oversampling or FDE_OVERSAMPLING) if prefetch_query is not None else None
        col = self._cols(name).get(full_field)
        if col is not None:
            # Every candidate is scored exactly here and ties are broken by id among them, so
            # the first stage hands over prefetch_limit pages (at least limit), not the
            # TIE_OVERFETCH extra a store-side rescoring needs (16% less work at 100).
            return self._search_column(name, col, q, where, limit, pooled_field=pooled_field,
                                       prefetch_query=prefetch_query, prefetch_limit=max(prefetch_limit, limit),
                                       hnsw_ef=hnsw_ef, fields=fields, pre_over=pre_over)
        full_params = stage_params(oversampling)
        flt = compile_where(where)
        with_payload = payload_selector(fields)
        if pooled_field is None:
            req = qe.QueryRequest(
                limit=fetch,
                query=qe.Query.Nearest(q, using=full_field),
                filter=flt,
                with_payload=with_payload,
                params=full_params,
            )
        else:
            pre = qe.Prefetch(
                limit=max(prefetch_limit, fetch),
                query=qe.Query.Nearest(check_query_vector(prefetch_query) if prefetch_query is not None else q,
                                       using=pooled_field),
                filter=flt,
                params=qe.SearchParams(
                    hnsw_ef=hnsw_ef,
                    quantization=qe.QuantizationSearchParams(
                        rescore=True, oversampling=pre_over),
                ),
            )
            req = qe.QueryRequest(
                limit=fetch,
                prefetches=[pre],
                query=qe.Query.Nearest(q, using=full_field),
                filter=flt,
                with_payload=with_payload,
                params=full_params,
            )
        return sort_hits(self._hits(name, req), limit)

    def _search_column(
        self,
        name: str,
        col: MultivectorColumn,
        q: list[list[float]],
        where: Where,
        limit: int,
        *,
        pooled_field: str | None,
        prefetch_query: Sequence[float] | None,
        prefetch_limit: int,
        hnsw_ef: int | None,
        fields: Fields,
        pre_over: float | None,
    ) -> list[Hit]:
        """MaxSim on an int8 column: the shard's first stage picks the candidates (with the
        filter), the column scores them exactly; without a first stage every page the filter
        lets through is scored."""
        if pooled_field is None:
            cands = [Hit(r.id, 0.0, r.payload) for r in self.scroll(name, where, fields=fields)]
        else:
            pre = check_query_vector(prefetch_query) if prefetch_query is not None else q
            cands = self._hits(name, qe.QueryRequest(
                limit=prefetch_limit,
                query=qe.Query.Nearest(pre, using=pooled_field),
                filter=compile_where(where),
                with_payload=payload_selector(fields),
                params=qe.SearchParams(hnsw_ef=hnsw_ef, quantization=qe.QuantizationSearchParams(
                    rescore=True, oversampling=pre_over)),
            ))
        scores = col.maxsim(np.asarray(q, dtype=np.float32), [h.id for h in cands])
        # A candidate without vectors in the column (a point written without this field) is
        # not a visual match, as in the shard's MaxSim.
        return sort_hits([Hit(h.id, scores[h.id], h.payload) for h in cands if h.id in scores], limit)

    def _hits(self, name: str, req: qe.QueryRequest) -> list[Hit]:
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in self._shard(name).query(req)]

    def optimize(self, name: str) -> None:
        """Edge 0.9 runs no background optimizer: HNSW graphs and quantized copies are built,
        and segments with deleted points vacuumed (see ``_VACUUM_DELETED_FRACTION``), only
        here. Call it after bulk ingest and after deletes."""
        shard = self._shard(name)
        shard.optimize()
        shard.flush()
        cols = self._cols(name)
        if cols:
            with self._columns.lock(name):
                live = [r.id for r in self.scroll(name, Where(), fields=[])]
                for col in cols.values():
                    if stale := col.keep_only(live):
                        logger.info("library %s: removed %d orphaned page vectors", name, stale)

    def flush(self, name: str) -> None:
        self._shard(name).flush()

    def close(self) -> None:
        with self._lock:
            try:
                for shard in self._shards.values():
                    try:
                        shard.flush()
                        shard.close()
                    except Exception:  # best effort: every commit point already flushed (no WAL)
                        logger.exception("closing an Edge shard failed")
                self._shards.clear()
                self._columns.close()
            finally:
                if self._dir_lock is not None:  # the data dir is given back, whatever failed
                    self._dir_lock.close()
                    self._dir_lock = None
