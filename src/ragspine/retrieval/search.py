"""The query side: validate, run the channels per library, fuse, borrow from documents and
neighbours, fuse libraries, cite, rerank.

Everything is ranked at page level. :class:`Searcher` wires components with small interfaces:

- the channels (:mod:`~ragspine.retrieval.channels`): a query and a filter in, scored pages out
  (:class:`~ragspine.retrieval.channel.Channel`); the document channel scores documents;
- fusion (:mod:`~ragspine.retrieval.fusion`): a function over the channels' outputs, then the
  document prior and the neighbours' share;
- hit assembly (:class:`~ragspine.retrieval.hits.HitAssembler`): fused pages in, cited hits out;
- rerank (:class:`~ragspine.retrieval.rerank.Reranking`).

The request and response types are in :mod:`~ragspine.retrieval.request`, the query plan in
:mod:`~ragspine.retrieval.plan`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragspine.catalog import Libraries, library_models
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.models.modelset import ModelSet, describe
from ragspine.retrieval.channel import ChannelPages, ChannelQuery
from ragspine.retrieval.channels import page_channels
from ragspine.retrieval.channels.documents import DocumentChannel
from ragspine.retrieval.channels.page_numbers import PageNumbers
from ragspine.retrieval.fusion import Cand, Priors, collect, fuse, fusion_for, with_priors
from ragspine.retrieval.hits import HitAssembler, best_passage
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.retrieval.misses import MissCheck, miss_note
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
from ragspine.retrieval.rerank import Reranking
from ragspine.retrieval.vocabulary import document_holds, holds_any, library_corrections
from ragspine.scoring.bm25 import line_item_tokens, query_vector, respelt
from ragspine.scoring.fusion import rrf
from ragspine.scoring.line_items import line_items
from ragspine.scoring.page_refs import figure_refs, page_refs
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.query_text import split_instructions
from ragspine.scoring.spelling import capitalised
from ragspine.scoring.tokenizer import query_language
from ragspine.store.base import Store
from ragspine.store.predicates import Predicate, check_types, merge_field_types, parse_filters

__all__ = ["CANDIDATE_FACTOR", "MIN_CANDIDATES", "MODES", "POST_STEPS", "ExpandSpec", "Mode", "PageKey", "Plan",
           "PostStep", "SearchHit", "SearchRequest", "SearchResponse", "Searcher", "best_passage"]

logger = logging.getLogger(__name__)

#: Longest quote of a question's left-out instructions in an answer's note.
NOTE_CHARS = 200

#: Hits whose text tells the script of what the meaning channel found (the miss check).
MISS_SCRIPT_HITS = 3


@dataclass
class Trace:
    """What one search's channels saw, beyond their pages: the fusions that ranked, whether any
    BM25 channel found a page, and the dense channel's best similarity (a miss is told by them)."""

    fusions: list[str] = field(default_factory=list)
    bm25_found: bool = False
    top_dense: float | None = None
    #: Libraries whose dense channel ran: their active versions and models (the miss background).
    dense_libraries: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: Misspelt words also searched as the library's, ``(word, correction)`` in order
    #: (retrieval/vocabulary.py).
    respelt: dict[tuple[str, str], None] = field(default_factory=dict)
    #: Libraries whose BM25 query had terms added (line items, corrections): whether the
    #: library holds any of the question's own terms, which is what tells a miss.
    own_terms: dict[str, bool] = field(default_factory=dict)

    def note(self, outputs: list[ChannelPages], library: str, active: Any, lm: Any) -> None:
        for o in outputs:
            if o.name in ("bm25", "bm25_page") and o.pages and library not in self.own_terms:
                self.bm25_found = True
            if o.name == "dense":
                self.dense_libraries[library] = (active, lm)
                if o.pages:
                    top = max(p.score for p in o.pages)
                    self.top_dense = top if self.top_dense is None else max(self.top_dense, top)


def _scope_predicates(req: SearchRequest) -> dict[str, tuple[Predicate, ...]]:
    """The request's per-library key filters (:attr:`SearchRequest.scope`), parsed. They are
    not checked against the library's field types: a key's filter on a field a library lacks
    matches what Qdrant matches there (``eq``/``in``/ranges nothing, ``ne``/``nin`` all)."""
    return {lib: tuple(parse_filters(fs)) for lib, fs in req.scope.items()}


