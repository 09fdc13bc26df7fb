"""The query chain around a search: rewrite → search → rerank → grade and act → post-chain → gap log.

Every request goes through :meth:`QueryChain.search` (``Engine.search``). A request that asks for
none of the chain's steps is the plain search, plus the gap log when it finds nothing.

- **Rewrite** (``rewrite``): the query and its glossary/alias variants
  (:mod:`ragspine.chain.rewrite`) are each searched without rerank; their page rankings fuse
  with the one RRF (:func:`ragspine.scoring.fusion.rrf`, equal weights, the original's ranking
  first); each hit lists the variants that found it (``found_by``) and its ``fused`` score is
  the fused one; then the fused head is reranked once, with the original query.
- **Corrective** (``corrective``): grade the answer (:mod:`ragspine.chain.grade`); while weak
  and fewer than :data:`MAX_ACTIONS` actions were taken, act: drop the filters (only with
  ``allow_unfiltered_fallback``), else rewrite (when not already rewriting and the query has
  variants), grading again after each; still weak: abstain - no hits, ``abstained: true``, and
  the reason.
- **Post-chain** (``postprocess``): MMR over ``top_k × RAGSPINE_MMR_POOL_FACTOR`` candidates
  and/or lost-in-the-middle ordering, in the order given (:mod:`ragspine.chain.postprocess`).
- **Gap log**: an answer with no hits, or an abstention, is counted in each library searched.

RESTRICTED content cannot enter: every hit comes from the searcher's exits, which drop it; the
steps here only reorder, drop or count hits, and the gap log keeps only the user's query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragspine.chain.gaps import GapLog
from ragspine.chain.glossary import Glossaries
from ragspine.chain.grade import Grade, grade, specifics
from ragspine.models.registry import grade_similarity
from ragspine.chain.postprocess import lost_in_middle, mmr
from ragspine.chain.rewrite import Rewriter, Variant
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.ocr.words import known_word
from ragspine.retrieval.search import PageKey, SearchHit, SearchRequest, SearchResponse, Searcher
from ragspine.scoring.fusion import rrf
from ragspine.scoring.page_refs import page_refs
from ragspine.scoring.query_text import search_text

logger = logging.getLogger(__name__)

#: The corrective loop acts at most this many times before it answers or abstains.
MAX_ACTIONS = 2
FILTERS_RELAXED = "filters_relaxed: no hit matched the filters; showing unfiltered results"


@dataclass
class _Run:
    """One search as the chain ran it: the response, and the queries it searched."""

    response: SearchResponse
    variants: list[Variant] = field(default_factory=list)


class QueryChain:
    def __init__(
        self,
        settings: Settings,
        searcher: Searcher,
        glossaries: Glossaries,
        gaps: GapLog | None,
        synonym_groups: Callable[[str, list[dict[str, Any]]], list[tuple[str, ...]]],
        base: Callable[[SearchRequest], SearchResponse] | None = None,
    ) -> None:
        self.settings = settings
        self.searcher = searcher
        self.glossaries = glossaries
        self.gaps = gaps
        self.synonym_groups = synonym_groups
        #: One search (the graph's expansion, or the searcher); the chain runs it per variant.
        self.base = base if base is not None else searcher.search

    def rewriter(self, libraries: list[str], scope: dict[str, list[dict[str, Any]]] | None = None) -> Rewriter:
        """The rewriter over the libraries' glossaries and graph aliases; with an API key's
        ``scope``, the aliases of the documents it lets through only (the variants are shown)."""
        glossary = [e.names() for lib in libraries for e in self.glossaries.entries(lib)]
        graph = [g for lib in libraries for g in self.synonym_groups(lib, (scope or {}).get(lib, []))]
        return Rewriter(glossary=glossary, graph=graph, max_queries=self.settings.rewrite_max_queries)

    def search(self, req: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        rewrite = req.rewrite if req.rewrite is not None else self.settings.rewrite
        if not (rewrite or req.corrective or req.postprocess):
            res = self.base(req)
            self._record_gap(req, res)
            return res
        pool = req.top_k
        if "mmr" in req.postprocess:
            pool = min(req.top_k * self.settings.mmr_pool_factor, self.settings.max_top_k)
        rewriter = self.rewriter(req.libraries, req.scope) if (rewrite or req.corrective) else None
        if not req.corrective:
            run = self._run(req, pool, rewriter if rewrite else None, req.filters, req.allow_unfiltered_fallback)
            res = run.response
        else:
            run = self._corrective(req, pool, rewriter, rewrite)
            res = run.response
        if rewrite or run.variants[1:]:
            res.queries = [v.to_json() for v in run.variants]
        if req.postprocess and not res.abstained:
            res.hits = self._postprocess(req, res.hits)
            res.postprocess = list(req.postprocess)
        res.hits = res.hits[: req.top_k]
        res.timings_ms["total"] = round((time.perf_counter() - t0) * 1000, 3)
        self._record_gap(req, res)
        return res

    # -- one search, with or without variants ---------------------------------------------------

    def _run(self, req: SearchRequest, pool: int, rewriter: Rewriter | None, filters: list[dict[str, Any]],
             fallback: bool) -> _Run:
        variants = rewriter.variants(req.query) if rewriter else [Variant(req.query)]
        one = req.model_copy(update={"top_k": pool, "filters": filters, "allow_unfiltered_fallback": fallback,
                                     "rewrite": False, "corrective": False, "postprocess": [],
                                     "rerank": req.rerank and len(variants) == 1})
        if len(variants) == 1:
            return _Run(self.base(one), variants)
        responses: list[SearchResponse] = []
        searched: list[Variant] = []
        for v in variants:
            try:
                r = self.base(one if not searched else one.model_copy(update={"query": v.query}))
            except InvalidRequestError as e:  # a variant longer than the query limit, say
                if not searched:
                    raise
                logger.info("query variant %r not searched: %s", v.query[:80], e.detail)
                continue
            responses.append(r)
            searched.append(v)
        res = _fuse(responses, self.settings.rrf_k)
        if req.rerank:
            depth = max(pool, self.settings.rerank_depth)
            head, degraded, notes, ms = self.searcher.rerank(self._searched(req.query), res.hits[:depth])
            res.hits = head + res.hits[depth:]
            res.degraded_reasons.extend(r for r in degraded if r not in res.degraded_reasons)
            res.notes.extend(n for n in notes if n not in res.notes)
            res.degraded = bool(res.degraded_reasons)
            res.timings_ms["rerank"] = ms
        return _Run(res, searched)

    # -- the corrective loop --------------------------------------------------------------------

    def _corrective(self, req: SearchRequest, pool: int, rewriter: Rewriter | None, rewrite: bool) -> _Run:
        s = self.settings
        filters = req.filters
        run = self._run(req, pool, rewriter if rewrite else None, filters, False)
        g = self._grade(run, req.scope)
        steps: list[dict[str, Any]] = [{"step": "search", **g.to_json()}]
        relaxed = False
        for _ in range(MAX_ACTIONS):
            if g.ok:
                break
            if filters and req.allow_unfiltered_fallback:
                action, filters, relaxed = "drop_filters", [], True
            elif not rewrite and rewriter is not None and len(rewriter.variants(req.query)) > 1:
                action, rewrite = "rewrite", True
            else:
                break
            run = self._run(req, pool, rewriter if rewrite else None, filters, False)
            g = self._grade(run, req.scope)
            steps.append({"step": action, **g.to_json()})
        res = run.response
        if relaxed:
            res.filters_relaxed = True
            if FILTERS_RELAXED not in res.degraded_reasons:
                res.degraded_reasons.append(FILTERS_RELAXED)
            res.degraded = True
        res.corrective = {"steps": steps, "actions": len(steps) - 1,
                          "min_coverage": s.corrective_min_coverage, "depth": s.corrective_depth}
        if not g.ok:
            res.hits = []
            res.abstained = True
            res.corrective["reason"] = g.reason()
        return run

    def _grade(self, run: _Run, scope: Mapping[str, Any]) -> Grade:
        s = self.settings
        dense = self.searcher.models.dense
        low, rescue = grade_similarity(getattr(dense, "model_id", None), s.corrective_min_similarity,
                                       s.corrective_rescue_similarity)
        # The grade judges what was searched: an instruction about the answer's form ("write the
        # answer in int format") is in no passage, and would count as missing terms.
        queries = [self._searched(v.query) for v in run.variants]
        hits = run.response.hits
        unmentioned: list[str] = []
        missing_pages: tuple[int, ...] = ()
        fixes: dict[str, str] = {}
        lib = hits[0].library_id if hits else None
        # Not under a key's filters: whether a hidden page mentions a word must not show, nor
        # its words correct a misspelling.
        if lib is not None and lib not in scope and queries:
            if s.spelling_corrections:  # "Neflix" is asked about as Netflix, "Companay" as company
                fixes = self.searcher.respelt(lib, queries[0], names_as_words=True)
            if s.corrective_specifics:
                wanted = list(dict.fromkeys(fixes.get(t, t) for t in specifics(queries[0], known_word)))
                held = self.searcher.document_terms(lib, hits[0].doc_id, wanted) if wanted else None
                if held is not None:
                    unmentioned = [t for t in wanted if t not in held]
        top_named = False
        if hits and queries:
            refs = page_refs(queries[0])
            if refs:
                top = hits[0]
                if self.searcher.document_has_pages(top.library_id, top.doc_id, refs) is False:
                    missing_pages = tuple(sorted(refs, key=lambda n: (n < 0, abs(n))))
                top_named = top.page in self.searcher.named_pages(top.library_id, top.doc_id, refs)
        return grade(queries, hits, min_coverage=s.corrective_min_coverage, depth=s.corrective_depth,
                     min_similarity=low, rescue_similarity=rescue, unmentioned=unmentioned,
                     missing_pages=missing_pages, respelt=fixes, top_named=top_named)

    def _searched(self, query: str) -> str:
        """What of ``query`` the channels search (``RAGSPINE_DROP_ANSWER_INSTRUCTIONS``)."""
        return search_text(query) if self.settings.drop_answer_instructions else query

    # -- after the search -----------------------------------------------------------------------

    def _postprocess(self, req: SearchRequest, hits: list[SearchHit]) -> list[SearchHit]:
        for step in req.postprocess:
            if step == "mmr":
                hits = mmr(hits, req.top_k, self.settings.mmr_lambda)
            elif step == "lost_in_middle":
                hits = lost_in_middle(hits[: req.top_k])
        return hits

    def _record_gap(self, req: SearchRequest, res: SearchResponse) -> None:
        if self.gaps is None or res.hits:
            return
        reason = f"abstained: {res.corrective['reason']}" if res.abstained and res.corrective else "no_hits"
        for lib in req.libraries:
            try:
                self.gaps.record(lib, req.query, req.filters, reason, scope=req.scope.get(lib, []))
            except Exception:  # the log must never fail a search
                logger.exception("knowledge-gap log: could not record a miss in library %s", lib)


def _fuse(responses: list[SearchResponse], k: int) -> SearchResponse:
    """The variants' page rankings fused by RRF; each page keeps the hit (citation, channel
    scores) of the first variant that found it, and lists every variant that did."""
    first = responses[0]
    hits: dict[PageKey, SearchHit] = {}
    found: dict[PageKey, list[int]] = {}
    for i, r in enumerate(responses):
        for h in r.hits:
            hits.setdefault(h.key(), h)
            found.setdefault(h.key(), []).append(i)
    fused = rrf([[h.key() for h in r.hits] for r in responses], k=k)
    out: list[SearchHit] = []
    for key, score in fused:
        h = hits[key]
        h.scores["fused"] = score
        h.found_by = found[key]
        out.append(h)
    degraded = list(dict.fromkeys(x for r in responses for x in r.degraded_reasons))
    notes = list(dict.fromkeys(x for r in responses for x in r.notes))
    timings: dict[str, float] = {}
    for r in responses:
        for name, ms in r.timings_ms.items():
            timings[name] = round(timings.get(name, 0.0) + ms, 3)
    return SearchResponse(hits=out, mode=first.mode, degraded=bool(degraded), degraded_reasons=degraded,
                          filters_relaxed=any(r.filters_relaxed for r in responses), timings_ms=timings,
                          expansion=first.expansion, notes=notes, searched=first.searched)
