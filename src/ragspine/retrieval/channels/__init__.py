"""The retrieval channels, one file each; :func:`page_channels` is the one place they are
listed. A new page channel is a file here with a class that has a ``name`` and a
``rank(ChannelQuery) -> ChannelPages`` (:class:`ragspine.retrieval.channel.Channel`), one line
below, and its weight in :func:`ragspine.retrieval.fusion.fusion_for`. The document channel
(:mod:`.documents`) ranks documents, which the fusion uses as a prior on pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragspine.retrieval.channel import Channel
from ragspine.retrieval.channels.bm25 import Bm25Pages, Bm25Passages, SparseSearch
from ragspine.retrieval.channels.dense import DensePassages, passage_count
from ragspine.retrieval.channels.visual import VisualPages

if TYPE_CHECKING:
    from ragspine.catalog import LibraryRecord
    from ragspine.config import Settings
    from ragspine.store.base import Store

__all__ = ["page_channels"]


def page_channels(store: Store, lexical: SparseSearch | None, settings: Settings, rec: LibraryRecord) -> list[Channel]:
    """Every page channel, in the order their outputs are merged: the first passage channel that
    finds a page gives its citation (BM25's before the dense one's)."""
    sparse: SparseSearch = lexical if lexical is not None else store
    return [
        Bm25Passages(sparse),
        Bm25Pages(sparse),
        DensePassages(store, settings, passage_count(rec.stats)),
        VisualPages(store, settings),
    ]