class Searcher:
    def __init__(self, settings: Settings, store: Store, libraries: Libraries, models: ModelSet | None = None,
                 lexical: LexicalIndex | None = None) -> None:
        self.settings = settings
        self.store = store
        self.libraries = libraries
        self.models = models if models is not None else ModelSet.none()
        #: In-memory BM25 (RAGSPINE_LEXICAL_INDEX=memory); None: the store's sparse search.
        self.lexical = lexical
        self.documents = DocumentChannel(libraries)
        self.page_numbers = PageNumbers(libraries)
        self.assembler = HitAssembler(settings, store, lexical)
        self.reranking = Reranking(settings, self.models)
        self.misses = MissCheck(store)

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
        # Every channel, prior and the reranker search the question without what it says about
        # its answer's form (ragspine.scoring.query_text); the caller's request keeps it all.
        searched, instructions = (split_instructions(req.query) if self.settings.drop_answer_instructions
                                  else (req.query, []))
        if instructions:
            req = req.model_copy(update={"query": searched})
        plan = self._plan(req)
        if instructions:
            said = " ".join(instructions)
            said = said if len(said) <= NOTE_CHARS else said[: NOTE_CHARS - 1] + "…"
            plan.notes.append(f"answer_instructions: left out of the search: {said!r}")
        items = line_items(req.query) if self.settings.line_item_weight > 0 and plan.mode != "vector" else ()
        if items:  # so that a balance sheet first for "return on assets" is explained
            plan.notes.append(f"line_items: BM25 also searched {', '.join(items)}")
        timings: dict[str, float] = {}
        queries = self._encode_query(req, plan, timings)
        trace = Trace()
        hits = self._search(req, preds, plan, queries, timings, trace)
        relaxed = False
        if not hits and preds and req.allow_unfiltered_fallback:
            trace = Trace()
            hits = self._search(req, [], plan, queries, timings, trace)
            relaxed = True
            plan.degraded.append("filters_relaxed: no hit matched the filters; showing unfiltered results")
        if hits and self.settings.miss_check and trace.dense_libraries and not trace.bm25_found:
            note = self._miss(req, trace, hits)
            if note is not None:
                hits = []
                plan.notes.append(note)
        if trace.respelt:
            plan.notes.append("spelling: also searched " + ", ".join(
                f"{right!r} for {wrong!r}" for wrong, right in trace.respelt))
        timings["total"] = round((time.perf_counter() - t0) * 1000, 3)
        if self.lexical is not None and plan.mode != "vector":
            for lib in req.libraries:
                tokens = self.lexical.over_budget(lib)
                if tokens is not None:  # the store answered its BM25 channels: same ranking, slower
                    # A key with a filter on the library learns nothing of what it cannot see, its
                    # size included (the count covers every document).
                    size = "is" if lib in req.scope else f"has {tokens} BM25 tokens,"
                    plan.notes.append(
                        f"lexical_index_skipped: library '{lib}' {size} over "
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
            fusion="; ".join(dict.fromkeys(trace.fusions)),
            searched=searched if instructions else None,
        )

    def respelt(self, library: str, query: str, active: Any = None, *, names_as_words: bool = False) -> dict[str, str]:
        """``word -> correction`` for ``query``'s misspelt words in ``library``: the words
        written as names against its documents' names, the others against its words
        (:mod:`~ragspine.retrieval.vocabulary`). ``names_as_words``: a name no document's name
        corrects is tried against the library's words too ("Companay" is "company"; the
        corrective grade asks, the search does not: a name one edit from a word may be a name).
        Not for a key with filters on the library."""
        active = self.libraries.active_versions(library) if active is None else active
        terms = query_tokens(query, drop_question_words=self.settings.bm25_drop_question_words)
        names = self.documents.respelt(library, query, active)
        skip = set(names) if names_as_words else set(capitalised(query))
        return {**library_corrections(self.lexical, library, terms, skip), **names}

    def named_pages(self, library: str, doc_id: str, refs: frozenset[int]) -> frozenset[int]:
        """The kept pages of ``doc_id`` that ``refs`` names (by place or printed number)."""
        return self.page_numbers.named_in(library, self.libraries.active_versions(library), doc_id, refs)

    def document_has_pages(self, library: str, doc_id: str, refs: frozenset[int]) -> bool | None:
        """Whether document ``doc_id`` has any of the pages ``refs`` names, by place in the file
        or by printed number (:class:`~ragspine.retrieval.channels.page_numbers.Numbering`);
        ``None`` where the library does not know the document."""
        return self.page_numbers.has_any(library, self.libraries.active_versions(library), doc_id, refs)

    def document_terms(self, library: str, doc_id: str, terms: Sequence[str]) -> set[str] | None:
        """The ``terms`` some passage of ``doc_id`` holds (the corrective grade asks); ``None``
        where the library's in-memory index cannot tell."""
        return document_holds(self.lexical, library, doc_id, terms)

    def rerank(self, query: str, hits: list[SearchHit]) -> tuple[list[SearchHit], list[str], list[str], float]:
        """Rerank hits found elsewhere (the query chain's fused variants) with ``query``:
        ``(hits, degraded reasons, notes, ms)``, under the same contract as ``rerank: true``."""
        return self.reranking.rerank(query, hits)

    def _search(self, req: SearchRequest, preds: list[Predicate], plan: Plan, queries: dict[str, Any],
                timings: dict[str, float], trace: Trace) -> list[SearchHit]:
        s = self.settings
        fusions = trace.fusions
        priors = Priors.of(s)
        qv = query_vector(req.query, counts=s.bm25_query_counts, drop_question_words=s.bm25_drop_question_words,
                          line_item_weight=s.line_item_weight)
        # The question's own terms, without its metrics' line items: a miss is told by them.
        own = (query_vector(req.query, counts=s.bm25_query_counts, drop_question_words=s.bm25_drop_question_words)
               if s.line_item_weight > 0 and line_items(req.query) else qv)
        limit = min(max(MIN_CANDIDATES, CANDIDATE_FACTOR * req.top_k), 4 * s.max_top_k)
        depth = max(req.top_k, s.rerank_depth) if req.rerank else req.top_k
        refs = page_refs(req.query) if priors.page_weight > 0 else frozenset()
        figures = figure_refs(req.query) if priors.page_weight > 0 else frozenset()
        lexical_only = not plan.visual and not plan.dense and plan.mode != "vector"
        spell = s.spelling_corrections and plan.mode != "vector"
        cands: dict[PageKey, Cand] = {}
        per_lib: list[list[PageKey]] = []
        visual_ran = False
        t = time.perf_counter()
        scope = _scope_predicates(req)
        for lib in req.libraries:
            # The caller's key's filters on this library are ANDed with the request's, here, so
            # that nothing (the unfiltered fallback, the corrective loop's retry) can drop them.
            lib_preds = [*preds, *scope.get(lib, ())]
            active = self.libraries.active_versions(lib)
            named = self.documents.scores(lib, req.query, active) if priors.document_weight > 0 else {}
            pages = self.page_numbers.pages(lib, refs, active, figures)
            # Not under a key's filter: a correction would tell the key a word of documents it
            # cannot see. Names are corrected against the documents' names, other words against
            # the library's words.
            fixes = self.respelt(lib, req.query, active) if spell and lib not in scope else {}
            trace.respelt.update(dict.fromkeys(fixes.items()))
            lqv = respelt(qv, fixes)
            # Under a key's filter the index cannot say what the key's own documents hold: the
            # channels' filtered finds tell, as before (a line item may then hide a miss, never
            # show a hidden document's word).
            if lqv.indices != own.indices and lib not in scope:
                held = holds_any(self.lexical, lib, own.indices)
                if held is not None:
                    trace.own_terms[lib] = held
                    trace.bm25_found = trace.bm25_found or held
            ranking: list[tuple[PageKey, float]] | None = None
            if self.lexical is not None and lexical_only:
                # The whole candidate list only when a prior may lift pages from below the depth.
                keep = limit if named or pages or priors.neighbour_weight > 0 else depth
                ranking, fusion = self._lexical_ranking(lib, lqv, lib_preds, limit, keep, cands)
            if ranking is None:
                rec = self.libraries.get(lib)
                lm = library_models(rec, self.models)
                self._note_missing_pages(req, plan, lib, lm, queries)
                fusion = fusion_for(s, plan, dense_ready="dense" in queries and lm.dense is not None,
                                    visual_ready="visual" in queries and lm.page is not None,
                                    has_terms=bool(lqv.indices))
                q = ChannelQuery(text=req.query, library=lib, predicates=tuple(lib_preds), limit=limit, depth=depth,
                                 bm25=lqv, vectors=queries, models=lm, active=active)
                outputs: list[ChannelPages] = [ch.rank(q) for ch in page_channels(self.store, self.lexical, s, rec)
                                               if ch.name in fusion.weights]
                visual_ran = visual_ran or "visual" in fusion.weights
                trace.note(outputs, lib, active, lm)
                collect(outputs, cands)
                ranking = fuse(outputs, fusion, cands)
            if named and lib in scope:
                # A key with a filter learns nothing of the documents it cannot see, not even
                # that its question names one: only named documents among its own pages count.
                seen = {key[1] for key, _ in ranking}
                named = {d: v for d, v in named.items() if d in seen}
            ranking = with_priors(ranking, named, priors, cands, pages)
            for key, score in ranking:
                cands[key].scores["fused"] = score
            fusions.append(" + ".join(x for x in (fusion.describe(),
                                                  priors.describe(named=bool(named), pages=bool(pages))) if x))
            per_lib.append([key for key, _ in ranking])
        timings["channels"] = round((time.perf_counter() - t) * 1000, 3)
        if plan.mode == "hybrid" and plan.visual and not visual_ran and not plan.dense:
            plan.mode = "economy"  # no library had page vectors to search: say what ran
        if len(per_lib) == 1:
            order = per_lib[0]
        else:
            fused_all = rrf(per_lib, k=s.rrf_k)
            order = [key for key, _ in fused_all]
            for key, score in fused_all:
                cands[key].scores["fused"] = score
            fusions.append(f"libraries: rrf(k={s.rrf_k})")
        if not order and plan.mode == "vector":
            return self._vector_fallback(req, preds, plan, queries, timings, trace)
        # A page found whole cites the passage holding the most of what was searched: the
        # question's terms, its metrics' line items and its words' corrections.
        also = [*(line_item_tokens(req.query) if s.line_item_weight > 0 else ()),
                *(right for _, right in trace.respelt)]
        head = self.assembler.hits(req, order[:depth], cands, timings, also)
        for h in head:
            h.printed_pages = self.page_numbers.printed(h.library_id, self.libraries.active_versions(h.library_id),
                                                        h.doc_id, h.page)
        if req.rerank:
            head = self.reranking.apply(req, head, plan, timings)
        return head[: req.top_k]

    def _lexical_ranking(self, lib: str, qv: Any, preds: list[Predicate], limit: int, keep: int,
                         cands: dict[PageKey, Cand]) -> tuple[list[tuple[PageKey, float]] | None, Any]:
        """A BM25-only plan's ranking from the in-memory index (:meth:`LexicalIndex.rank_pages`,
        the ranking the BM25 channels and fusion build, in numpy), or ``None`` when it cannot
        answer now (being built, over its memory bound, a filter it cannot evaluate): the
        channels then run against the store. The first ``keep`` pages are kept: the answer's
        depth, or the whole candidate list when a prior may lift pages from below it."""
        from ragspine.retrieval.fusion import Fusion

        assert self.lexical is not None
        s = self.settings
        chunk_weight = s.passage_weight(alone=True)
        ranked = self.lexical.rank_pages(lib, qv, preds, limit, chunk_weight=chunk_weight,
                                         page_weight=s.bm25_page_weight, rrf_k=s.rrf_k, depth=keep)
        weights = {"bm25": chunk_weight, **({"bm25_page": s.bm25_page_weight} if s.bm25_page_weight > 0 else {})}
        fusion = Fusion("rrf", weights, s.rrf_k)
        if ranked is None:
            return None, fusion
        out: list[tuple[PageKey, float]] = []
        for r in ranked:
            key = (lib, r.doc_id, r.page)
            scores: dict[str, float | None] = {}
            if r.bm25 is not None:
                scores["bm25"] = r.bm25
            if r.bm25_page is not None:
                scores["bm25_page"] = r.bm25_page
            cands[key] = Cand(chunk_id=r.chunk_point, page_id=r.page_point, scores=scores)
            out.append((key, r.fused))
        return out, fusion

    def _note_missing_pages(self, req: SearchRequest, plan: Plan, lib: str, lm: Any, queries: dict[str, Any]) -> None:
        if plan.visual and "visual" in queries and lm.page is None:
            why = lm.page_missing or "it was created without a page model"
            reason = f"visual_unavailable: library '{lib}' has no usable page vectors ({why})"
            if req.mode in ("vector", "hybrid") and reason not in plan.degraded:
                plan.degraded.append(reason)

    def _vector_fallback(self, req: SearchRequest, preds: list[Predicate], plan: Plan, queries: dict[str, Any],
                         timings: dict[str, float], trace: Trace) -> list[SearchHit]:
        """Mode ``vector`` whose libraries have no usable page vectors: the CPU path, degraded."""
        if not any(r.startswith("visual_unavailable") for r in plan.degraded):
            return []
        plan.mode = "economy"
        queries = {**queries, **self._encode_dense(req, plan, timings)}
        trace.__init__()  # type: ignore[misc]
        return self._search(req, preds, plan, queries, timings, trace)

    def _miss(self, req: SearchRequest, trace: Trace, hits: list[SearchHit]) -> str | None:
        """The ``miss:`` note when no BM25 term matched and the best dense similarity does not
        stand out from any searched library's background (:mod:`~ragspine.retrieval.misses`).
        When the passages the meaning channel found are in another script than the query (a
        Chinese question over English reports) it is no miss: no BM25 term could have matched
        them, and made-up words tell nothing about how near a translation lands."""
        s = self.settings
        if query_language(req.query) != query_language(" ".join(h.text for h in hits[:MISS_SCRIPT_HITS])):
            return None
        backgrounds = {}
        for lib, (active, lm) in trace.dense_libraries.items():
            bg = self.misses.background(lib, active, lm.dense)
            if bg is not None:
                backgrounds[lib] = bg
        return miss_note(trace.top_dense, backgrounds, s.miss_margin, s.miss_stds)

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
