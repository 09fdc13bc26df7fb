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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from ragspine.scoring.bm25 import SparseVector
from ragspine.store.predicates import Predicate

KIND_CHUNK = "chunk"
KIND_PAGE = "page"
KIND_DOC = "doc"
KIND_LIBRARY = "library"

SPARSE_CHUNK = "bm25_chunk"
SPARSE_PAGE = "bm25_page"


#: Qdrant's own HNSW defaults, stated here because both backends must build the same graph.
HNSW_M = 16
HNSW_EF_CONSTRUCT = 100
#: Segments whose vectors of a field take fewer KB than this are searched by full scan.
HNSW_FULL_SCAN_THRESHOLD_KB = 10_000
#: Candidates the pooled prefetch hands to exact MaxSim on the full multivectors: 200 cost
#: what 10 do on Qdrant Edge (docs/measured.md); ``bench/multivector.py`` measures recall
#: against exhaustive MaxSim.
DEFAULT_PREFETCH_LIMIT = 200
#: Extra hits fetched beyond ``limit`` so that pages tied at the cut (identical pages, e.g.
#: blank ones, score exactly alike) are chosen by id, not by the engine's internal order.
TIE_OVERFETCH = 16
#: A quantized single-vector first stage (the int8 copy of MUVERA encodings) takes twice the
#: candidates on the quantized scores and keeps the best by the originals: on bench/scale.py's
#: hard workload (20,000 pages) recall@10 of 100 candidates rose from 0.80 to 0.855 (of 0.865
#: for an exact scan) for ~1.5 ms.
FDE_OVERSAMPLING = 2.0
#: The oversampling of each kind of first-stage copy (``DenseField.quantization``). TurboQuant
#: 2-bit takes 4x: bench/first_stage.py at 20,000 pages (hard workload, 100 candidates)
#: measured recall 0.820 with 2x and 0.830 with 4x, the exact scan's own 0.830, at 6.4 and
#: 8.3 ms against int8's 0.815 at 10.0 ms.
FDE_OVERSAMPLING_BY_COPY: dict[str, float] = {"scalar": FDE_OVERSAMPLING, "turbo2": 4.0}


def fde_oversampling(quantization: str | None) -> float:
    """The first-stage oversampling of a single-vector copy quantized as ``quantization``
    (unknown or ``None``: :data:`FDE_OVERSAMPLING`)."""
    return FDE_OVERSAMPLING_BY_COPY.get(quantization or "", FDE_OVERSAMPLING)


#: Scalar int8 quantization clips at this quantile of the values (Qdrant's recommended 0.99).
SCALAR_QUANTILE = 0.99

Quantization = Literal["scalar", "binary", "turbo2"]
QUANTIZATIONS: tuple[str, ...] = ("scalar", "binary", "turbo2")
#: How a dense field's original vectors are stored: float16 halves a page multivector's disk
#: (1,030 x 128 ColPali tokens: 264 KB instead of 527 KB); MaxSim changes in the 4th digit.
#: ``int8`` (multivectors only, embedded store only): one byte a component and a float32 scale
#: per token (136 KB a ColPali page), kept by ragspine beside the shard and scored in numpy
#: (:mod:`ragspine.store.columns`); MaxSim moves by at most half a step a component
#: (``scoring.multivector.int8_error_bound``).
Datatype = Literal["float32", "float16", "int8"]
DATATYPES: tuple[str, ...] = ("float32", "float16", "int8")


