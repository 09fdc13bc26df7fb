"""The query side: validate, run channels per library, fuse with RRF, filter, cite.

Everything is ranked at page level: each channel yields pages (the passage channel through
its best passage per page), channels fuse by RRF, libraries fuse by RRF, and each hit is a
page with the passage that best answers the query, cited by document, 1-based page, bbox
and chunk id.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.catalog import DENSE_CHUNK, PAGE_FULL, Libraries, first_stage_query
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.catalog import library_models
from ragspine.models.modelset import ModelSet, describe
from ragspine.scoring.bm25 import query_vector
from ragspine.scoring.fusion import rrf
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.store.predicates import Predicate, check_types, merge_field_types, parse_filters
from ragspine.models.registry import dense_languages, reranker_languages
from ragspine.scoring.tokenizer import query_language, tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Hit, Store, Where, fde_oversampling

logger = logging.getLogger(__name__)

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
    base = {k: page_payload[k] for k in ("doc_id", "title", "meta", "version", "page", "sensitivity", CLASSIFICATION)
            if k in page_payload}
    if best is None:
        return {**base, "chunk_id": f"{page_payload['doc_id']}/p{page_payload['page']}", "text": text,
                "bbox": [0.0, 0.0, page_payload.get("width", 0.0), page_payload.get("height", 0.0)]}
    return {**base, "chunk_id": best["chunk_id"], "text": text[best["start"] : best["end"]], "bbox": best["bbox"],
            "text_source": best.get("text_source", "pdf")}


#: Payload keys a channel needs to rank: which page a hit is, whether it is current, and
#: (chunks) which passage. Page text is fetched only for the hits that are returned.
_RANK_FIELDS = ("doc_id", "version", "page", "sensitivity", CLASSIFICATION, "chunk_id")


@dataclass
class _Cand:
    """A page being ranked: its best passage's point id per channel, and its channel scores."""

    chunk_id: str | None = None  # point id of the best passage (lexical channel first)
    chunk_sort: str = ""
    page_id: str | None = None  # point id of the page point
    scores: dict[str, float | None] = field(default_factory=dict)


def _passage_bm25(cands: dict[PageKey, _Cand]) -> dict[PageKey, float | None]:
    """The fusion tie-break score of each page: its best passage's BM25 score."""
    return {key: c.scores.get("bm25") for key, c in cands.items()}


