"""The storage seam: one Protocol, backends chosen in :func:`ragspine.store.open_store`.

A library is one Qdrant collection holding four kinds of point, told apart by the payload
field ``kind``:

- ``chunk``  — a passage: sparse BM25 vector ``bm25_chunk`` (+ optional dense), text, span, bbox;
- ``page``   — a page: sparse BM25 vector ``bm25_page`` over the whole page text;
- ``doc``    — a document's manifest entry (no vectors): active version, metadata, counts;
- ``library``— the library record (no vectors): encoders of every vector field, field types.

Stores know nothing of PDFs or BM25; they move points and run the engine's searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ragspine.retrieval.bm25 import SparseVector
from ragspine.retrieval.predicates import Predicate

KIND_CHUNK = "chunk"
KIND_PAGE = "page"
KIND_DOC = "doc"
KIND_LIBRARY = "library"

SPARSE_CHUNK = "bm25_chunk"
SPARSE_PAGE = "bm25_page"


@dataclass(frozen=True)
class DenseField:
    name: str
    size: int
    multivector: bool = False
    #: Build an HNSW graph for this field (off for full multivectors searched only by rescoring).
    hnsw: bool = True


@dataclass(frozen=True)
class CollectionSpec:
    sparse_idf: tuple[str, ...] = (SPARSE_CHUNK, SPARSE_PAGE)
    dense: tuple[DenseField, ...] = ()


@dataclass
class PointData:
    id: str
    payload: dict[str, Any]
    sparse: dict[str, SparseVector] = field(default_factory=dict)
    dense: dict[str, list[float] | list[list[float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    id: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class Where:
    """A backend-neutral filter: system fields plus the caller's metadata predicates.

    Built-in predicate fields (``doc_id``, ``page``) are top-level payload keys; every other
    predicate field lives under ``meta.<field>``.
    """

    kind: str | None = None
    #: ``True``: points of a committed or committing version (``state == "live"``);
    #: ``False``: points still being written (``state == "staged"``).
    live: bool | None = None
    doc_id: str | None = None
    version: int | None = None
    not_version: int | None = None
    predicates: tuple[Predicate, ...] = ()

    def payload_key(self, p: Predicate) -> str:
        if p.is_builtin:
            return p.field
        values = p.value if isinstance(p.value, tuple) else (p.value,)
        if any(isinstance(v, bool) for v in values):
            return f"metab.{p.field}"
        return f"meta.{p.field}"


def filter_value(v: Any) -> Any:
    """Booleans are matched through their keyword mirror (see :func:`bool_mirror`)."""
    if isinstance(v, tuple):
        return tuple(filter_value(x) for x in v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def bool_mirror(meta: dict[str, Any]) -> dict[str, Any]:
    """Keyword copies of boolean metadata, stored under ``metab``.

    Qdrant Edge 0.9's Python binding turns ``MatchValue(True)`` into the integer 1, which never
    matches a stored boolean; matching ``"true"``/``"false"`` keywords works on every backend.
    """
    out: dict[str, Any] = {}
    for k, v in meta.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, list) and v and all(isinstance(x, bool) for x in v):
            out[k] = ["true" if x else "false" for x in v]
    return out


@runtime_checkable
class Store(Protocol):
    """What ragspine needs from a vector store."""

    def create_collection(self, name: str, spec: CollectionSpec) -> None: ...
    def drop_collection(self, name: str) -> None: ...
    def has_collection(self, name: str) -> bool: ...
    def list_collections(self) -> list[str]: ...
    def upsert(self, name: str, points: Sequence[PointData]) -> None: ...
    def update_sparse(self, name: str, vector: str, items: Sequence[tuple[str, SparseVector]]) -> None:
        """Replace one sparse vector of existing points, leaving their other vectors alone."""
        ...
    def set_payload(self, name: str, where: Where, payload: dict[str, Any]) -> None: ...
    def delete(self, name: str, where: Where) -> None: ...
    def retrieve(self, name: str, ids: Sequence[str]) -> list[Record]: ...
    def scroll(self, name: str, where: Where, limit: int | None = None) -> list[Record]: ...
    def count(self, name: str, where: Where) -> int: ...
    def search_sparse(
        self, name: str, vector: str, query: SparseVector, where: Where, limit: int
    ) -> list[Hit]: ...
    def flush(self, name: str) -> None: ...
    def close(self) -> None: ...
