"""Qdrant server or cluster backend, through ``qdrant-client``.

Collections are named ``ragspine__<library>``; sharding and replication are the cluster's
(set ``RAGSPINE_QDRANT_URL``). Tests run the same behavioural suite against
``QdrantClient(":memory:")``, the client's in-process double of the server API.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ragspine.errors import LibraryNotFoundError, StoreError
from ragspine.scoring.bm25 import SparseVector
from ragspine.store._server_qdrant import (
    RESCORE,
    compile_where,
    hnsw_config,
    payload_selector,
    quantization_config,
    scored_hits,
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

PREFIX = "ragspine__"
_SCROLL_PAGE = 1000


#: The first Qdrant server version with conditional upserts (``update_filter``, ``update_mode``).
MIN_SERVER_FOR_CONDITIONAL = (1, 17)
#: The payload key of :meth:`ServerStore.put_if`'s write nonce; never handed to callers.
_NONCE = "_put"


def _clean(payload: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(payload or {})
    out.pop(_NONCE, None)
    return out


def _missing(exc: Exception) -> bool:
    """Does ``exc`` say the collection does not exist (a server's 404, the double's ValueError)?"""
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    return isinstance(exc, ValueError) and "not found" in str(exc).lower()


class _Api:
    """The client's methods with its errors said in ragspine's terms: a collection that is gone
    (dropped by another replica since this one last saw it) is :class:`LibraryNotFoundError`,
    a server that does not answer is :class:`StoreError`. What lets :class:`ServerStore` skip
    the ``collection_exists`` round trip it used to make before every call."""

    def __init__(self, client: QdrantClient, forget: Callable[[str], None]) -> None:
        self._client = client
        self._forget = forget

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._client, attr)

        def call(*args: Any, **kw: Any) -> Any:
            try:
                return fn(*args, **kw)
            except ResponseHandlingException as exc:
                raise StoreError(f"Qdrant server unreachable: {exc}") from exc
            except Exception as exc:
                coll = args[0] if args and isinstance(args[0], str) else kw.get("collection_name")
                if isinstance(coll, str) and coll.startswith(PREFIX) and _missing(exc):
                    self._forget(coll)
                    raise LibraryNotFoundError(f"unknown library '{coll[len(PREFIX):]}'") from exc
                raise

        return call


class ServerStore:
    """:class:`~ragspine.store.base.Store` on a Qdrant server, cluster, or in-memory double."""

    backend = "server"

    def __init__(self, client: QdrantClient) -> None:
        self.client = client
        #: Collections seen to exist: asked once per process, not before every call. One
        #: dropped elsewhere since answers its calls with a not-found, which ``_api`` turns
        #: into LibraryNotFoundError (and forgets it).
        self._known: set[str] = set()
        self._known_lock = threading.Lock()
        self._api = _Api(client, self._forget)
        self._vector_names: dict[str, frozenset[str]] = {}
        self._conditional_ok = False
        #: Calls made to Qdrant's ``collection_exists`` (the per-call overhead this removes).
        self.existence_checks = 0

    def _forget(self, collection: str) -> None:
        with self._known_lock:
            self._known.discard(collection)
            self._vector_names.pop(collection, None)

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None) -> "ServerStore":
        if url == ":memory:":
            return cls(QdrantClient(":memory:"))
        return cls(QdrantClient(url=url, api_key=api_key, timeout=30))

    @staticmethod
    def _c(name: str) -> str:
        return PREFIX + name

    def _exists(self, c: str) -> bool:
        self.existence_checks += 1
        try:
            return bool(self.client.collection_exists(c))
        except Exception as exc:
            raise StoreError(f"Qdrant server unreachable: {exc}") from exc

    def _check(self, name: str) -> str:
        c = self._c(name)
        if c in self._known:
            return c
        if not self._exists(c):
            raise LibraryNotFoundError(f"unknown library '{name}'")
        with self._known_lock:
            self._known.add(c)
        return c

    def create_collection(self, name: str, spec: CollectionSpec) -> None:
        c = self._c(name)
        if self._exists(c):
            raise StoreError(f"library '{name}' already exists on the Qdrant server")
        for f in spec.dense:
            if f.datatype == "int8":
                # Replicas share the server's vectors; int8 columns live beside an embedded
                # shard (store.columns), so a server library keeps float16 or float32.
                raise StoreError(f"library '{name}': field '{f.name}' asks for int8 vectors, which only "
                                 "the embedded store keeps; use float16 (RAGSPINE_PAGE_VECTOR_DTYPE)")
        vectors = {
            f.name: models.VectorParams(
                size=f.size,
                distance=models.Distance.DOT if f.dot else models.Distance.COSINE,
                multivector_config=models.MultiVectorConfig(
                    comparator=models.MultiVectorComparator.MAX_SIM
                )
                if f.multivector
                else None,
                hnsw_config=hnsw_config(f),
                quantization_config=quantization_config(f),
                datatype=models.Datatype.FLOAT16 if f.datatype == "float16" else None,
                on_disk=True if f.on_disk else None,
            )
            for f in spec.dense
        }
        sparse = {n: models.SparseVectorParams(modifier=models.Modifier.IDF) for n in spec.sparse_idf}
        optimizers = None
        if spec.indexing_threshold_kb is not None:
            optimizers = models.OptimizersConfigDiff(indexing_threshold=spec.indexing_threshold_kb)
        try:
            self.client.create_collection(
                c, vectors_config=vectors, sparse_vectors_config=sparse, optimizers_config=optimizers,
                shard_number=spec.shard_number, replication_factor=spec.replication_factor,
                write_consistency_factor=spec.write_consistency_factor,
            )
        except UnexpectedResponse as exc:
            if exc.status_code == 409:  # another replica created it a moment ago
                raise StoreError(f"library '{name}' already exists on the Qdrant server") from exc
            raise StoreError(f"could not create library '{name}' on the Qdrant server: {exc}") from exc
        except ValueError as exc:  # the in-process double says "already exists" this way
            if "already exists" in str(exc):
                raise StoreError(f"library '{name}' already exists on the Qdrant server") from exc
            raise
        for key, schema in (
            ("kind", models.PayloadSchemaType.KEYWORD),
            ("doc_id", models.PayloadSchemaType.KEYWORD),
            ("state", models.PayloadSchemaType.KEYWORD),
            ("version", models.PayloadSchemaType.INTEGER),
        ):
            self._api.create_payload_index(c, key, field_schema=schema)

    def drop_collection(self, name: str) -> None:
        c = self._check(name)
        try:
            self._api.delete_collection(c)
        finally:
            self._forget(c)

    def has_collection(self, name: str) -> bool:
        """Asks the server every time: creating and opening a library must see other replicas'
        drops (searches and writes do not ask: see ``_known``)."""
        return self._exists(self._c(name))

    def list_collections(self) -> list[str]:
        names = [c.name for c in self.client.get_collections().collections]
        return sorted(n[len(PREFIX) :] for n in names if n.startswith(PREFIX))

    def upsert(self, name: str, points: Sequence[PointData]) -> None:
        if not points:
            return
        structs = []
        for p in points:
            vec: dict[str, Any] = {
                n: models.SparseVector(indices=v.indices, values=v.values) for n, v in p.sparse.items()
            }
            # Arrays come straight from the encoders; qdrant-client's models want lists.
            vec.update({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in p.dense.items()})
            structs.append(models.PointStruct(id=p.id, vector=vec, payload=p.payload))
        self._api.upsert(self._check(name), points=structs, wait=True)

    def update_sparse(self, name: str, vector: str, items: Sequence[tuple[str, SparseVector]]) -> None:
        if not items:
            return
        pvs = [
            models.PointVectors(id=pid, vector={vector: models.SparseVector(indices=v.indices, values=v.values)})
            for pid, v in items
        ]
        self._api.update_vectors(self._check(name), points=pvs, wait=True)

    def add_dense_field(self, name: str, field: DenseField) -> None:
        check_addable(field)
        c = self._check(name)
        params = self._api.get_collection(c).config.params.vectors
        if isinstance(params, dict) and field.name in params:
            return
        try:  # Qdrant 1.18+ (an older server answers 404 for the endpoint)
            self.client.create_vector_name(c, field.name, models.DenseVectorNameConfig(
                dense=models.DenseVectorConfig(size=field.size, distance=models.Distance.COSINE)))
        except UnexpectedResponse as exc:
            raise StoreError(f"library '{name}': the Qdrant server could not add the vector field "
                             f"'{field.name}' (it needs Qdrant 1.18 or later): {exc}") from exc
        self._vector_names.pop(c, None)

    def _require_field(self, name: str, c: str, field: str) -> None:
        # A server rejects an unknown vector name but the in-memory double answers with nothing
        # (or stores it); checking the collection's config makes both say the same.
        vectors = self._vector_names.get(c)
        if vectors is None:  # asked once; add_dense_field forgets it
            params = self._api.get_collection(c).config.params.vectors
            vectors = self._vector_names[c] = frozenset(params) if isinstance(params, dict) else frozenset()
        if field not in vectors:
            raise ValueError(f"library '{name}' has no dense vector field '{field}'")

    def update_dense(self, name: str, field: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        if not items:
            return
        self._require_field(name, self._check(name), field)
        pvs = [models.PointVectors(id=pid, vector={field: np.asarray(v, dtype=np.float32).tolist()})
               for pid, v in items]
        self._api.update_vectors(self._check(name), points=pvs, wait=True)

    def set_payload(self, name: str, where: Where, payload: dict[str, Any]) -> None:
        flt = compile_where(where)
        if flt is None:
            raise ValueError("set_payload needs a filter")
        self._api.set_payload(self._check(name), payload=payload, points=flt, wait=True)

    def delete(self, name: str, where: Where) -> None:
        flt = compile_where(where)
        if flt is None:
            raise ValueError("refusing to delete with an empty filter")
        self._api.delete(self._check(name), points_selector=models.FilterSelector(filter=flt), wait=True)

    def _check_conditional_updates(self) -> None:
        """A server older than 1.17 ignores ``update_filter``/``update_mode``: every conditional
        write would land, and two replicas could both hold a library's lease. Refuse it."""
        if self._conditional_ok:
            return
        try:
            version = str(self.client.info().version)
        except Exception as exc:
            raise StoreError(f"Qdrant server unreachable: {exc}") from exc
        nums = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
        if nums < MIN_SERVER_FOR_CONDITIONAL:
            need = ".".join(map(str, MIN_SERVER_FOR_CONDITIONAL))
            raise StoreError(
                f"the Qdrant server is version {version}; several replicas need conditional updates, "
                f"which Qdrant has from {need} on. Upgrade the server, or run one replica with "
                "RAGSPINE_WRITER_LEASES=off"
            )
        self._conditional_ok = True

    def put_if(self, name: str, point: PointData, expect: Mapping[str, str | int] | None) -> bool:
        if point.dense or point.sparse:
            raise ValueError("put_if writes payload-only points")
        self._check_conditional_updates()
        # Qdrant does not say whether the condition matched: the write carries a nonce, and it
        # landed if the point now holds it (comparing payloads would take an identical write
        # of another replica's for ours).
        nonce = uuid.uuid4().hex
        struct = models.PointStruct(id=point.id, vector={}, payload={**point.payload, _NONCE: nonce})
        c = self._check(name)
        if expect is None:
            self._api.upsert(c, points=[struct], wait=True, update_mode=models.UpdateMode.INSERT_ONLY)
        else:
            cond = models.Filter(must=[models.FieldCondition(key=k, match=models.MatchValue(value=v))
                                       for k, v in expect.items()])
            # An absent point must not be created by a conditional update: update-only.
            self._api.upsert(c, points=[struct], wait=True, update_filter=cond,
                             update_mode=models.UpdateMode.UPDATE_ONLY)
        recs = self._api.retrieve(c, ids=[point.id], with_payload=models.PayloadSelectorInclude(include=[_NONCE]))
        return bool(recs) and (recs[0].payload or {}).get(_NONCE) == nonce

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        if ids:
            self._api.delete(self._check(name), points_selector=models.PointIdsList(points=list(ids)), wait=True)

    def retrieve(self, name: str, ids: Sequence[str], *, fields: Fields = None) -> list[Record]:
        recs = self._api.retrieve(self._check(name), ids=list(ids), with_payload=payload_selector(fields))
        return [Record(str(r.id), _clean(r.payload)) for r in recs]

    def retrieve_vectors(self, name: str, ids: Sequence[str], field: str) -> dict[str, np.ndarray]:
        c = self._check(name)
        self._require_field(name, c, field)
        if not ids:
            return {}
        # Qdrant returns the stored originals, also for a quantized field.
        recs = self._api.retrieve(c, ids=list(ids), with_payload=False, with_vectors=[field])
        out: dict[str, np.ndarray] = {}
        for r in recs:
            v = r.vector.get(field) if isinstance(r.vector, dict) else None
            if v is not None:
                out[str(r.id)] = stored_vector(field, v)
        return out

    def scroll(
        self, name: str, where: Where, limit: int | None = None, *, fields: Fields = None
    ) -> list[Record]:
        c = self._check(name)
        flt = compile_where(where)
        with_payload = payload_selector(fields)
        out: list[Record] = []
        offset = None
        while True:
            page = _SCROLL_PAGE if limit is None else min(_SCROLL_PAGE, limit - len(out))
            recs, offset = self._api.scroll(
                c, scroll_filter=flt, limit=page, offset=offset, with_payload=with_payload
            )
            out.extend(Record(str(r.id), _clean(r.payload)) for r in recs)
            if offset is None or (limit is not None and len(out) >= limit):
                return out

    def count(self, name: str, where: Where) -> int:
        return self._api.count(self._check(name), count_filter=compile_where(where), exact=True).count

    def scroll_points(self, name: str, where: Where, offset: Any = None, limit: int = 256
                      ) -> tuple[list[PointData], Any]:
        recs, nxt = self._api.scroll(self._check(name), scroll_filter=compile_where(where), limit=limit,
                                     offset=offset, with_payload=True, with_vectors=True)
        out: list[PointData] = []
        for r in recs:
            sparse: dict[str, SparseVector] = {}
            dense: dict[str, Any] = {}
            for k, v in (r.vector or {}).items() if isinstance(r.vector, dict) else ():
                if isinstance(v, models.SparseVector):
                    sparse[k] = SparseVector(list(v.indices), list(v.values))
                else:
                    dense[k] = stored_vector(k, v)
            out.append(PointData(str(r.id), _clean(r.payload), sparse, dense))
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
        res = self._api.query_points(
            self._check(name),
            query=models.SparseVector(indices=query.indices, values=query.values),
            using=vector,
            query_filter=compile_where(where),
            limit=limit,
            with_payload=with_payload,
        )
        return scored_hits(res.points)

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
        res = self._api.query_points(
            self._check(name),
            query=vec,
            using=field,
            query_filter=compile_where(where),
            limit=fetch,
            with_payload=payload_selector(fields),
            search_params=models.SearchParams(exact=True) if exact else RESCORE,
        )
        return sort_hits(scored_hits(res.points), limit)

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
        full_params = stage_params(oversampling)
        c = self._check(name)
        flt = compile_where(where)
        prefetch = None
        if pooled_field is not None:
            prefetch = models.Prefetch(
                query=check_query_vector(prefetch_query) if prefetch_query is not None else q,
                using=pooled_field,
                filter=flt,
                limit=max(prefetch_limit, fetch),
                params=models.SearchParams(
                    hnsw_ef=hnsw_ef,
                    quantization=models.QuantizationSearchParams(
                        rescore=True, oversampling=pre_over),
                ),
            )
        res = self._api.query_points(
            c,
            query=q,
            using=full_field,
            prefetch=prefetch,
            query_filter=flt,
            limit=fetch,
            with_payload=payload_selector(fields),
            search_params=full_params,
        )
        return sort_hits(scored_hits(res.points), limit)

    def optimize(self, name: str) -> None:
        """The server builds indexes, excludes deleted points from IDF and vacuums in the
        background; nothing to start here."""
        self._check(name)

    def flush(self, name: str) -> None:
        """The server persists on write (``wait=True``); nothing to do."""

    def close(self) -> None:
        self.client.close()
