"""What a retrieval channel is: a query and a filter in, scored pages out.

Every channel of a search (BM25 over passages, BM25 over pages, dense passages, page images)
implements :class:`Channel`: it gets a :class:`ChannelQuery` (the query in each form the plan
encoded, one library, the caller's filter, the depth) and returns a :class:`ChannelPages`
(pages best first, each with the point that scored it). Fusion (:mod:`~ragspine.retrieval.fusion`)
combines the outputs, and hit assembly (:mod:`~ragspine.retrieval.hits`) cites the fused pages.
A channel knows nothing of the others, of fusion or of hits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ragspine.catalog import LibraryModels
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.request import PageKey
from ragspine.scoring.bm25 import SparseVector
from ragspine.scoring.fusion import minmax_bounds
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, Hit, Where
from ragspine.store.predicates import Predicate

#: Payload keys a channel needs to rank: which page a hit is, whether it is current, and
#: (passages) which passage. Page text is fetched only for the hits that are returned.
RANK_FIELDS = ("doc_id", "version", "page", "sensitivity", CLASSIFICATION, "chunk_id")


@dataclass(frozen=True)
class ChannelQuery:
    """One library's share of a search, as every channel receives it."""

    text: str
    library: str
    predicates: tuple[Predicate, ...]
    #: Candidates each channel returns at most.
    limit: int
    #: Pages the answer needs (top_k, or the rerank depth): a channel may rank fewer than
    #: ``limit`` but never fewer than this.
    depth: int
    #: The query's BM25 terms (empty: no term the tokenizer keeps).
    bm25: SparseVector
    #: Encoded queries by channel: ``dense`` (one vector), ``visual`` (token vectors).
    vectors: Mapping[str, Any]
    #: The library's vector fields and the models that serve them.
    models: LibraryModels
    #: doc_id -> the version searches see; a hit of another version is not current.
    active: Mapping[str, int]

    def where(self, kind: str) -> Where:
        return Where(kind=kind, live=True, predicates=self.predicates)

    @property
    def where_chunk(self) -> Where:
        return self.where(KIND_CHUNK)

    @property
    def where_page(self) -> Where:
        return self.where(KIND_PAGE)

    def current(self, h: Hit) -> bool:
        """A hit of the active version that may leave (RESTRICTED never does)."""
        p = h.payload
        return self.active.get(p.get("doc_id")) == p.get("version") and not point_restricted(p)

    def page_key(self, h: Hit) -> PageKey:
        return (self.library, h.payload["doc_id"], int(h.payload["page"]))


@dataclass(frozen=True)
class ScoredPage:
    key: PageKey
    score: float
    #: The point that scored the page: its best passage (passage channels) or the page point.
    point: str


@dataclass
class ChannelPages:
    """A channel's pages, best first, one entry per page."""

    name: str
    pages: list[ScoredPage] = field(default_factory=list)
    #: True when ``point`` is a passage (the page's citation), False when it is the page point.
    passages: bool = False
    #: The channel's score bounds for the convex fusion: its best and its ``MIN_CANDIDATES``-th
    #: score (None: nothing found).
    bounds: tuple[float, float] | None = None


class Channel(Protocol):
    """A query and a filter in, scored pages out."""

    #: The score key the channel's pages carry in a hit's ``scores``.
    name: str

    def rank(self, q: ChannelQuery) -> ChannelPages: ...


def passage_pages(name: str, hits: list[Hit], q: ChannelQuery, bound_at: int) -> ChannelPages:
    """Passage hits to pages: each page ranked at its best passage (ties: chunk id), which is
    the page's point; only current hits count."""
    hits = sorted((h for h in hits if q.current(h)), key=lambda h: (-h.score, h.payload.get("chunk_id", "")))
    out = ChannelPages(name, passages=True)
    if hits:
        out.bounds = minmax_bounds([h.score for h in hits], bound_at)
    seen: set[PageKey] = set()
    for h in hits:
        key = q.page_key(h)
        if key not in seen:
            seen.add(key)
            out.pages.append(ScoredPage(key, h.score, h.id))
    return out


def page_pages(name: str, hits: list[Hit], q: ChannelQuery, bound_at: int) -> ChannelPages:
    """Page hits to pages (ties: doc id, page); only current hits count."""
    hits = sorted((h for h in hits if q.current(h)), key=lambda h: (-h.score, h.payload["doc_id"], h.payload["page"]))
    out = ChannelPages(name, passages=False)
    if hits:
        out.bounds = minmax_bounds([h.score for h in hits], bound_at)
    out.pages = [ScoredPage(q.page_key(h), h.score, h.id) for h in hits]
    return out
