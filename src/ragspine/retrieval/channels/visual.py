"""The visual channel: pages by MaxSim of the query's token vectors against each page's patch
vectors, over the first stage's candidates (MUVERA or pooled vectors) only."""

from __future__ import annotations

from ragspine.catalog import PAGE_FULL, first_stage_query
from ragspine.config import Settings
from ragspine.retrieval.channel import RANK_FIELDS, ChannelPages, ChannelQuery, page_pages
from ragspine.retrieval.request import MIN_CANDIDATES
from ragspine.store.base import Store, fde_oversampling


class VisualPages:
    name = "visual"

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def rank(self, q: ChannelQuery) -> ChannelPages:
        query = q.vectors.get("visual")
        lm = q.models
        if query is None or lm.page is None:
            return ChannelPages(self.name)
        first_field, first_query = first_stage_query(query, lm)
        # Exact MaxSim costs ~0.15 ms a page on 2 cores (int8 column): the visual channel ranks
        # the first stage's candidates only, never more than the other channels' depth, and
        # never fewer than the answer needs.
        prefetch = self.settings.prefetch_for(lm.pooling)
        limit = min(q.limit, max(q.depth, prefetch)) if first_field else q.limit
        hits = self.store.search_multivector(
            q.library, query.tolist(), q.where_page, limit,
            full_field=PAGE_FULL, pooled_field=first_field, prefetch_query=first_query,
            prefetch_limit=max(prefetch, limit), fields=RANK_FIELDS,
            prefetch_oversampling=fde_oversampling(lm.fde_quantization) if first_query else None,
        )
        return page_pages(self.name, hits, q, MIN_CANDIDATES)
