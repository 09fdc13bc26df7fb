"""The rerank contract: the first fused hits reordered by a reranker's score of their passage
text. RESTRICTED text never reaches a model; any failure keeps the fused order and says
``rerank_failed``; never raises."""

from __future__ import annotations

import logging
import math
import time

from ragspine.config import Settings
from ragspine.models.modelset import ModelSet, describe
from ragspine.models.registry import reranker_languages
from ragspine.retrieval.plan import Plan
from ragspine.retrieval.request import SearchHit, SearchRequest
from ragspine.scoring.tokenizer import query_language

logger = logging.getLogger(__name__)


class Reranking:
    def __init__(self, settings: Settings, models: ModelSet) -> None:
        self.settings = settings
        self.models = models

    def rerank(self, query: str, hits: list[SearchHit]) -> tuple[list[SearchHit], list[str], list[str], float]:
        """Rerank hits found elsewhere (the query chain's fused variants) with ``query``:
        ``(hits, degraded reasons, notes, ms)``, under the same contract as ``rerank: true``."""
        plan = Plan(mode="", visual=False, dense=False)
        timings: dict[str, float] = {}
        req = SearchRequest.model_construct(query=query)
        out = self.apply(req, hits, plan, timings)
        return out, plan.degraded, plan.notes, timings.get("rerank", 0.0)

    def apply(self, req: SearchRequest, hits: list[SearchHit], plan: Plan,
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
