"""A search inside the server: the hits with their citations (and the classification checked at
every exit), the response with its mode, degradations and timings. The request and the JSON
shapes are the API's (:mod:`ragspine.api.search`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragspine.api.search import (
    MODES,
    POST_STEPS,
    ExpandSpec,
    Mode,
    PostStep,
    SearchRequest,
)
from ragspine.policy import CLASSIFICATION, point_restricted

#: Candidates fetched per channel: at least this many, or ``CANDIDATE_FACTOR * top_k``.
MIN_CANDIDATES = 100
CANDIDATE_FACTOR = 2
PageKey = tuple[str, str, int]  # (library, doc_id, page)

__all__ = [
    "CANDIDATE_FACTOR",
    "MIN_CANDIDATES",
    "MODES",
    "POST_STEPS",
    "ExpandSpec",
    "Mode",
    "PageKey",
    "PostStep",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
]


@dataclass
class SearchHit:
    library_id: str
    doc_id: str
    title: str
    page: int
    bbox: list[float]
    chunk_id: str
    text: str
    scores: dict[str, float | None]
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    #: With ``expand``: the graph paths that brought the hit in, every edge with its citations.
    via: list[dict[str, Any]] | None = None
    #: The cited page's own classification (checked at every exit; not part of the JSON).
    classification: str | None = None
    #: Where the passage's text came from: the PDF's text layer (``pdf``) or OCR (``ocr``).
    text_source: str = "pdf"
    #: With ``rewrite``: indexes into the response's ``queries`` of the variants that found it.
    found_by: list[int] | None = None
    #: The numbers printed on the page, where they are not its place (``page``).
    printed_pages: list[int] = field(default_factory=list)

    def restricted(self) -> bool:
        return point_restricted({CLASSIFICATION: self.classification, **self.metadata})

    def key(self) -> PageKey:
        return (self.library_id, self.doc_id, self.page)

    def to_json(self) -> dict[str, Any]:
        out = self._base_json()
        if self.via is not None:
            out["via"] = self.via
        if self.found_by is not None:
            out["found_by"] = self.found_by
        if self.printed_pages:
            out["printed_pages"] = self.printed_pages
        return out

    def _base_json(self) -> dict[str, Any]:
        return {
            "library_id": self.library_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "page": self.page,
            "bbox": self.bbox,
            "chunk_id": self.chunk_id,
            "text": self.text,
            "text_source": self.text_source,
            "scores": self.scores,
            "metadata": self.metadata,
        }


@dataclass
class SearchResponse:
    hits: list[SearchHit]
    mode: str
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    filters_relaxed: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)
    #: With ``expand``: the start entity and the entities searched, per library.
    expansion: dict[str, Any] | None = None
    #: Channels left out on purpose, and why (``dense_skipped: query language zh ...``).
    notes: list[str] = field(default_factory=list)
    #: With ``rewrite``: the queries searched, the original first, each with its substitutions.
    queries: list[dict[str, Any]] | None = None
    #: With ``corrective``: the grades and actions taken, and why it abstained.
    corrective: dict[str, Any] | None = None
    #: The corrective loop found no context good enough and returned none (``corrective.reason``).
    abstained: bool = False
    #: With ``postprocess``: the steps applied.
    postprocess: list[str] | None = None
    #: The fusion that ranked the hits (per library, then across libraries).
    fusion: str = ""
    #: The question as the channels searched it, where that is not the request's query (its
    #: instructions about the answer's form left out: ragspine.scoring.query_text).
    searched: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = self._base_json()
        for name in ("expansion", "queries", "corrective", "postprocess", "searched"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def _base_json(self) -> dict[str, Any]:
        return {
            "hits": [h.to_json() for h in self.hits],
            "mode": self.mode,
            "degraded": self.degraded,
            "degraded_reasons": self.degraded_reasons,
            "filters_relaxed": self.filters_relaxed,
            "abstained": self.abstained,
            "timings_ms": self.timings_ms,
            "notes": self.notes,
            "fusion": self.fusion,
        }

