"""Index build: PDF → pages → RESTRICTED policy → passages → vectors → store, one atomic
version per document (:class:`Indexer`). Uses :mod:`ragspine.scoring`, :mod:`ragspine.policy`,
:mod:`ragspine.catalog` and :mod:`ragspine.store`; never :mod:`ragspine.retrieval`.
"""

from ragspine.indexing.chunking import DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, chunk_spans
from ragspine.indexing.listeners import IndexListener
from ragspine.indexing.metadata import DocumentMetadata, default_doc_id, parse_metadata
from ragspine.indexing.pipeline import Indexer
from ragspine.indexing.render import MODEL_IMAGE_MAX_PX
from ragspine.indexing.results import IngestResult
from ragspine.indexing.thumbnails import Thumbnails

__all__ = [
    "DEFAULT_CHUNK_CHARS", "DEFAULT_OVERLAP_CHARS", "MODEL_IMAGE_MAX_PX", "DocumentMetadata", "IndexListener",
    "Indexer", "IngestResult", "Thumbnails", "chunk_spans", "default_doc_id", "parse_metadata",
]
