"""Qdrant Edge's side of :class:`~ragspine.store.edge.EdgeStore`: the shard configuration and
the translation of ragspine's filters, payload selectors and search parameters into the
binding's types (kept apart from the store's operations, which change for other reasons)."""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe

from ragspine.store._qdrant import (
    Condition,
    full_stage_params,
    hnsw_params,
    where_conditions,
)
from ragspine.store.base import (
    SCALAR_QUANTILE,
    CollectionSpec,
    DenseField,
    Fields,
    Where,
    payload_fields,
)

_VACUUM_DELETED_FRACTION = 1e-9  # any deleted point makes a segment eligible for vacuum
#: Payload fields that every search and every document write filter on. Without an index
#: Qdrant Edge reads each point's payload on every filtered query: measured on 2 cores over
#: 2,044 points (TAT-QA), a filtered sparse query took 46 ms without these indexes and
#: 0.5 ms with them. The server backend indexes the same fields.
_INDEXED_FIELDS = (
    ("kind", qe.PayloadSchemaType.Keyword),
    ("state", qe.PayloadSchemaType.Keyword),
    ("doc_id", qe.PayloadSchemaType.Keyword),
    ("version", qe.PayloadSchemaType.Integer),
)


def ensure_indexes(shard: qe.EdgeShard) -> None:
    """Create the missing payload indexes (libraries made before they existed get them on
    open; creating one is idempotent and persisted)."""
    have = shard.info().payload_schema
    for key, schema in _INDEXED_FIELDS:
        if key not in have:
            shard.update(qe.UpdateOperation.create_field_index(key, schema))


def payload_selector(fields: Fields) -> bool | qe.PayloadSelector:
    """The engine-side payload selector for ``fields`` (see :data:`~ragspine.store.base.Fields`).

    Edge 0.9's binding takes Qdrant's include selector, so unselected keys (the page text) are
    dropped inside the engine and never converted to Python objects. ``[]`` asks for no payload
    at all, which is cheaper still: the engine reads and decodes a candidate's whole stored
    payload before it selects keys. Measured by ``bench/store_payload.py`` (2,000 points, 3 KB
    text, ``search_sparse`` limit 200, 2 busy cores), p50: whole payload 4-5 ms, three keys
    2.6-3.1 ms, none 1.3-1.5 ms; filtering the dict in Python afterwards saves nothing (4.3-5.0
    ms), and placing payloads in RAM (``payload_memory=Cached``) changed nothing either.
    """
    keys = payload_fields(fields)
    if keys is None:
        return True
    return qe.PayloadSelector.Include(keys) if keys else False


def _condition(c: Condition) -> Any:
    if c.kind == "match":
        return qe.FieldCondition(key=c.key, match=qe.MatchValue(c.value))
    if c.kind == "any":
        return qe.FieldCondition(key=c.key, match=qe.MatchAny(c.value))
    return qe.FieldCondition(key=c.key, range=qe.RangeFloat(**{k: float(v) for k, v in c.value.items()}))


def compile_where(where: Where) -> qe.Filter | None:
    must, must_not = where_conditions(where)
    if not must and not must_not:
        return None
    return qe.Filter(must=[_condition(c) for c in must] or None, must_not=[_condition(c) for c in must_not] or None)


#: The unused sparse field of a collection that holds payloads only (see EdgeStore._config).
_RECORDS_ONLY_FIELD = "_records_only"


def hnsw_config(f: DenseField) -> qe.HnswIndexConfig | None:
    params = hnsw_params(f)
    return qe.HnswIndexConfig(**params) if params is not None else None


def quantization_config(
    f: DenseField,
) -> qe.ScalarQuantizationConfig | qe.BinaryQuantizationConfig | qe.TurboQuantQuantizationConfig | None:
    if f.quantization == "scalar":
        return qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=SCALAR_QUANTILE, always_ram=True)
    if f.quantization == "binary":
        return qe.BinaryQuantizationConfig(always_ram=True)
    if f.quantization == "turbo2":
        return qe.TurboQuantQuantizationConfig(always_ram=True, bits=qe.TurboQuantBitSize.Bits2)
    return None


#: Quantized fields score on the quantized copy, then rescore the candidates with the original
#: vectors (Edge 0.9 does not rescore unless asked).
RESCORE = qe.SearchParams(quantization=qe.QuantizationSearchParams(rescore=True))


def stage_params(oversampling: float | None) -> qe.SearchParams:
    return qe.SearchParams(quantization=qe.QuantizationSearchParams(**full_stage_params(oversampling)))


def shard_config(spec: CollectionSpec | None, search_threads: int | None) -> qe.EdgeConfig:
    """The shard configuration of a collection of ``spec`` (``None``: one of records only). A
    shard is one copy in one shard: more of either is a ValueError naming them."""
    many = {k: v for k in ("shard_number", "replication_factor", "write_consistency_factor")
            if spec is not None and (v := getattr(spec, k)) not in (None, 1)}
    if many:
        raise ValueError(f"{many} needs a Qdrant server; the embedded store keeps one copy in one shard")
    vectors: dict[str, qe.EdgeVectorParams] = {}
    sparse: dict[str, qe.EdgeSparseVectorParams] = {}
    if spec is not None:
        for f in spec.dense:
            if f.datatype == "int8":
                continue  # a column beside the shard (create_collection)
            vectors[f.name] = qe.EdgeVectorParams(
                size=f.size,
                distance=qe.Distance.Dot if f.dot else qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
                if f.multivector
                else None,
                hnsw_config=hnsw_config(f),
                quantization_config=quantization_config(f),
                datatype=qe.VectorStorageDatatype.Float16 if f.datatype == "float16" else None,
                on_disk=True if f.on_disk else None,
            )
        for n in spec.sparse_idf:
            sparse[n] = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
    if not vectors and not sparse:
        # Qdrant Edge refuses a shard without any vector field; a collection of records
        # only (the job records, ragspine.serving.jobs) gets one that is never written.
        sparse[_RECORDS_ONLY_FIELD] = qe.EdgeSparseVectorParams()
    # Vacuum any segment with a deleted point when optimize() runs: Qdrant Edge keeps
    # deleted points in its IDF statistics and their payloads in segment files until
    # then, and a document deleted (or re-classified RESTRICTED) must leave no trace.
    optimizers = qe.EdgeOptimizersConfig(
        deleted_threshold=_VACUUM_DELETED_FRACTION,
        vacuum_min_vector_number=1,
        indexing_threshold=spec.indexing_threshold_kb if spec is not None else None,
    )
    return qe.EdgeConfig(
        vectors=vectors,
        sparse_vectors=sparse,
        max_search_threads=search_threads,
        optimizers=optimizers,
        # No write-ahead log: a WAL keeps deleted text on disk after compaction. ragspine
        # flushes at every commit point instead, and its manifest entries make any
        # unflushed, half-written version recoverable (see indexing.versions).
        wal_enabled=False,
    )
