"""Index build: PDF → pages → RESTRICTED policy → passages → vectors → store
(:mod:`ragspine.indexing.pipeline`)."""

from ragspine.indexing.chunking import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, chunk_spans

__all__ = ["DEFAULT_CHUNK_CHARS", "DEFAULT_OVERLAP_CHARS", "chunk_spans"]
