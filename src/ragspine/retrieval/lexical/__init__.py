"""In-process BM25 over a library's live passages and pages, ranking exactly as the store's
sparse search does (:class:`LexicalIndex`); ``postings`` holds the arrays and kernels, ``masks``
the filter evaluation, ``build`` the reading of a library's points into a view, ``payloads`` the
payload cache."""

from ragspine.retrieval.lexical.index import DEFAULT_MAX_POSTINGS, DEFAULT_PAYLOAD_CACHE, LexicalIndex, RankedPage
from ragspine.retrieval.lexical.postings import Unsupported

__all__ = ["DEFAULT_MAX_POSTINGS", "DEFAULT_PAYLOAD_CACHE", "LexicalIndex", "RankedPage", "Unsupported"]
