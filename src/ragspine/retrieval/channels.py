"""The channel runs of a search: per library, BM25 over passages and over pages, dense passages
and page-image MaxSim, each a page ranking, fused by weighted RRF, or BM25 and dense by a convex
combination of their normalised scores (RAGSPINE_DENSE_FUSION); then libraries fused by RRF.
The BM25-only plan takes the in-memory index's fused ranking instead when it can answer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragspine.catalog import DENSE_CHUNK, PAGE_FULL, first_stage_query, library_models
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.plan import Plan
from ragspine.retrieval.request import CANDIDATE_FACTOR, MIN_CANDIDATES, PageKey, SearchHit, SearchRequest
from ragspine.scoring.bm25 import query_vector
from ragspine.scoring.fusion import convex, minmax_bounds, rrf
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Hit, Where, fde_oversampling
from ragspine.store.predicates import Predicate

if TYPE_CHECKING:
    from ragspine.retrieval.search import Searcher


#: Payload keys a channel needs to rank: which page a hit is, whether it is current, and
#: (chunks) which passage. Page text is fetched only for the hits that are returned.
RANK_FIELDS = ("doc_id", "version", "page", "sensitivity", CLASSIFICATION, "chunk_id")


@dataclass
class Cand:
    """A page being ranked: its best passage's point id per channel, and its channel scores."""

    chunk_id: str | None = None  # point id of the best passage (lexical channel first)
    chunk_sort: str = ""
    page_id: str | None = None  # point id of the page point
    scores: dict[str, float | None] = field(default_factory=dict)


def passage_bm25(cands: dict[PageKey, Cand]) -> dict[PageKey, float | None]:
    """The fusion tie-break score of each page: its best passage's BM25 score."""
    return {key: c.scores.get("bm25") for key, c in cands.items()}



