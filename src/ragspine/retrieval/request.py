"""A search as the API sees it: the request (validated), the hits with their citations, the
response with its mode, degradations and timings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragspine.policy import CLASSIFICATION, point_restricted

Mode = Literal["auto", "hybrid", "vector", "bm25", "lexical", "economy"]
MODES: tuple[str, ...] = ("auto", "hybrid", "vector", "bm25", "lexical", "economy")
#: Steps of the post-chain, applied after rerank in the order given (see ragspine.chain).
PostStep = Literal["mmr", "lost_in_middle"]
POST_STEPS: tuple[str, ...] = ("mmr", "lost_in_middle")
#: Candidates fetched per channel: at least this many, or ``CANDIDATE_FACTOR * top_k``.
MIN_CANDIDATES = 100
CANDIDATE_FACTOR = 2
PageKey = tuple[str, str, int]  # (library, doc_id, page)


#: Unicode category Cc (C0, DEL, C1) except tab, newline and carriage return: a regex, because
#: calling unicodedata.category per character cost 4% of a BM25 search.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class ExpandSpec(BaseModel):
    """Search over the entities the relation graph reaches from ``entity`` (an id, name or
    alias) along ``relation`` (one, a list, or comma-separated; default: the declared kinds
    subsidiary_of, peer_of, derived_from) up to ``depth`` hops (1-3). Validated and run by
    :meth:`ragspine.graph.GraphService.search`; hits say which path brought them in (``via``)."""

    model_config = ConfigDict(extra="forbid")

    entity: str = Field(min_length=1, max_length=256)
    relation: str | list[str] | None = None
    depth: int = 1
    direction: Literal["both", "out", "in"] = "both"
    #: Search the start entity's own documents too.
    include_origin: bool = False


class SearchRequest(BaseModel):
    """A search. ``top_k`` is bounded by ``RAGSPINE_MAX_TOP_K`` (default 1000)."""

    model_config = ConfigDict(extra="forbid")

    query: str
    libraries: list[str] = Field(min_length=1, max_length=64)
    filters: list[dict[str, Any]] = Field(default_factory=list)
    mode: Mode = "auto"
    top_k: int = 10
    rerank: bool = False
    allow_unfiltered_fallback: bool = False
    #: Multi-hop search through the relation graph (see :class:`ExpandSpec`).
    expand: ExpandSpec | None = None
    #: The query chain (:mod:`ragspine.chain`, run by ``Engine.search``; a bare
    #: :class:`Searcher` leaves them to it). ``rewrite``: also search the glossary and alias
    #: variants of the query and fuse them (``None``: ``RAGSPINE_REWRITE``).
    rewrite: bool | None = None
    #: Grade the answer and act when it is weak: drop filters (when allowed), rewrite, abstain.
    corrective: bool = False
    #: After rerank: ``mmr`` (drop near-duplicate passages), ``lost_in_middle`` (best at both ends).
    postprocess: list[PostStep] = Field(default_factory=list, max_length=len(POST_STEPS))

    @field_validator("query")
    @classmethod
    def _clean_query(cls, v: str) -> str:
        bad = _CONTROL.search(v)
        if bad:
            raise ValueError(f"query contains control characters (e.g. {bad.group()!r}); remove them")
        if "\ufffd" in v:
            raise ValueError("query is not valid UTF-8 (it contains U+FFFD replacement characters)")
        if not v.strip():
            raise ValueError("query is empty")
        return v

    @field_validator("postprocess")
    @classmethod
    def _steps_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"postprocess lists a step twice: {v}")
        return v


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

    def to_json(self) -> dict[str, Any]:
        out = self._base_json()
        for name in ("expansion", "queries", "corrective", "postprocess"):
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
        }

