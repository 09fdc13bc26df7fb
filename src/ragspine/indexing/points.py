"""What one kept page becomes in the store: its passages (page-aware chunks, each a span of the
page text with a box, a text source and the context it is indexed with), their BM25 token lists,
and the passage and page points with their payloads and vectors.

A passage's tokens (and its dense vector) are of its context and its text
(``ragspine.scoring.indexed_text``); its payload keeps the two apart (``text``, ``context``), so
citations are the passage's own words."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragspine.catalog import (
    DENSE_CHUNK,
    PAGE_FULL,
    LengthStats,
    LibraryModels,
    first_stage_vectors,
    point_id,
)
from ragspine.indexing.chunking import chunk_spans
from ragspine.indexing.context import ContextBuilder
from ragspine.indexing.pdf import BBox, PageContent
from ragspine.policy import CLASSIFICATION
from ragspine.scoring import BM25Params, document_vector, tokenize
from ragspine.scoring.indexed_text import CONTEXT_KEY, indexed_text
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, PointData


@dataclass(frozen=True)
class Passage:
    start: int  # span of the page text, [start, end)
    end: int
    bbox: BBox  # PDF points: the union of the paragraphs it covers (the page without any)
    source: str  # "pdf" (text layer) or "ocr"
    context: str = ""  # indexed with the text, never cited (ragspine.indexing.context)

    def indexed(self, page: PageContent) -> str:
        """What BM25 and the dense channel see for this passage."""
        return indexed_text(page.text[self.start:self.end], self.context)


@dataclass(frozen=True)
class PagePassages:
    page: PageContent
    passages: list[Passage]
    passage_tokens: list[list[str]]
    page_tokens: list[str]
    page_context: str = ""


def page_passages(page: PageContent, chunk_chars: int, overlap: int,
                  context: ContextBuilder | None = None) -> PagePassages:
    """The page's passages and tokens. Text-layer and OCR paragraphs are chunked apart, so every
    passage has one source. ``context``: what each passage (and the page) is indexed with
    besides its own text (None: nothing)."""
    out: list[Passage] = []
    for src in ("pdf", "ocr"):
        blocks = [b for b in page.blocks if b.source == src]
        for sp in chunk_spans(page.text, [(b.start, b.end) for b in blocks], chunk_chars, overlap):
            covered = [b.bbox for b in page.blocks if b.start < sp.end and b.end > sp.start]
            bbox = (
                min(b[0] for b in covered), min(b[1] for b in covered),
                max(b[2] for b in covered), max(b[3] for b in covered),
            ) if covered else (0.0, 0.0, page.width, page.height)
            ctx = context.passage(page, sp.start, sp.end) if context is not None else ""
            out.append(Passage(sp.start, sp.end, bbox, src, ctx))
    page_ctx = context.page(page) if context is not None and page.text.strip() else ""
    return PagePassages(page, out, [tokenize(p.indexed(page)) for p in out],
                        tokenize(indexed_text(page.text, page_ctx)), page_ctx)


def mask_runs(mask: Any) -> list[list[int]]:
    """``[start, end)`` runs of True in a bool mask: where the image tokens lie, compactly."""
    runs: list[list[int]] = []
    start = None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append([start, i])
            start = None
    return runs


def page_points(
    pp: PagePassages,
    *,
    base: Mapping[str, Any],
    classification: str | None,
    version: int,
    avgdl: tuple[float, float],
    bm25: BM25Params,
    encoded: Any = None,
    models: LibraryModels | None = None,
    dense: Sequence[np.ndarray] = (),
    first_stage: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[PointData], list[dict[str, Any]]]:
    """The passage points and the page point of one page (``state=staged``), and the passages
    as index listeners receive them. ``avgdl`` is the (passage, page) average length the BM25
    weights use; ``encoded`` the page's multivector (an ``EncodedPage``) when the library has
    page vectors; ``dense`` one vector per passage when it has dense passages; ``first_stage``
    the page's first-stage vectors when the encode stage made them on the device (else they are
    made here)."""
    page, doc_id = pp.page, base["doc_id"]
    common = {**base, "state": "staged", "version": version, "page": page.number, CLASSIFICATION: classification}
    points: list[PointData] = []
    passages: list[dict[str, Any]] = []
    refs = []
    for i, (p, toks) in enumerate(zip(pp.passages, pp.passage_tokens)):
        chunk_id = f"{doc_id}/p{page.number}/c{i}"
        refs.append({"chunk_id": chunk_id, "start": p.start, "end": p.end, "bbox": list(p.bbox),
                     "text_source": p.source})
        payload = {**common, "kind": KIND_CHUNK, "chunk_id": chunk_id, "start": p.start, "end": p.end,
                   "bbox": list(p.bbox), "text": page.text[p.start:p.end], "text_source": p.source}
        if p.context:
            payload[CONTEXT_KEY] = p.context
        sparse = {SPARSE_CHUNK: document_vector(toks, avgdl[0], bm25)} if toks else {}
        vec = {DENSE_CHUNK: dense[i]} if dense and dense[i] is not None else {}  # None: the dense phase's
        points.append(PointData(point_id(doc_id, version, page.number, i), payload, sparse, vec))
        passages.append({"chunk_id": chunk_id, "page": page.number, "text": payload["text"], "bbox": payload["bbox"]})
    payload = {**common, "kind": KIND_PAGE, "width": page.width, "height": page.height, "text": page.text,
               "chunks": refs}
    if pp.page_context:
        payload[CONTEXT_KEY] = pp.page_context
    vectors: dict[str, Any] = {}
    if encoded is not None and models is not None:
        vectors[PAGE_FULL] = encoded.vectors
        vectors.update(first_stage if first_stage is not None else first_stage_vectors(encoded, models))
        # Where the patch grid lies in the stored multivector (similarity maps).
        payload["grid"] = list(encoded.grid) if encoded.grid is not None else None
        payload["image_tokens"] = mask_runs(encoded.image_mask)
    sparse = {SPARSE_PAGE: document_vector(pp.page_tokens, avgdl[1], bm25)} if pp.page_tokens else {}
    points.append(PointData(point_id(doc_id, version, page.number, "page"), payload, sparse, vectors))
    return points, passages


def length_stats(per_page: Iterable[PagePassages]) -> tuple[LengthStats, LengthStats]:
    """BM25 length statistics of a document's pages: (passages, whole pages)."""
    chunk_stats, page_stats = LengthStats(), LengthStats()
    for pp in per_page:
        # Only what gets a BM25 vector counts: a page (or passage) without a word is no document
        # for BM25 - not in the IDF's N, so not in the average length either (an image-only
        # page with OCR off used to lower MMLongBench's average page length from 407.6 to 401.4).
        chunk_stats.tokens += sum(len(t) for t in pp.passage_tokens)
        chunk_stats.count += sum(1 for t in pp.passage_tokens if t)
        page_stats.tokens += len(pp.page_tokens)
        page_stats.count += 1 if pp.page_tokens else 0
    return chunk_stats, page_stats