class ChannelRuns:
    """The channel runs of :class:`~ragspine.retrieval.search.Searcher` (a mixin: they share
    its settings, store, catalog, models and lexical index)."""

    def _search(
        self: Searcher,
        req: SearchRequest,
        preds: list[Predicate],
        plan: Plan,
        queries: dict[str, Any],
        timings: dict[str, float],
    ) -> list[SearchHit]:
        if self.lexical is not None and not plan.visual and not plan.dense and plan.mode != "vector":
            fast = self._search_lexical(req, preds, plan, timings)
            if fast is not None:
                return fast
        s = self.settings
        qv = query_vector(req.query, counts=s.bm25_query_counts, drop_question_words=s.bm25_drop_question_words)
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * s.max_top_k)
        sparse = self.lexical if self.lexical is not None else self.store
        per_lib: list[list[PageKey]] = []
        cands: dict[PageKey, Cand] = {}
        lexical = plan.mode != "vector"
        visual_ran = False
        t_store = time.perf_counter()
        for lib in req.libraries:
            active = self.libraries.active_versions(lib)
            rec = self.libraries.get(lib)
            lm = library_models(rec, self.models)
            where_chunk = Where(kind=KIND_CHUNK, live=True, predicates=tuple(preds))
            where_page = Where(kind=KIND_PAGE, live=True, predicates=tuple(preds))

            def current(h: Hit) -> bool:
                p = h.payload
                return active.get(p.get("doc_id")) == p.get("version") and not point_restricted(p)

            def page_key(h: Hit) -> PageKey:
                return (lib, h.payload["doc_id"], int(h.payload["page"]))

            # Each channel's score bounds for the convex fusion (only it needs them): its best
            # hit and its MIN_CANDIDATES-th, whatever ``limit`` the request's top_k asked for.
            bounds: dict[str, tuple[float, float]] = {}

            def chunk_channel(hits: list[Hit], score_key: str) -> list[PageKey]:
                rank: list[PageKey] = []
                hits = sorted(hits, key=lambda h: (-h.score, h.payload.get("chunk_id", "")))
                if hits and use_convex:
                    bounds[score_key] = minmax_bounds([h.score for h in hits], MIN_CANDIDATES)
                for h in hits:
                    key = page_key(h)
                    c = cands.setdefault(key, Cand())
                    if c.chunk_id is None:
                        c.chunk_id = h.id
                    if score_key not in c.scores:  # a page's best passage only
                        c.scores[score_key] = h.score
                        rank.append(key)
                return rank

            def page_channel(hits: list[Hit], score_key: str) -> list[PageKey]:
                rank: list[PageKey] = []
                hits = sorted(hits, key=lambda h: (-h.score, h.payload["doc_id"], h.payload["page"]))
                if hits and use_convex:
                    bounds[score_key] = minmax_bounds([h.score for h in hits], MIN_CANDIDATES)
                for h in hits:
                    key = page_key(h)
                    c = cands.setdefault(key, Cand())
                    c.page_id = h.id
                    c.scores[score_key] = h.score
                    rank.append(key)
                return rank

            ranks: list[list[PageKey]] = []
            weights: list[float] = []
            names: list[str] = []  # each ranking's channel (its score key)
            dense_on = lexical and plan.dense and "dense" in queries and lm.dense is not None
            visual_runs = (plan.visual and "visual" in queries and lm.page is not None
                           and (s.visual_weight > 0 or plan.mode == "vector"))
            # BM25 + dense without the visual channel: the fusion RAGSPINE_DENSE_FUSION names, with
            # its weights; a dense weight of 0 leaves BM25 ranking alone.
            convex_fusion = dense_on and not visual_runs and s.dense_fusion == "convex"
            dense_weight = s.convex_dense_weight if convex_fusion else s.dense_weight
            dense_runs = dense_on and dense_weight > 0
            use_convex = convex_fusion and dense_runs
            if use_convex:
                chunk_weight, page_weight = s.convex_passage_weight, s.convex_page_weight
            else:
                page_weight = s.bm25_page_weight
                chunk_weight = s.passage_weight(alone=not (dense_runs or visual_runs))
            # A channel weighted 0 does not rank (RAGSPINE_BM25_CHUNK_WEIGHT / _PAGE_WEIGHT, ...);
            # the passage search runs anyway: it finds each page's best passage to cite.
            if lexical and qv.indices:
                hits = sparse.search_sparse(lib, SPARSE_CHUNK, qv, where_chunk, limit, fields=RANK_FIELDS)
                passages = chunk_channel([h for h in hits if current(h)], "bm25")
                if chunk_weight > 0:
                    ranks.append(passages)
                    weights.append(chunk_weight)
                    names.append("bm25")
            if lexical and qv.indices and page_weight > 0:
                hits = sparse.search_sparse(lib, SPARSE_PAGE, qv, where_page, limit, fields=RANK_FIELDS)
                ranks.append(page_channel([h for h in hits if current(h)], "bm25_page"))
                weights.append(page_weight)
                names.append("bm25_page")
            if dense_runs:
                n_passages = rec.stats[SPARSE_CHUNK].count if SPARSE_CHUNK in rec.stats else 0
                hits = self.store.search_dense(lib, DENSE_CHUNK, queries["dense"].tolist(), where_chunk, limit,
                                               fields=RANK_FIELDS, exact=n_passages <= s.dense_exact_max_passages)
                ranks.append(chunk_channel([h for h in hits if current(h)], "dense"))
                weights.append(dense_weight)
                names.append("dense")
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
                        prefetch_limit=max(prefetch, vlimit), fields=RANK_FIELDS,
                        prefetch_oversampling=fde_oversampling(lm.fde_quantization) if first_query else None,
                    )
                    ranks.append(page_channel([h for h in hits if current(h)], "visual"))
                    visual_ran = True
                    weights.append(s.visual_weight if plan.mode != "vector" else 1.0)
                    names.append("visual")
            # Equal fused scores (ranks 1+2 against 2+1) go to the page whose best passage has
            # the higher BM25 score (the tie-break rule of scoring.fusion).
            tiebreak = passage_bm25(cands)
            if not ranks:
                fused = []
            elif use_convex:
                channels = [{key: float(cands[key].scores[name] or 0.0) for key in rank}
                            for rank, name in zip(ranks, names)]
                # a channel that found nothing has no bounds and nothing to normalise
                fused = convex(channels, weights, bounds=[bounds.get(name, (0.0, 0.0)) for name in names],
                               tiebreak=tiebreak)
            else:
                fused = rrf(ranks, k=s.fusion_k(dense_runs, visual_runs), weights=weights, tiebreak=tiebreak)
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

    def _search_lexical(self: Searcher, req: SearchRequest, preds: list[Predicate], plan: Plan,
                        timings: dict[str, float]) -> list[SearchHit] | None:
        """BM25-only plans through the in-memory index: each library's fused page ranking from
        :meth:`LexicalIndex.rank_pages` (the ranking the channel code below builds from two
        sparse searches, in numpy), cut at ``depth``. ``None``: the index cannot answer now
        (being built, over its memory bound, a filter it cannot evaluate) - the store path runs."""
        assert self.lexical is not None
        s = self.settings
        t = time.perf_counter()
        qv = query_vector(req.query, counts=s.bm25_query_counts, drop_question_words=s.bm25_drop_question_words)
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * s.max_top_k)
        depth = max(req.top_k, s.rerank_depth) if req.rerank else req.top_k
        cands: dict[PageKey, Cand] = {}
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
                cands[key] = Cand(chunk_id=r.chunk_point, page_id=r.page_point, scores=scores)
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

    def _vector_fallback(self: Searcher, req: SearchRequest, preds: list[Predicate], plan: Plan,
                         queries: dict[str, Any], timings: dict[str, float]) -> list[SearchHit]:
        """Mode ``vector`` whose libraries have no usable page vectors: the CPU path, degraded."""
        if not any(r.startswith("visual_unavailable") for r in plan.degraded):
            return []
        plan.mode = "economy"
        queries = {**queries, **self._encode_dense(req, plan, timings)}
        return self._search(req, preds, plan, queries, timings)
