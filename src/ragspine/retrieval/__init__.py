"""Query side: tokenizer, BM25, predicates, RRF fusion, search with citations
(:mod:`ragspine.retrieval.search`)."""

from ragspine.retrieval.fusion import rrf
from ragspine.retrieval.tokenizer import tokenize

__all__ = ["rrf", "tokenize"]
