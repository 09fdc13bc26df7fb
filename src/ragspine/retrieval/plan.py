"""The query plan: which channels a request's mode runs with the models at hand, and why the
others do not (a note, or a degradation the answer carries)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragspine.errors import InvalidRequestError
from ragspine.models.registry import dense_languages
from ragspine.scoring.tokenizer import query_language

if TYPE_CHECKING:
    from ragspine.config import Settings
    from ragspine.models.modelset import ModelSet
    from ragspine.retrieval.request import SearchRequest


@dataclass
class Plan:
    """Which channels run for a request, and why others do not."""

    mode: str
    visual: bool
    dense: bool
    degraded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_for(req: SearchRequest, models: ModelSet, settings: Settings) -> Plan:
    """Channels for the request's mode and the models at hand.

    ``vector`` and ``hybrid`` need a page model configured (else 422: the request cannot be
    what the user meant). A configured model that is down, or a library without page
    vectors, turns them into the CPU path (BM25, plus dense when loaded) marked degraded.
    """
    m = models
    page_configured = m.page is not None or "page" in m.configured
    if req.mode == "vector" and not page_configured:
        raise InvalidRequestError(
            "mode 'vector' needs a page model, and none is configured (RAGSPINE_PAGE_MODEL); "
            "use mode 'bm25' or 'auto'"
        )
    lexical_only = req.mode in ("bm25", "lexical")
    want_visual = req.mode in ("vector", "hybrid") or (req.mode == "auto" and page_configured)
    plan = Plan(mode="bm25" if lexical_only else "economy", visual=False, dense=False)
    if not lexical_only:
        if m.dense is not None:
            plan.dense = True
            served = dense_languages(getattr(m.dense, "model_id", None), settings.dense_languages)
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
