"""The query side: validate, run channels per library, fuse with RRF, filter, cite.

Everything is ranked at page level: each channel yields pages (the passage channel through
its best passage per page), channels fuse by RRF, libraries fuse by RRF, and each hit is a
page with the passage that best answers the query, cited by document, 1-based page, bbox
and chunk id.
"""

from __future__ import annotations

import logging
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.indexing.library import Libraries
from ragspine.indexing.policy import is_restricted
from ragspine.retrieval.bm25 import query_vector
from ragspine.retrieval.fusion import rrf
from ragspine.retrieval.predicates import Predicate, check_types, merge_field_types, parse_filters
from ragspine.retrieval.tokenizer import tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Hit, Store, Where

logger = logging.getLogger(__name__)

Mode = Literal["auto", "hybrid", "vector", "bm25", "lexical", "economy"]
MODES: tuple[str, ...] = ("auto", "hybrid", "vector", "bm25", "lexical", "economy")
#: Candidates fetched per channel: at least this many, or ``CANDIDATE_FACTOR * top_k``.
MIN_CANDIDATES = 100
CANDIDATE_FACTOR = 2
PageKey = tuple[str, str, int]  # (library, doc_id, page)


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

    @field_validator("query")
    @classmethod
    def _clean_query(cls, v: str) -> str:
        bad = [c for c in v if unicodedata.category(c) == "Cc" and c not in "\t\n\r"]
        if bad:
            raise ValueError(f"query contains control characters (e.g. {bad[0]!r}); remove them")
        if "\ufffd" in v:
            raise ValueError("query is not valid UTF-8 (it contains U+FFFD replacement characters)")
        if not v.strip():
            raise ValueError("query is empty")
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

    def to_json(self) -> dict[str, Any]:
        if self.via is not None:
            return {**self._base_json(), "via": self.via}
        return self._base_json()

    def _base_json(self) -> dict[str, Any]:
        return {
            "library_id": self.library_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "page": self.page,
            "bbox": self.bbox,
            "chunk_id": self.chunk_id,
            "text": self.text,
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

    def to_json(self) -> dict[str, Any]:
        if self.expansion is not None:
            return {**self._base_json(), "expansion": self.expansion}
        return self._base_json()

    def _base_json(self) -> dict[str, Any]:
        return {
            "hits": [h.to_json() for h in self.hits],
            "mode": self.mode,
            "degraded": self.degraded,
            "degraded_reasons": self.degraded_reasons,
            "filters_relaxed": self.filters_relaxed,
            "timings_ms": self.timings_ms,
        }


@dataclass
class _PageCandidate:
    payload: dict[str, Any]  # of the best passage, or of the page when no passage was found
    from_chunk: bool  # False: ``payload`` is the page's; :func:`best_passage` picks the passage
    scores: dict[str, float | None] = field(default_factory=dict)


def best_passage(query_tokens: list[str], page_payload: dict[str, Any]) -> dict[str, Any]:
    """The passage of a page sharing the most query tokens (first one on ties), as a chunk
    payload. Used when a page was found by the page channel only."""
    text: str = page_payload.get("text", "")
    wanted = Counter(query_tokens)
    best, best_score = None, -1
    for ref in page_payload.get("chunks", []):
        toks = Counter(tokenize(text[ref["start"] : ref["end"]]))
        score = sum(min(c, toks[t]) for t, c in wanted.items())
        if score > best_score:
            best, best_score = ref, score
    base = {k: page_payload[k] for k in ("doc_id", "title", "meta", "version", "page", "sensitivity") if k in page_payload}
    if best is None:
        return {**base, "chunk_id": f"{page_payload['doc_id']}/p{page_payload['page']}", "text": text,
                "bbox": [0.0, 0.0, page_payload.get("width", 0.0), page_payload.get("height", 0.0)]}
    return {**base, "chunk_id": best["chunk_id"], "text": text[best["start"] : best["end"]], "bbox": best["bbox"]}


class Searcher:
    def __init__(self, settings: Settings, store: Store, libraries: Libraries) -> None:
        self.settings = settings
        self.store = store
        self.libraries = libraries

    def validate(self, req: SearchRequest) -> tuple[list[Predicate], dict[str, str]]:
        s = self.settings
        if not 1 <= req.top_k <= s.max_top_k:
            raise InvalidRequestError(f"top_k must be between 1 and {s.max_top_k}, got {req.top_k}")
        if len(req.query) > s.max_query_chars:
            raise InvalidRequestError(
                f"query is {len(req.query)} characters; the limit is {s.max_query_chars} "
                "(RAGSPINE_MAX_QUERY_CHARS)"
            )
        if len(set(req.libraries)) != len(req.libraries):
            raise InvalidRequestError(f"libraries listed twice: {req.libraries}")
        types: dict[str, str] = {}
        for lib in req.libraries:
            rec = self.libraries.open(lib)
            types = merge_field_types(types, rec.field_types)
        preds = parse_filters(req.filters)
        check_types(preds, types)
        return preds, types

    def search(self, req: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        if req.expand is not None:  # never silently ignored: the graph runs it (Engine.search)
            raise InvalidRequestError("'expand' needs the relation graph: search through Engine.search")
        preds, _ = self.validate(req)
        if req.mode == "vector":
            raise InvalidRequestError(
                "mode 'vector' needs a page model, and none is configured (RAGSPINE_PAGE_MODEL); "
                "use mode 'bm25' or 'auto'"
            )
        degraded: list[str] = []
        if req.mode == "hybrid":
            degraded.append("visual_unavailable: no page model configured; answered from the CPU path")
        if req.rerank:
            degraded.append("rerank_unavailable: no reranker configured")
        mode = "bm25" if req.mode in ("bm25", "lexical") else "economy"
        hits = self._search(req, preds)
        relaxed = False
        if not hits and preds and req.allow_unfiltered_fallback:
            hits = self._search(req, [])
            relaxed = True
            degraded.append("filters_relaxed: no hit matched the filters; showing unfiltered results")
        return SearchResponse(
            hits=hits,
            mode=mode,
            degraded=bool(degraded),
            degraded_reasons=degraded,
            filters_relaxed=relaxed,
            timings_ms={"total": round((time.perf_counter() - t0) * 1000, 3)},
        )

    def _search(self, req: SearchRequest, preds: list[Predicate]) -> list[SearchHit]:
        s = self.settings
        qv = query_vector(req.query, counts=s.bm25_query_counts)
        qtoks = tokenize(req.query)
        if not qv.indices:
            return []
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * self.settings.max_top_k)
        per_lib: list[list[PageKey]] = []
        cands: dict[PageKey, _PageCandidate] = {}
        for lib in req.libraries:
            active = self.libraries.active_versions(lib)

            def current(h: Hit) -> bool:
                p = h.payload
                return active.get(p.get("doc_id")) == p.get("version") and not is_restricted(p.get("sensitivity"))

            # A channel weighted 0 is not queried (RAGSPINE_BM25_CHUNK_WEIGHT / _PAGE_WEIGHT).
            chunk_hits = [h for h in self.store.search_sparse(
                lib, SPARSE_CHUNK, qv, Where(kind=KIND_CHUNK, live=True, predicates=tuple(preds)), limit
            ) if current(h)] if s.bm25_chunk_weight > 0 else []
            page_hits = [h for h in self.store.search_sparse(
                lib, SPARSE_PAGE, qv, Where(kind=KIND_PAGE, live=True, predicates=tuple(preds)), limit
            ) if current(h)] if s.bm25_page_weight > 0 else []
            chunk_rank: list[PageKey] = []
            for h in sorted(chunk_hits, key=lambda h: (-h.score, h.payload.get("chunk_id", ""))):
                key = (lib, h.payload["doc_id"], int(h.payload["page"]))
                if key not in cands:
                    cands[key] = _PageCandidate(h.payload, True)
                if key not in chunk_rank:
                    chunk_rank.append(key)
                    cands[key].scores["bm25"] = h.score
            page_rank: list[PageKey] = []
            for h in sorted(page_hits, key=lambda h: (-h.score, h.payload["doc_id"], h.payload["page"])):
                key = (lib, h.payload["doc_id"], int(h.payload["page"]))
                if key not in cands:
                    # The page payload for now; its best passage is picked only if the page
                    # makes the final top_k (picking it tokenises every passage of the page).
                    cands[key] = _PageCandidate(h.payload, False)
                page_rank.append(key)
                cands[key].scores["bm25_page"] = h.score
            fused = rrf([chunk_rank, page_rank], k=s.rrf_k, weights=[s.bm25_chunk_weight, s.bm25_page_weight])
            for key, score in fused:
                cands[key].scores["fused"] = score
            # Equal fused scores (ranks 1+2 against 2+1) are broken by the passage's BM25
            # score, then by id: the page whose best passage matches best comes first.
            fused.sort(key=lambda kv: (-kv[1], -(cands[kv[0]].scores.get("bm25") or 0.0), kv[0]))
            per_lib.append([key for key, _ in fused])
        if len(per_lib) == 1:
            order = per_lib[0]
        else:
            fused_all = rrf(per_lib, k=self.settings.rrf_k)
            order = [key for key, _ in fused_all]
            for key, score in fused_all:
                cands[key].scores["fused"] = score
        out: list[SearchHit] = []
        for key in order[: req.top_k]:
            c = cands[key]
            p = c.payload if c.from_chunk else best_passage(qtoks, c.payload)
            if is_restricted(p.get("sensitivity")):  # defence in depth: never leaves
                continue
            out.append(
                SearchHit(
                    library_id=key[0],
                    doc_id=p["doc_id"],
                    title=p.get("title", p["doc_id"]),
                    page=int(p["page"]),
                    bbox=[float(x) for x in p["bbox"]],
                    chunk_id=p["chunk_id"],
                    text=p["text"],
                    scores={
                        "bm25": c.scores.get("bm25"),
                        "bm25_page": c.scores.get("bm25_page"),
                        "dense": None,
                        "visual": None,
                        "fused": c.scores.get("fused"),
                        "rerank": None,
                    },
                    version=int(p["version"]),
                    metadata=dict(p.get("meta") or {}),
                )
            )
        return out

