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


class Bm25Passages:
    name = "bm25"

    def __init__(self, sparse: SparseSearch) -> None:
        self.sparse = sparse

    def rank(self, q: ChannelQuery) -> ChannelPages:
        if not q.bm25.indices:
            return ChannelPages(self.name, passages=True)
        hits = self.sparse.search_sparse(q.library, SPARSE_CHUNK, q.bm25, q.where_chunk, q.limit, fields=RANK_FIELDS)
        return passage_pages(self.name, hits, q, MIN_CANDIDATES)


class Bm25Pages:
    name = "bm25_page"

    def __init__(self, sparse: SparseSearch) -> None:
        self.sparse = sparse

    def rank(self, q: ChannelQuery) -> ChannelPages:
        if not q.bm25.indices:
            return ChannelPages(self.name)
        hits = self.sparse.search_sparse(q.library, SPARSE_PAGE, q.bm25, q.where_page, q.limit, fields=RANK_FIELDS)
        return page_pages(self.name, hits, q, MIN_CANDIDATES)
