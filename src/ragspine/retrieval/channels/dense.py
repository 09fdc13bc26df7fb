"""The dense passage channel: the passages nearest the query's vector (cosine), each page
ranked at its best passage."""

from __future__ import annotations

from ragspine.catalog import DENSE_CHUNK
from ragspine.config import Settings
from ragspine.retrieval.channel import RANK_FIELDS, ChannelPages, ChannelQuery, passage_pages
from ragspine.retrieval.request import MIN_CANDIDATES
from ragspine.store.base import SPARSE_CHUNK, Store


class DensePassages:
    name = "dense"

    def __init__(self, store: Store, settings: Settings, passages: int) -> None:
        self.store = store
        self.settings = settings
        #: The library's passage count: small libraries are scanned exactly.
        self.passages = passages

    def rank(self, q: ChannelQuery) -> ChannelPages:
        vector = q.vectors.get("dense")
        if vector is None or q.models.dense is None:
            return ChannelPages(self.name, passages=True)
        exact = self.passages <= self.settings.dense_exact_max_passages
        hits = self.store.search_dense(q.library, DENSE_CHUNK, vector.tolist(), q.where_chunk, q.limit,
                                       fields=RANK_FIELDS, exact=exact)
        return passage_pages(self.name, hits, q, MIN_CANDIDATES)


def passage_count(stats: dict) -> int:
    """A library's passage count, from its BM25 statistics."""
    return stats[SPARSE_CHUNK].count if SPARSE_CHUNK in stats else 0