@dataclass(frozen=True)
class DenseField:
    """A dense vector field: one vector (cosine) or, with ``multivector``, a MaxSim multivector.

    Visual pages use two: the full page multivector (``multivector=True, hnsw=False``, optional
    ``quantization``) searched exhaustively or as the rescoring stage, and a pooled multivector
    (``multivector=True``, HNSW on) for the prefetch (:meth:`Store.search_multivector`).
    """

    name: str
    size: int
    multivector: bool = False
    #: Build an HNSW graph for this field (off for full multivectors searched only by rescoring).
    hnsw: bool = True
    #: ``None``, ``"scalar"`` (int8, 4x smaller), ``"binary"`` (1 bit, 32x smaller) or
    #: ``"turbo2"`` (TurboQuant: a random rotation, then 2 bits a component, 16x smaller; Qdrant
    #: 1.18+); searches score on the quantized copy and rescore the candidates with the
    #: original vectors.
    quantization: Quantization | None = None
    #: HNSW graph degree and build beam; ``None`` = ``HNSW_M`` / ``HNSW_EF_CONSTRUCT``.
    hnsw_m: int | None = None
    hnsw_ef_construct: int | None = None
    #: Storage type of the original vectors (see :data:`Datatype`).
    datatype: Datatype = "float32"
    #: Similarity: ``None`` = dot product for a multivector (MaxSim), cosine for one vector;
    #: ``"dot"`` for a single vector whose length carries meaning (a MUVERA page encoding).
    distance: Literal["cosine", "dot"] | None = None
    #: Keep the original vectors on disk (memory-mapped; the OS caches what searches read)
    #: instead of in RAM. A quantized copy stays in RAM either way (``always_ram``).
    on_disk: bool = False

    @property
    def dot(self) -> bool:
        """Scored by plain inner products (the store does not normalise the vectors)."""
        return self.multivector or self.distance == "dot"

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"dense field '{self.name}': size must be >= 1, got {self.size}")
        if self.datatype not in DATATYPES:
            raise ValueError(f"dense field '{self.name}': datatype must be one of {DATATYPES}, "
                             f"got {self.datatype!r}")
        if self.datatype == "int8" and (not self.multivector or self.quantization is not None):
            raise ValueError(f"dense field '{self.name}': int8 storage is for multivectors without "
                             "a quantized copy (the int8 codes are what is scored)")
        if self.distance not in (None, "cosine", "dot"):
            raise ValueError(f"dense field '{self.name}': distance must be 'cosine' or 'dot', got {self.distance!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"dense field '{self.name}': quantization must be one of {QUANTIZATIONS} or None, "
                f"got {self.quantization!r}"
            )
        for k in ("hnsw_m", "hnsw_ef_construct"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ValueError(f"dense field '{self.name}': {k} must be >= 1, got {v}")


@dataclass(frozen=True)
class CollectionSpec:
    sparse_idf: tuple[str, ...] = (SPARSE_CHUNK, SPARSE_PAGE)
    dense: tuple[DenseField, ...] = ()
    #: Vectors of a segment are indexed (HNSW graph, quantized copy) once they exceed this many
    #: KB; ``None`` keeps Qdrant's default (10,000 KB). Tests set it low to index tiny corpora.
    indexing_threshold_kb: int | None = None
    #: Shards, copies of each, and the copies a write waits for: a Qdrant server's cluster
    #: only (``None``: the server's defaults). The embedded store refuses more than one.
    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None


@dataclass
class PointData:
    id: str
    payload: dict[str, Any]
    sparse: dict[str, SparseVector] = field(default_factory=dict)
    #: Lists or float32 numpy arrays (1-D dense, 2-D multivector). Arrays are passed to Qdrant
    #: Edge as they are: converting a 1,030 x 128 page to lists first cost ~9 ms a page.
    dense: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    id: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]


#: Which payload a read returns: ``None`` = the whole payload; a sequence of top-level keys =
#: only those (a nested value such as ``meta`` comes whole; absent keys are simply missing);
#: an empty sequence = no payload at all (``payload == {}``). Keys are Qdrant payload paths, so
#: a dotted key (``meta.year``) would select a nested value on both backends; ragspine's
#: callers pass top-level keys. Searches return up to a few hundred candidates per channel and
#: most callers need only ids and a few small keys: loading and converting each candidate's
#: whole payload (page text included) dominated search latency.
#: ``bench/store_payload.py`` measures it: on Edge a selector of three keys cuts a 200-hit
#: sparse search by about a third, no payload (``[]``) by about two thirds.
Fields = Sequence[str] | None


