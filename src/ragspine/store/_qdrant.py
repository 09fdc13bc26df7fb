"""What the two Qdrant backends share, written once: a :class:`~ragspine.store.base.Where` as
backend-neutral conditions, and the HNSW, quantization and full-stage search parameters of a
field. Each backend only maps these to its own types (``qdrant_edge`` or ``qdrant_client``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ragspine.store.base import (
    HNSW_EF_CONSTRUCT,
    HNSW_FULL_SCAN_THRESHOLD_KB,
    HNSW_M,
    DenseField,
    Where,
    filter_value,
)


@dataclass(frozen=True)
class Condition:
    """One payload condition: ``key`` equals ``value`` (``match``), is one of ``value``
    (``any``), or lies in a range (``range``: ``value`` maps ``gt gte lt lte`` to bounds)."""

    key: str
    kind: Literal["match", "any", "range"]
    value: Any


def where_conditions(where: Where) -> tuple[list[Condition], list[Condition]]:
    """``(must, must_not)`` for ``where``: system fields first, then the caller's predicates."""
    must: list[Condition] = []
    must_not: list[Condition] = []
    if where.kind is not None:
        must.append(Condition("kind", "match", where.kind))
    if where.live is not None:
        must.append(Condition("state", "match", "live" if where.live else "staged"))
    if where.doc_id is not None:
        must.append(Condition("doc_id", "match", where.doc_id))
    if where.version is not None:
        must.append(Condition("version", "match", where.version))
    if where.not_version is not None:
        must_not.append(Condition("version", "match", where.not_version))
    if where.gen_above is not None or where.gen_upto is not None:
        bounds: dict[str, int] = {}
        if where.gen_above is not None:
            bounds["gt"] = where.gen_above
        if where.gen_upto is not None:
            bounds["lte"] = where.gen_upto
        must.append(Condition("gen", "range", bounds))
    for p in where.predicates:
        key, v = where.payload_key(p), filter_value(p.value)
        if p.op in ("eq", "ne"):
            (must if p.op == "eq" else must_not).append(Condition(key, "match", v))
        elif p.op in ("in", "nin"):
            (must if p.op == "in" else must_not).append(Condition(key, "any", list(v)))  # type: ignore[arg-type]
        elif p.op == "between":
            lo, hi = v  # type: ignore[misc]
            must.append(Condition(key, "range", {"gte": lo, "lte": hi}))
        else:  # gt gte lt lte
            must.append(Condition(key, "range", {p.op: v}))
    return must, must_not


def hnsw_params(f: DenseField) -> dict[str, int] | None:
    """``None``: Qdrant's default HNSW. ``m=0``: no graph (full multivectors are only scanned or
    rescored)."""
    if f.hnsw and f.hnsw_m is None and f.hnsw_ef_construct is None:
        return None
    return {
        "m": (f.hnsw_m or HNSW_M) if f.hnsw else 0,
        "ef_construct": f.hnsw_ef_construct or HNSW_EF_CONSTRUCT,
        "full_scan_threshold": HNSW_FULL_SCAN_THRESHOLD_KB,
    }


def full_stage_params(oversampling: float | None) -> dict[str, Any]:
    """Quantization search parameters of the exact stage: exact MaxSim on the originals
    (``ignore``), or quantized selection of ``limit * oversampling`` candidates rescored with the
    originals. Qdrant Edge 0.9 picks the final ``limit`` by the quantized score even among
    prefetched candidates, so only ``ignore`` makes the full stage exact on both backends."""
    if oversampling is None:
        return {"ignore": True}
    if oversampling < 1:
        raise ValueError(f"oversampling must be >= 1 (or None for exact), got {oversampling}")
    return {"rescore": True, "oversampling": float(oversampling)}
