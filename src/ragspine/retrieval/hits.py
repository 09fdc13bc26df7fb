"""Hit assembly: the citations of the ranked pages (document, page, bbox, passage), the RESTRICTED
exit filter, and the rerank contract."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ragspine.models.modelset import describe
from ragspine.models.registry import reranker_languages
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.channels import Cand
from ragspine.retrieval.plan import Plan
from ragspine.retrieval.request import PageKey, SearchHit, SearchRequest
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.tokenizer import query_language, tokenize

if TYPE_CHECKING:
    from ragspine.retrieval.search import Searcher

logger = logging.getLogger(__name__)


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



class HitAssembly:
    """Citations and rerank of :class:`~ragspine.retrieval.search.Searcher` (a mixin)."""

    def _hits(self: Searcher, req: SearchRequest, keys: list[PageKey], cands: dict[PageKey, Cand],
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
                    qtoks = query_tokens(req.query, drop_question_words=self.settings.bm25_drop_question_words)
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

    def rerank(self: Searcher, query: str, hits: list[SearchHit]) -> tuple[list[SearchHit], list[str], list[str], float]:
        """Rerank hits found elsewhere (the query chain's fused variants) with ``query``:
        ``(hits, degraded reasons, notes, ms)``, under the same contract as ``rerank: true``."""
        plan = Plan(mode="", visual=False, dense=False)
        timings: dict[str, float] = {}
        req = SearchRequest.model_construct(query=query)
        out = self._rerank(req, hits, plan, timings)
        return out, plan.degraded, plan.notes, timings.get("rerank", 0.0)

    def _rerank(self: Searcher, req: SearchRequest, hits: list[SearchHit], plan: Plan,
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
