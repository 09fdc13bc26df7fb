"""Encoders and rerankers behind small Protocols, built by name in one registry.

Importing this package needs only numpy: torch, transformers, colpali-engine and
sentence-transformers (the ``gpu`` extra) are imported when a model is loaded, and a missing one
raises :class:`~ragspine.errors.MissingExtraError` naming ``pip install 'ragspine[gpu]'``.

    >>> enc = load_page_encoder("vidore/colqwen2-v1.0")        # or a save_pretrained folder
    >>> pages = enc.encode_pages(images)                        # list[EncodedPage]
    >>> q = enc.encode_queries(["revenue by region"])[0]        # (n_tokens, 128) float32
    >>> enc.model_id, enc.revision                              # goes into the library record
"""

from ragspine import runtimes as _runtimes

# Before any module of this package can import onnxruntime or OpenVINO, which would
# otherwise write usage files and send usage events (ragspine.runtimes).
_runtimes.quiet()

from ragspine.models.base import (
    DenseTextEncoder,
    EncodedPage,
    PageEncoder,
    Reranker,
    TextMultiVectorEncoder,
)
from ragspine.models.errors import ModelError, ModelLoadError, ModelOutputError
from ragspine.models.registry import (
    DEFAULT_COLBERT,
    DEFAULT_CROSS_ENCODER,
    DEFAULT_DENSE_MODEL,
    DEFAULT_PAGE_MODEL,
    RERANKERS,
    load_dense_encoder,
    load_page_encoder,
    load_reranker,
    load_text_multivector_encoder,
)

__all__ = [
    "DEFAULT_COLBERT",
    "DEFAULT_CROSS_ENCODER",
    "DEFAULT_DENSE_MODEL",
    "DEFAULT_PAGE_MODEL",
    "RERANKERS",
    "DenseTextEncoder",
    "EncodedPage",
    "ModelError",
    "ModelLoadError",
    "ModelOutputError",
    "PageEncoder",
    "Reranker",
    "TextMultiVectorEncoder",
    "load_dense_encoder",
    "load_page_encoder",
    "load_reranker",
    "load_text_multivector_encoder",
]