def payload_fields(fields: Fields) -> list[str] | None:
    """``fields`` checked and copied: ``None`` (whole payload) or a list of keys (``[]``: none).

    A bare string is refused: iterating it would silently select one-letter keys.
    """
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)):
        raise TypeError(f"fields must be a sequence of payload keys, not a string: {fields!r}")
    out = list(fields)
    bad = [f for f in out if not isinstance(f, str) or not f]
    if bad:
        raise ValueError(f"fields must be non-empty strings, got {bad[0]!r}")
    return out


def stored_vector(field: str, value: Any) -> np.ndarray:
    """A stored dense vector as float32: ``(d,)`` for a single vector, ``(n_tokens, d)`` for a
    multivector (told apart by nesting, so a one-token multivector stays 2-D)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"vector field '{field}' is not a dense field (got {type(value).__name__})")
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim not in (1, 2):
        raise ValueError(f"vector field '{field}': unexpected shape {arr.shape}")
    return arr


def check_query_vector(query: Sequence[float]) -> list[float]:
    """One query vector as a list of floats; a clear error for an empty or non-finite one."""
    # numpy, not a loop over floats: a MUVERA query encoding has 10,240 components (~4 ms).
    try:
        a = np.asarray(query, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"query vector must be a list of numbers ({exc})") from exc
    if a.ndim != 1 or not a.size:
        raise ValueError("query vector is empty" if not a.size else f"query vector must be 1-D, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("query vector has a NaN or infinite component")
    return a.tolist()


def check_query_multivector(query: Sequence[Sequence[float]]) -> list[list[float]]:
    """The query as a list of equal-length float rows; a clear error for anything else."""
    rows = [[float(x) for x in row] for row in query]
    if not rows or not rows[0]:
        raise ValueError("query multivector is empty: need (nq >= 1, d >= 1) token vectors")
    d = len(rows[0])
    bad = [i for i, r in enumerate(rows) if len(r) != d]
    if bad:
        raise ValueError(
            f"query multivector rows differ in length: row 0 has {d}, "
            f"row {bad[0]} has {len(rows[bad[0]])}"
        )
    return rows


def sort_hits(hits: list[Hit], limit: int | None = None) -> list[Hit]:
    """Best first, equal scores by id (docs/invariants.md, 6: same input, same ranking), cut at ``limit``."""
    out = sorted(hits, key=lambda h: (-h.score, h.id))
    return out if limit is None else out[:limit]


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
    #: ``gen_above < gen <= gen_upto`` (the relation graph's generations, see graph._stored).
    gen_above: int | None = None
    gen_upto: int | None = None
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

    #: ``"embedded"`` (Qdrant Edge) or ``"server"`` (a Qdrant server or cluster).
    backend: str

    def create_collection(self, name: str, spec: CollectionSpec) -> None: ...
    def drop_collection(self, name: str) -> None: ...
    def has_collection(self, name: str) -> bool: ...
    def list_collections(self) -> list[str]: ...
    def upsert(self, name: str, points: Sequence[PointData]) -> None: ...
    def update_sparse(self, name: str, vector: str, items: Sequence[tuple[str, SparseVector]]) -> None:
        """Replace one sparse vector of existing points, leaving their other vectors alone."""
        ...
    def add_dense_field(self, name: str, field: DenseField) -> None:
        """Add a single-vector dense field to an existing collection (a dense model added to a
        library after it was built); its points have no vector for it until
        :meth:`update_dense` sets one. A field the collection already has is left as it is."""
        ...
    def update_dense(self, name: str, field: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Set one single-vector dense field of existing points, leaving their other vectors alone."""
        ...
    def set_payload(self, name: str, where: Where, payload: dict[str, Any]) -> None: ...
    def delete(self, name: str, where: Where) -> None: ...
    def put_if(self, name: str, point: PointData, expect: Mapping[str, str | int] | None) -> bool:
        """Write one payload-only point only if it is absent (``expect=None``) or its stored
        payload matches every ``key: value`` of ``expect``; ``True`` when it was written. The
        check and the write are one operation for every writer of the collection (Qdrant's
        conditional upsert: ``update_mode=insert_only`` / ``update_filter``), which is what
        writer leases and fenced commits across replicas stand on."""
        ...
    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete the points of ``ids`` (ids that do not exist are ignored)."""
        ...
    def retrieve(self, name: str, ids: Sequence[str], *, fields: Fields = None) -> list[Record]:
        """The points of ``ids`` that exist; ``fields`` selects their payload keys (:data:`Fields`)."""
        ...
    def retrieve_vectors(self, name: str, ids: Sequence[str], field: str) -> dict[str, np.ndarray]:
        """The stored vector of one dense field per id: ``(d,)`` float32 for a single vector,
        ``(n_tokens, d)`` for a multivector (e.g. the page's full multivector, to draw a
        query-to-page similarity map). Ids that do not exist or lack the field are absent.

        Vectors come back as stored: the originals even for a quantized field, but normalised to
        unit length for a cosine (single dense) field, which Qdrant normalises on write. An
        unknown or sparse ``field`` raises :class:`ValueError`.
        """
        ...
    def scroll(
        self, name: str, where: Where, limit: int | None = None, *, fields: Fields = None
    ) -> list[Record]: ...
    def count(self, name: str, where: Where) -> int: ...
    def scroll_points(self, name: str, where: Where, offset: Any = None, limit: int = 256
                      ) -> tuple[list[PointData], Any]:
        """One page of at most ``limit`` points matching ``where``, from ``offset`` (``None``:
        the first page), each with its whole payload and every vector it has, as stored: sparse
        vectors, dense vectors as float32 arrays (``(d,)``, or ``(n_tokens, d)`` for a
        multivector; an int8 column's dequantized, a cosine field's normalised); and the offset
        of the next page (``None``: no more). What a backup reads a library with."""
        ...
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
        """Points by sparse dot product (BM25 with IDF); ``fields`` only trims the payload."""
        ...
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
        """Nearest points by cosine similarity of one dense vector (the dense text channel):
        from the HNSW graph, or with ``exact`` by scanning every vector (exact, and the same
        hits whatever graph an index build made)."""
        ...
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
        """Pages by MaxSim of the query multivector ``(nq, d)`` against ``full_field``.

        With ``pooled_field``: ``prefetch_limit`` candidates by MaxSim on the pooled vectors
        (HNSW, beam ``hnsw_ef`` when given), then MaxSim on the full vectors of those
        candidates. With ``prefetch_query`` too, ``pooled_field`` is a single-vector field (a
        page's MUVERA encoding) and the candidates are its nearest to that one vector (the
        query's encoding). Without ``pooled_field``: exhaustive MaxSim over the full field.
        The single-vector field's quantized copy picks ``prefetch_oversampling`` (default
        :data:`FDE_OVERSAMPLING`; :func:`fde_oversampling` gives each copy's) times the
        candidates, and its originals keep the best ``prefetch_limit``.

        A quantized full field: with ``oversampling=None`` (default) the quantized copy is not
        used and the ranking is exact MaxSim; with a number, ``limit * oversampling`` candidates
        are chosen on the quantized copy and rescored with the originals (scores exact, recall
        can drop). Returned scores are exact MaxSim in both cases. ``fields`` only trims the
        payload of the hits (:data:`Fields`); the ranking is the same with or without it.
        """
        ...
    def optimize(self, name: str) -> None:
        """Build pending indexes (HNSW graphs, quantized copies) and purge deleted points from
        statistics (BM25 IDF) and files, then persist; blocks until done."""
        ...
    def flush(self, name: str) -> None: ...
    def close(self) -> None: ...


def check_addable(field: DenseField) -> None:
    """Only a plain single vector can join a collection later (:meth:`Store.add_dense_field`):
    multivectors, quantized copies and int8 columns are chosen when a library is created."""
    if field.multivector or field.quantization is not None or field.datatype != "float32" or field.dot:
        raise ValueError(f"dense field '{field.name}': only a float32 cosine single vector can be added "
                         "to an existing library")
