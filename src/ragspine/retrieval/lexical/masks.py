"""Filters evaluated on the in-memory BM25 index: a :class:`~ragspine.store.base.Where` turned
into a boolean row mask, exactly as the store would filter, or :class:`Unsupported` when it
cannot be (the store answers then)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ragspine.retrieval.lexical.postings import FieldIndex, LibView, Unsupported
from ragspine.store.base import Where, filter_value
from ragspine.store.predicates import Predicate


#: Predicate-mask cache entries per snapshot (one per distinct filter).
_MASK_CACHE = 128


# -- predicates ---------------------------------------------------------------------------------


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def match_value(stored: Any, want: Any) -> bool:
    """Qdrant's ``MatchValue``: a keyword matches an equal string, an integer an equal integer;
    an array matches when one of its elements does."""
    if isinstance(stored, list):
        return any(match_value(x, want) for x in stored)
    if isinstance(want, str):
        return isinstance(stored, str) and stored == want
    return is_int(stored) and stored == want


def match_range(stored: Any, op: str, v: Any) -> bool:
    if isinstance(stored, list):
        return any(match_range(x, op, v) for x in stored)
    if not is_num(stored):
        return False
    x = float(stored)
    if op == "gt":
        return x > float(v)
    if op == "gte":
        return x >= float(v)
    if op == "lt":
        return x < float(v)
    if op == "lte":
        return x <= float(v)
    lo, hi = v  # between
    return float(lo) <= x <= float(hi)


def check_values(p: Predicate) -> None:
    """Only values whose Qdrant match is known exactly: strings and integers (booleans go
    through their keyword mirror), one type per list; numbers for ranges."""
    values = p.value if isinstance(p.value, tuple) else (p.value,)
    if p.op in ("gt", "gte", "lt", "lte", "between"):
        if not all(is_num(v) for v in values):
            raise Unsupported(f"range on '{p.field}' with {p.value!r}")
        return
    fv = [filter_value(v) for v in values]
    if not (all(isinstance(v, str) for v in fv) or all(is_int(v) for v in fv)):
        raise Unsupported(f"'{p.op}' on '{p.field}' with {p.value!r}")
    if p.field == "page" and not all(is_int(v) for v in values):  # the page column holds ints
        raise Unsupported(f"'{p.op}' on 'page' with {p.value!r}")


def doc_matches(where: Where, p: Predicate, payload: dict[str, Any]) -> bool:
    """One predicate on one document's payload, as Qdrant evaluates the compiled filter
    (``ne``/``nin`` are ``must_not``: a document without the field passes them)."""
    key = where.payload_key(p)
    if "." in key:
        top, sub = key.split(".", 1)
        container = payload.get(top)
        present = isinstance(container, dict) and sub in container
        stored = container.get(sub) if present else None  # type: ignore[union-attr]
    else:
        present = key in payload
        stored = payload.get(key)
    v = filter_value(p.value)
    if p.op in ("eq", "ne"):
        hit = present and match_value(stored, v)
        return hit if p.op == "eq" else not hit
    if p.op in ("in", "nin"):
        hit = present and any(match_value(stored, x) for x in v)  # type: ignore[union-attr]
        return hit if p.op == "in" else not hit
    return present and match_range(stored, p.op, v)


def page_matches(p: Predicate, pages: np.ndarray) -> np.ndarray:
    """A predicate on the built-in ``page`` field over the page column (int32 page numbers)."""
    v = p.value
    if p.op in ("eq", "ne"):
        m = pages == v
        return m if p.op == "eq" else ~m
    if p.op in ("in", "nin"):
        m = np.isin(pages, np.asarray(v, dtype=np.int64))
        return m if p.op == "in" else ~m
    x = pages.astype(np.float64)
    if p.op == "gt":
        return x > float(v)  # type: ignore[arg-type]
    if p.op == "gte":
        return x >= float(v)  # type: ignore[arg-type]
    if p.op == "lt":
        return x < float(v)  # type: ignore[arg-type]
    if p.op == "lte":
        return x <= float(v)  # type: ignore[arg-type]
    lo, hi = v  # type: ignore[misc]
    return (x >= float(lo)) & (x <= float(hi))


def row_mask(view: LibView, fi: FieldIndex, where: Where) -> np.ndarray | None:
    """``(n_rows,)`` float 1.0 for the rows of ``fi`` that pass ``where``, else 0.0 (``None``:
    all pass). Cached per view and filter.

    Raises :class:`Unsupported` for a filter the index cannot evaluate exactly.
    """
    if where.live is not True:
        raise Unsupported("only live points are indexed")
    if where.version is not None or where.not_version is not None:
        raise Unsupported("only the current version of each document is indexed")
    key = (fi.kind, where.doc_id, where.predicates)
    try:
        return view.masks[key]
    except KeyError:
        pass
    doc_preds = [p for p in where.predicates if p.field != "page"]
    page_preds = [p for p in where.predicates if p.field == "page"]
    for p in where.predicates:
        check_values(p)
    mask: np.ndarray | None = None
    if doc_preds or where.doc_id is not None:
        ok = np.zeros(len(view.docs), dtype=bool)  # (n_docs,)
        for code, payload in enumerate(view.doc_payload):
            if payload is None:
                continue
            if where.doc_id is not None and payload.get("doc_id") != where.doc_id:
                continue
            ok[code] = all(doc_matches(where, p, payload) for p in doc_preds)
        mask = ok[fi.doc]  # (n_rows,)
    for p in page_preds:
        m = page_matches(p, fi.page)
        mask = m if mask is None else mask & m
    fmask = None if mask is None else mask.astype(np.float64)  # (n_rows,) 0/1: scores *= fmask
    if len(view.masks) >= _MASK_CACHE:
        view.masks.clear()
    view.masks[key] = fmask
    return fmask


