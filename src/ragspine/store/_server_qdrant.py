"""The Qdrant server's side of :class:`~ragspine.store.server.ServerStore`: ragspine's filters,
payload selectors, index and search parameters as ``qdrant-client`` models (kept apart from the
store's operations, which change for other reasons)."""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import models

from ragspine.store._qdrant import (
    Condition,
    full_stage_params,
    hnsw_params,
    where_conditions,
)
from ragspine.store.base import (
    SCALAR_QUANTILE,
    DenseField,
    Fields,
    Hit,
    Where,
    payload_fields,
)


def _condition(c: Condition) -> models.FieldCondition:
    if c.kind == "match":
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if c.kind == "any":
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=c.value))
    return models.FieldCondition(key=c.key, range=models.Range(**c.value))


def compile_where(where: Where) -> models.Filter | None:
    must, must_not = where_conditions(where)
    if not must and not must_not:
        return None
    return models.Filter(must=[_condition(c) for c in must] or None,
                         must_not=[_condition(c) for c in must_not] or None)


def payload_selector(fields: Fields) -> bool | models.PayloadSelectorInclude:
    """The server-side payload selector for ``fields`` (see :data:`~ragspine.store.base.Fields`):
    unselected keys are dropped by Qdrant before they cross the wire; ``[]`` asks for none."""
    keys = payload_fields(fields)
    if keys is None:
        return True
    return models.PayloadSelectorInclude(include=keys) if keys else False


def scored_hits(points: Sequence[models.ScoredPoint]) -> list[Hit]:
    return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in points]


def hnsw_config(f: DenseField) -> models.HnswConfigDiff | None:
    params = hnsw_params(f)
    return models.HnswConfigDiff(**params) if params is not None else None


def quantization_config(
    f: DenseField,
) -> models.ScalarQuantization | models.BinaryQuantization | models.TurboQuantization | None:
    if f.quantization == "scalar":
        return models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(
                type=models.ScalarType.INT8, quantile=SCALAR_QUANTILE, always_ram=True
            )
        )
    if f.quantization == "binary":
        return models.BinaryQuantization(binary=models.BinaryQuantizationConfig(always_ram=True))
    if f.quantization == "turbo2":  # Qdrant 1.18+: an older server refuses the collection
        return models.TurboQuantization(turbo=models.TurboQuantQuantizationConfig(
            bits=models.TurboQuantBitSize.BITS2, always_ram=True))
    return None


#: Quantized fields score on the quantized copy, then rescore the candidates with the originals.
RESCORE = models.SearchParams(quantization=models.QuantizationSearchParams(rescore=True))


def stage_params(oversampling: float | None) -> models.SearchParams:
    return models.SearchParams(quantization=models.QuantizationSearchParams(**full_stage_params(oversampling)))