@dataclass
class _Plan:
    """Which channels run for a request, and why others do not."""

    mode: str
    visual: bool
    dense: bool
    degraded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Searcher:
    def __init__(self, settings: Settings, store: Store, libraries: Libraries, models: ModelSet | None = None,
                 lexical: LexicalIndex | None = None) -> None:
        self.settings = settings
        self.store = store
        self.libraries = libraries
        self.models = models if models is not None else ModelSet.none()
        #: In-memory BM25 (RAGSPINE_LEXICAL_INDEX=memory); None: the store's sparse search.
        self.lexical = lexical

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

    def _plan(self, req: SearchRequest) -> _Plan:
        """Channels for the request's mode and the models at hand.

        ``vector`` and ``hybrid`` need a page model configured (else 422: the request cannot be
        what the user meant). A configured model that is down, or a library without page
        vectors, turns them into the CPU path (BM25, plus dense when loaded) marked degraded.
        """
        m = self.models
        page_configured = m.page is not None or "page" in m.configured
        if req.mode == "vector" and not page_configured:
            raise InvalidRequestError(
                "mode 'vector' needs a page model, and none is configured (RAGSPINE_PAGE_MODEL); "
                "use mode 'bm25' or 'auto'"
            )
        lexical_only = req.mode in ("bm25", "lexical")
        want_visual = req.mode in ("vector", "hybrid") or (req.mode == "auto" and page_configured)
        plan = _Plan(mode="bm25" if lexical_only else "economy", visual=False, dense=False)
        if not lexical_only:
            if m.dense is not None:
                plan.dense = True
                served = dense_languages(getattr(m.dense, "model_id", None), self.settings.dense_languages)
                lang = query_language(req.query)
                if "*" not in served and lang not in served:
                    # A model that does not know the query's language only adds noise to the
                    # fusion (measured: CMRC2018 hybrid 0.744 against BM25 0.986).
                    plan.dense = False
                    plan.notes.append(f"dense_skipped: query language {lang} is not served by "
                                      f"{getattr(m.dense, 'model_id', 'the dense model')} "
                                      f"(serves {', '.join(served)}; RAGSPINE_DENSE_LANGUAGES)")
            elif "dense" in m.errors:
                plan.degraded.append(f"dense_unavailable: {m.errors['dense']}")
        if want_visual:
            if m.page is not None:
                plan.visual = True
                plan.mode = req.mode if req.mode in ("vector", "hybrid") else "hybrid"
            elif "page" in m.errors:
                plan.degraded.append(f"visual_unavailable: page model failed to load ({m.errors['page']}); "
                                     "answered from the CPU path")
            elif req.mode == "hybrid" and m.dense is not None:
                plan.mode = "hybrid"  # no page model configured: hybrid is BM25 + dense
            else:
                plan.degraded.append("visual_unavailable: no page model configured; answered from the CPU path")
        return plan

    def search(self, req: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        if req.expand is not None:  # never silently ignored: the graph runs it (Engine.search)
            raise InvalidRequestError("'expand' needs the relation graph: search through Engine.search")
        preds, _ = self.validate(req)
        plan = self._plan(req)
        timings: dict[str, float] = {}
        queries = self._encode_query(req, plan, timings)
        hits = self._search(req, preds, plan, queries, timings)
        relaxed = False
        if not hits and preds and req.allow_unfiltered_fallback:
            hits = self._search(req, [], plan, queries, timings)
            relaxed = True
            plan.degraded.append("filters_relaxed: no hit matched the filters; showing unfiltered results")
        timings["total"] = round((time.perf_counter() - t0) * 1000, 3)
        return SearchResponse(
            hits=hits,
            mode=plan.mode,
            degraded=bool(plan.degraded),
            degraded_reasons=plan.degraded,
            filters_relaxed=relaxed,
            timings_ms=timings,
            notes=plan.notes,
        )

    def _encode_query(self, req: SearchRequest, plan: _Plan, timings: dict[str, float]) -> dict[str, Any]:
        """Query vectors of the model channels; a model that fails drops its channel (degraded)."""
        out: dict[str, Any] = {}
        if plan.visual:
            t = time.perf_counter()
            try:
                q = self.models.page.encode_queries([req.query])[0]  # (n_tokens, dim)
                out["visual"] = np.asarray(q, dtype=np.float32)
            except Exception as e:
                logger.warning("visual channel dropped: %s", describe(e))
                plan.visual = False
                plan.mode = "economy"
                plan.degraded.append(f"visual_unavailable: query encoding failed ({describe(e)}); "
                                     "answered from the CPU path")
            timings["encode_visual"] = round((time.perf_counter() - t) * 1000, 3)
        out.update(self._encode_dense(req, plan, timings))
        return out

    def _encode_dense(self, req: SearchRequest, plan: _Plan, timings: dict[str, float]) -> dict[str, Any]:
        """The dense query vector, when the plan's lexical side uses it (not in ``vector`` mode:
        a fallback to the CPU path encodes it then)."""
        out: dict[str, Any] = {}
        if plan.dense and plan.mode != "vector":
            t = time.perf_counter()
            try:
                out["dense"] = np.asarray(self.models.dense.encode([req.query], kind="query")[0], dtype=np.float32)
            except Exception as e:
                logger.warning("dense channel dropped: %s", describe(e))
                plan.dense = False
                plan.degraded.append(f"dense_unavailable: query encoding failed ({describe(e)})")
            timings["encode_dense"] = round((time.perf_counter() - t) * 1000, 3)
        return out

    def _search(
        self,
        req: SearchRequest,
        preds: list[Predicate],
        plan: _Plan,
        queries: dict[str, Any],
        timings: dict[str, float],
    ) -> list[SearchHit]:
        if self.lexical is not None and not plan.visual and not plan.dense and plan.mode != "vector":
            fast = self._search_lexical(req, preds, plan, timings)
            if fast is not None:
                return fast
        s = self.settings
        qv = query_vector(req.query, counts=s.bm25_query_counts)
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * s.max_top_k)
        sparse = self.lexical if self.lexical is not None else self.store
        per_lib: list[list[PageKey]] = []
        cands: dict[PageKey, _Cand] = {}
        lexical = plan.mode != "vector"
        visual_ran = False
        t_store = time.perf_counter()
        for lib in req.libraries:
            active = self.libraries.active_versions(lib)
            lm = library_models(self.libraries.get(lib), self.models)
            where_chunk = Where(kind=KIND_CHUNK, live=True, predicates=tuple(preds))
            where_page = Where(kind=KIND_PAGE, live=True, predicates=tuple(preds))

            def current(h: Hit) -> bool:
                p = h.payload
                return active.get(p.get("doc_id")) == p.get("version") and not point_restricted(p)

            def page_key(h: Hit) -> PageKey:
                return (lib, h.payload["doc_id"], int(h.payload["page"]))

            def chunk_channel(hits: list[Hit], score_key: str) -> list[PageKey]:
                rank: list[PageKey] = []
                for h in sorted(hits, key=lambda h: (-h.score, h.payload.get("chunk_id", ""))):
                    key = page_key(h)
                    c = cands.setdefault(key, _Cand())
                    if c.chunk_id is None:
                        c.chunk_id = h.id
                    if score_key not in c.scores:  # a page's best passage only
                        c.scores[score_key] = h.score
                        rank.append(key)
                return rank

            def page_channel(hits: list[Hit], score_key: str) -> list[PageKey]:
                rank: list[PageKey] = []
                for h in sorted(hits, key=lambda h: (-h.score, h.payload["doc_id"], h.payload["page"])):
                    key = page_key(h)
                    c = cands.setdefault(key, _Cand())
                    c.page_id = h.id
                    c.scores[score_key] = h.score
                    rank.append(key)
                return rank

            ranks: list[list[PageKey]] = []
            weights: list[float] = []
            dense_runs = (lexical and plan.dense and "dense" in queries and lm.dense is not None
                          and s.dense_weight > 0)
            visual_runs = (plan.visual and "visual" in queries and lm.page is not None
                           and (s.visual_weight > 0 or plan.mode == "vector"))
            chunk_weight = s.passage_weight(alone=not (dense_runs or visual_runs))
            # A channel weighted 0 does not rank (RAGSPINE_BM25_CHUNK_WEIGHT / _PAGE_WEIGHT, ...);
            # the passage search runs anyway: it finds each page's best passage to cite.
            if lexical and qv.indices:
                hits = sparse.search_sparse(lib, SPARSE_CHUNK, qv, where_chunk, limit, fields=_RANK_FIELDS)
                passages = chunk_channel([h for h in hits if current(h)], "bm25")
                if chunk_weight > 0:
                    ranks.append(passages)
                    weights.append(chunk_weight)
            if lexical and qv.indices and s.bm25_page_weight > 0:
                hits = sparse.search_sparse(lib, SPARSE_PAGE, qv, where_page, limit, fields=_RANK_FIELDS)
                ranks.append(page_channel([h for h in hits if current(h)], "bm25_page"))
                weights.append(s.bm25_page_weight)
            if dense_runs:
                hits = self.store.search_dense(lib, DENSE_CHUNK, queries["dense"].tolist(), where_chunk, limit,
                                               fields=_RANK_FIELDS)
                ranks.append(chunk_channel([h for h in hits if current(h)], "dense"))
                weights.append(s.dense_weight)
            if plan.visual and "visual" in queries:
                if lm.page is None:
                    why = lm.page_missing or "it was created without a page model"
                    reason = f"visual_unavailable: library '{lib}' has no usable page vectors ({why})"
                    if req.mode in ("vector", "hybrid") and reason not in plan.degraded:
                        plan.degraded.append(reason)
                elif s.visual_weight > 0 or plan.mode == "vector":
                    first_field, first_query = first_stage_query(queries["visual"], lm)
                    # Exact MaxSim costs ~0.15 ms a page on 2 cores (int8 column): the visual
                    # channel ranks the first stage's candidates only, never more than the
                    # other channels' depth, and never fewer than the answer needs.
                    depth = max(req.top_k, s.rerank_depth) if req.rerank else req.top_k
                    prefetch = s.prefetch_for(lm.pooling)
                    vlimit = min(limit, max(depth, prefetch)) if first_field else limit
                    hits = self.store.search_multivector(
                        lib, queries["visual"].tolist(), where_page, vlimit,
                        full_field=PAGE_FULL, pooled_field=first_field, prefetch_query=first_query,
                        prefetch_limit=max(prefetch, vlimit), fields=_RANK_FIELDS,
                        prefetch_oversampling=fde_oversampling(lm.fde_quantization) if first_query else None,
                    )
                    ranks.append(page_channel([h for h in hits if current(h)], "visual"))
                    visual_ran = True
                    weights.append(s.visual_weight if plan.mode != "vector" else 1.0)
            # Equal fused scores (ranks 1+2 against 2+1) go to the page whose best passage has
            # the higher BM25 score (the tie-break rule of scoring.fusion).
            fused = rrf(ranks, k=s.rrf_k, weights=weights, tiebreak=_passage_bm25(cands)) if ranks else []
            for key, score in fused:
                cands[key].scores["fused"] = score
            per_lib.append([key for key, _ in fused])
        timings["channels"] = round((time.perf_counter() - t_store) * 1000, 3)
        if plan.mode == "hybrid" and plan.visual and not visual_ran and not plan.dense:
            plan.mode = "economy"  # no library had page vectors to search: say what ran
        if len(per_lib) == 1:
            order = per_lib[0]
        else:
            fused_all = rrf(per_lib, k=s.rrf_k)
            order = [key for key, _ in fused_all]
            for key, score in fused_all:
                cands[key].scores["fused"] = score
        if not order and plan.mode == "vector":
            return self._vector_fallback(req, preds, plan, queries, timings)
        depth = max(req.top_k, s.rerank_depth) if req.rerank else req.top_k
        head = self._hits(req, order[:depth], cands, timings)
        if req.rerank:
            head = self._rerank(req, head, plan, timings)
        return head[: req.top_k]

    def _search_lexical(self, req: SearchRequest, preds: list[Predicate], plan: _Plan,
                        timings: dict[str, float]) -> list[SearchHit] | None:
        """BM25-only plans through the in-memory index: each library's fused page ranking from
        :meth:`LexicalIndex.rank_pages` (the ranking the channel code below builds from two
        sparse searches, in numpy), cut at ``depth``. ``None``: the index cannot answer now
        (being built, over its memory bound, a filter it cannot evaluate) - the store path runs."""
        assert self.lexical is not None
        s = self.settings
        t = time.perf_counter()
        qv = query_vector(req.query, counts=s.bm25_query_counts)
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * s.max_top_k)
        depth = max(req.top_k, s.rerank_depth) if req.rerank else req.top_k
        cands: dict[PageKey, _Cand] = {}
        per_lib: list[list[PageKey]] = []
        for lib in req.libraries:
            ranked = self.lexical.rank_pages(lib, qv, preds, limit, chunk_weight=s.passage_weight(alone=True),
                                             page_weight=s.bm25_page_weight, rrf_k=s.rrf_k, depth=depth)
            if ranked is None:
                return None
            keys: list[PageKey] = []
            for r in ranked:
                key = (lib, r.doc_id, r.page)
                scores: dict[str, float | None] = {"fused": r.fused}
                if r.bm25 is not None:
                    scores["bm25"] = r.bm25
                if r.bm25_page is not None:
                    scores["bm25_page"] = r.bm25_page
                cands[key] = _Cand(chunk_id=r.chunk_point, page_id=r.page_point, scores=scores)
                keys.append(key)
            per_lib.append(keys)
        timings["channels"] = round((time.perf_counter() - t) * 1000, 3)
        if len(per_lib) == 1:
            order = per_lib[0]
        else:  # each library's first ``depth`` pages decide the fused first ``depth``
            fused_all = rrf(per_lib, k=s.rrf_k)
            order = [key for key, _ in fused_all]
            for key, score in fused_all:
                cands[key].scores["fused"] = score
        head = self._hits(req, order[:depth], cands, timings)
        if req.rerank:
            head = self._rerank(req, head, plan, timings)
        return head[: req.top_k]

    def _vector_fallback(self, req: SearchRequest, preds: list[Predicate], plan: _Plan,
                         queries: dict[str, Any], timings: dict[str, float]) -> list[SearchHit]:
        """Mode ``vector`` whose libraries have no usable page vectors: the CPU path, degraded."""
        if not any(r.startswith("visual_unavailable") for r in plan.degraded):
            return []
        plan.mode = "economy"
        queries = {**queries, **self._encode_dense(req, plan, timings)}
        return self._search(req, preds, plan, queries, timings)

    def _hits(self, req: SearchRequest, keys: list[PageKey], cands: dict[PageKey, _Cand],
              timings: dict[str, float]) -> list[SearchHit]:
        """Citations for the ranked pages: one retrieve per library of the passage (or page)
        points of just these pages."""
        t = time.perf_counter()
        qtoks: list[str] | None = None
        want: dict[str, list[str]] = {}
        for key in keys:
            c = cands[key]
            want.setdefault(key[0], []).append(c.chunk_id or c.page_id or "")
        payloads: dict[tuple[str, str], dict[str, Any]] = {}
        for lib, ids in want.items():
            ids = [i for i in ids if i]
            if self.lexical is not None:  # cached: a point's payload never changes once live
                got = self.lexical.payloads(lib, ids)
            else:
                got = {r.id: r.payload for r in self.store.retrieve(lib, ids)}
            for i, p in got.items():
                payloads[(lib, i)] = p
        out: list[SearchHit] = []
        for key in keys:
            c = cands[key]
            p = payloads.get((key[0], c.chunk_id or c.page_id or ""))
            if p is None:  # deleted between ranking and fetching: not a hit any more
                continue
            if c.chunk_id is None:
                if qtoks is None:
                    qtoks = tokenize(req.query)
                p = best_passage(qtoks, p)
            if point_restricted(p):  # defence in depth: never leaves
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
                        "dense": c.scores.get("dense"),
                        "visual": c.scores.get("visual"),
                        "fused": c.scores.get("fused"),
                        "rerank": None,
                    },
                    version=int(p["version"]),
                    metadata=dict(p.get("meta") or {}),
                    classification=p.get(CLASSIFICATION),
                    text_source=p.get("text_source", "pdf"),
                )
            )
        timings["fetch"] = round((time.perf_counter() - t) * 1000, 3)
        return out

    def rerank(self, query: str, hits: list[SearchHit]) -> tuple[list[SearchHit], list[str], list[str], float]:
        """Rerank hits found elsewhere (the query chain's fused variants) with ``query``:
        ``(hits, degraded reasons, notes, ms)``, under the same contract as ``rerank: true``."""
        plan = _Plan(mode="", visual=False, dense=False)
        timings: dict[str, float] = {}
        req = SearchRequest.model_construct(query=query)
        out = self._rerank(req, hits, plan, timings)
        return out, plan.degraded, plan.notes, timings.get("rerank", 0.0)

    def _rerank(self, req: SearchRequest, hits: list[SearchHit], plan: _Plan,
                timings: dict[str, float]) -> list[SearchHit]:
        """The rerank contract: RESTRICTED text never reaches a model (``_hits`` already left it
        out); any failure keeps the fused order and says ``rerank_failed``; never raises. A
        query in a language the reranker does not serve keeps the fused order (a note says so)."""
        t = time.perf_counter()
        try:
            reranker = self.models.reranker()
        except Exception as e:  # a factory that raises is a failure like any other
            reranker = None
            self.models.errors["reranker"] = describe(e)
        if reranker is None:
            why = self.models.errors.get("reranker") or "no reranker configured (RAGSPINE_RERANKER=none)"
            plan.degraded.append(f"rerank_unavailable: {why}")
            return hits
        model_id = getattr(reranker, "model_id", None)
        served = reranker_languages(model_id, self.settings.reranker_languages)
        lang = query_language(req.query)
        if "*" not in served and lang not in served:
            # An English cross-encoder scores Chinese text near-randomly: the fused order is better.
            plan.notes.append(f"rerank_skipped: query language {lang} is not served by {model_id or 'the reranker'} "
                              f"(serves {', '.join(served)}; RAGSPINE_RERANKER_LANGUAGES)")
            return hits
        head = [h for h in hits if not h.restricted()]
        if not head:
            return hits
        try:
            scores = list(reranker.score(req.query, [h.text for h in head]))
            if len(scores) != len(head):
                raise ValueError(f"reranker returned {len(scores)} scores for {len(head)} candidates")
            vals = [float(x) for x in scores]
            if not all(math.isfinite(v) for v in vals):
                raise ValueError("reranker returned a non-finite score")
        except Exception as e:
            logger.warning("rerank failed, fused order kept: %s", describe(e))
            plan.degraded.append(f"rerank_failed: {describe(e)}; fused order kept")
            timings["rerank"] = round((time.perf_counter() - t) * 1000, 3)
            return hits
        for h, v in zip(head, vals):
            h.scores["rerank"] = v
        # Stable: equal rerank scores keep their fused order.
        order = sorted(range(len(head)), key=lambda i: -vals[i])
        timings["rerank"] = round((time.perf_counter() - t) * 1000, 3)
        return [head[i] for i in order]
