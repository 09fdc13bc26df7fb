"""The query side: validate a request, run its channels per library (BM25 over passages and
pages, page-image MaxSim, dense passages), fuse them, rerank, filter what must never leave, and
cite (:mod:`ragspine.retrieval.search`). Uses :mod:`ragspine.scoring` for the math,
:mod:`ragspine.catalog` for what a library holds and :mod:`ragspine.store` for the points; never
:mod:`ragspine.indexing`.
"""

from ragspine.retrieval.lexical import LexicalIndex
from ragspine.retrieval.search import MODES, ExpandSpec, Searcher, SearchHit, SearchRequest, SearchResponse

__all__ = ["MODES", "ExpandSpec", "LexicalIndex", "SearchHit", "SearchRequest", "SearchResponse", "Searcher"]
