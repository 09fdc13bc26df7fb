"""BM25 channels: over passages (each page ranked at its best passage, which is also the
citation of a page any channel finds) and over whole pages. Both read the in-memory lexical
index when there is one, else the store's sparse search: the same weights, the same ranking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ragspine.retrieval.channel import RANK_FIELDS, ChannelPages, ChannelQuery, page_pages, passage_pages
from ragspine.retrieval.request import MIN_CANDIDATES
from ragspine.scoring.bm25 import SparseVector
from ragspine.store.base import SPARSE_CHUNK, SPARSE_PAGE, Hit, Where


class SparseSearch(Protocol):
    """What the BM25 channels need: ``Store.search_sparse``, which ``LexicalIndex`` also answers."""

    def search_sparse(self, name: str, vector: str, query: SparseVector, where: Where, limit: int, *,
                      fields: Sequence[str] | None = None) -> list[Hit]: ...


class _Bm25:
    """BM25 over one sparse field: ``SPARSE_CHUNK`` (passages) or ``SPARSE_PAGE`` (pages)."""

    name = ""
    field = ""

    def __init__(self, sparse: SparseSearch) -> None:
        self.sparse = sparse

    def rank(self, q: ChannelQuery) -> ChannelPages:
        passages = self.field == SPARSE_CHUNK
        if not q.bm25.indices:
            return ChannelPages(self.name, passages=passages)
        where = q.where_chunk if passages else q.where_page
        hits = self.sparse.search_sparse(q.library, self.field, q.bm25, where, q.limit, fields=RANK_FIELDS)
        return (passage_pages if passages else page_pages)(self.name, hits, q, MIN_CANDIDATES)


class Bm25Passages(_Bm25):
    name, field = "bm25", SPARSE_CHUNK


class Bm25Pages(_Bm25):
    name, field = "bm25_page", SPARSE_PAGE
