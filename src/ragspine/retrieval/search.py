"""The query side: validate, run channels per library, fuse with RRF, filter, cite.

Everything is ranked at page level: each channel yields pages (the passage channel through
its best passage per page), channels fuse by RRF, libraries fuse by RRF, and each hit is a
page with the passage that best answers the query, cited by document, 1-based page, bbox
and chunk id.

:class:`Searcher` is split by reason to change: the request and response types
(:mod:`~ragspine.retrieval.request`), the query plan (:mod:`~ragspine.retrieval.plan`), the
channel runs and their fusion (:mod:`~ragspine.retrieval.channels`), and hit assembly - citations,
the exit filter, rerank (:mod:`~ragspine.retrieval.hits`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ragspine.catalog import Libraries
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.models.modelset import ModelSet, describe
from ragspine.retrieval.channels import ChannelRuns
from ragspine.retrieval.hits import HitAssembly, best_passage
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.retrieval.plan import Plan, plan_for
from ragspine.retrieval.request import (
    CANDIDATE_FACTOR,
    MIN_CANDIDATES,
    MODES,
    POST_STEPS,
    ExpandSpec,
    Mode,
    PageKey,
    PostStep,
    SearchHit,
    SearchRequest,
    SearchResponse,
)
from ragspine.store.base import Store
from ragspine.store.predicates import Predicate, check_types, merge_field_types, parse_filters

__all__ = ["CANDIDATE_FACTOR", "MIN_CANDIDATES", "MODES", "POST_STEPS", "ExpandSpec", "Mode", "PageKey", "Plan",
           "PostStep", "SearchHit", "SearchRequest", "SearchResponse", "Searcher", "best_passage"]

logger = logging.getLogger(__name__)


class Searcher(ChannelRuns, HitAssembly):
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

    def _plan(self, req: SearchRequest) -> Plan:
        return plan_for(req, self.models, self.settings)

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
        if self.lexical is not None and plan.mode != "vector":
            for lib in req.libraries:
                tokens = self.lexical.over_budget(lib)
                if tokens is not None:  # the store answered its BM25 channels: same ranking, slower
                    plan.notes.append(
                        f"lexical_index_skipped: library '{lib}' has {tokens} BM25 tokens, over "
                        f"RAGSPINE_LEXICAL_MAX_POSTINGS ({self.lexical.max_postings}); its BM25 channels "
                        "ran in the store (same ranking)")
        return SearchResponse(
            hits=hits,
            mode=plan.mode,
            degraded=bool(plan.degraded),
            degraded_reasons=plan.degraded,
            filters_relaxed=relaxed,
            timings_ms=timings,
            notes=plan.notes,
        )

    def _encode_query(self, req: SearchRequest, plan: Plan, timings: dict[str, float]) -> dict[str, Any]:
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

    def _encode_dense(self, req: SearchRequest, plan: Plan, timings: dict[str, float]) -> dict[str, Any]:
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
