"""Fusion: one library's channel outputs into one page ranking, then what pages borrow from
their document and their neighbours.

:func:`fusion_for` decides, from the plan and the settings, which channels rank and with what
weight, and by which rule: weighted RRF, or BM25 and dense by a convex combination of their
normalised scores (``RAGSPINE_DENSE_FUSION``). :func:`fuse` applies it to the channels'
:class:`~ragspine.retrieval.channel.ChannelPages`; :func:`with_priors` then applies the
document prior and the neighbours' share (:mod:`ragspine.scoring.priors`). Every answer names
the fusion that ranked it (:meth:`Fusion.describe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragspine.config import Settings
from ragspine.retrieval.channel import ChannelPages
from ragspine.retrieval.plan import Plan
from ragspine.retrieval.request import MIN_CANDIDATES, PageKey
from ragspine.scoring.fusion import convex, rrf
from ragspine.scoring.priors import borrow_neighbours, document_prior, named_pages


@dataclass
class Cand:
    """A page being ranked: its best passage's point id (its citation), its page point, and its
    score in each channel."""

    chunk_id: str | None = None  # point id of the best passage (the first passage channel's)
    page_id: str | None = None  # point id of the page point
    scores: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Fusion:
    """How one library's channels combine: ``rule`` (``rrf`` or ``convex``), the weight of each
    channel that runs (0: it runs, to cite, but does not rank), and RRF's ``k``."""

    rule: str
    weights: Mapping[str, float]
    k: int = 60

    def ranks(self, name: str) -> bool:
        return self.weights.get(name, 0.0) > 0

    def describe(self) -> str:
        parts = ", ".join(f"{n} {w:g}" for n, w in self.weights.items() if w > 0)
        return f"rrf(k={self.k}; {parts})" if self.rule == "rrf" else f"convex({parts})"


def fusion_for(settings: Settings, plan: Plan, *, dense_ready: bool, visual_ready: bool, has_terms: bool) -> Fusion:
    """The channels of one library's search and their weights. ``dense_ready``: the query has a
    dense vector and the library dense passages; ``visual_ready``: the same for page images."""
    s = settings
    lexical = plan.mode != "vector"
    dense_on = lexical and plan.dense and dense_ready
    visual_runs = plan.visual and visual_ready and (s.visual_weight > 0 or plan.mode == "vector")
    # BM25 + dense without the visual channel: the fusion RAGSPINE_DENSE_FUSION names, with its
    # weights; a dense weight of 0 leaves BM25 ranking alone.
    convex_fusion = dense_on and not visual_runs and s.dense_fusion == "convex"
    dense_weight = s.convex_dense_weight if convex_fusion else s.dense_weight
    dense_runs = dense_on and dense_weight > 0
    use_convex = convex_fusion and dense_runs
    if use_convex:
        chunk_weight, page_weight = s.convex_passage_weight, s.convex_page_weight
    else:
        page_weight = s.bm25_page_weight
        chunk_weight = s.passage_weight(alone=not (dense_runs or visual_runs))
    weights: dict[str, float] = {}
    if lexical and has_terms:
        # The passage search runs even at weight 0: it finds each page's best passage to cite.
        weights["bm25"] = chunk_weight
        if page_weight > 0:
            weights["bm25_page"] = page_weight
    if dense_runs:
        weights["dense"] = dense_weight
    if visual_runs:
        weights["visual"] = s.visual_weight if plan.mode != "vector" else 1.0
    if use_convex:
        return Fusion("convex", weights)
    return Fusion("rrf", weights, s.fusion_k(dense_runs, visual_runs))


def collect(outputs: Sequence[ChannelPages], cands: dict[PageKey, Cand]) -> None:
    """Each page's channel scores, citation and page point, from the channels' outputs."""
    for out in outputs:
        for sp in out.pages:
            c = cands.setdefault(sp.key, Cand())
            c.scores[out.name] = sp.score
            if out.passages:
                if c.chunk_id is None:
                    c.chunk_id = sp.point
            else:
                c.page_id = sp.point


def fuse(outputs: Sequence[ChannelPages], fusion: Fusion, cands: Mapping[PageKey, Cand]) -> list[tuple[PageKey, float]]:
    """The library's page ranking. Equal fused scores (ranks 1+2 against 2+1) go to the page
    whose best passage has the higher BM25 score (the tie-break rule of scoring.fusion)."""
    ranking = [o for o in outputs if fusion.ranks(o.name)]
    if not ranking:
        return []
    tiebreak = {key: c.scores.get("bm25") for key, c in cands.items()}
    weights = [fusion.weights[o.name] for o in ranking]
    if fusion.rule == "convex":
        channels = [{sp.key: float(sp.score) for sp in o.pages} for o in ranking]
        # a channel that found nothing has no bounds and nothing to normalise
        return convex(channels, weights, bounds=[o.bounds or (0.0, 0.0) for o in ranking], tiebreak=tiebreak)
    return rrf([[sp.key for sp in o.pages] for o in ranking], k=fusion.k, weights=weights, tiebreak=tiebreak)


@dataclass(frozen=True)
class Priors:
    """What pages borrow after fusion (``RAGSPINE_DOCUMENT_PRIOR_WEIGHT``,
    ``RAGSPINE_PAGE_NUMBER_WEIGHT``, ``RAGSPINE_NEIGHBOUR_WEIGHT``)."""

    document_weight: float
    neighbour_weight: float
    page_weight: float = 0.0

    @classmethod
    def of(cls, s: Settings) -> Priors:
        return cls(s.document_prior_weight, s.neighbour_weight, s.page_number_weight)

    def describe(self, named: bool, pages: bool = False) -> str:
        """What pages borrowed in one library's search (``named``: the question named a
        document; ``pages``: it named pages by number)."""
        parts = []
        if self.document_weight > 0 and named:
            parts.append(f"document prior {self.document_weight:g}")
        if self.page_weight > 0 and pages:
            parts.append(f"page numbers {self.page_weight:g}")
        if self.neighbour_weight > 0:
            parts.append(f"neighbours {self.neighbour_weight:g}")
        return " + ".join(parts)


def _doc_of(key: PageKey) -> tuple[str, str]:
    return (key[0], key[1])


def _neighbours(key: PageKey) -> tuple[PageKey, PageKey]:
    return ((key[0], key[1], key[2] - 1), (key[0], key[1], key[2] + 1))


def with_priors(ranking: list[tuple[PageKey, float]], named: Mapping[str, float], priors: Priors,
                cands: Mapping[PageKey, Cand],
                pages: Mapping[str, frozenset[int]] | None = None) -> list[tuple[PageKey, float]]:
    """The document prior (``named``: the document channel's ``doc_id -> score``; none named,
    the ranking stays as it is), then the pages named by number (``pages``: ``doc_id -> pages``,
    :class:`~ragspine.retrieval.channels.page_numbers.PageNumbers`), then the neighbours' share.
    Each page of a named document records its document's score in its candidate's scores
    (``document``)."""
    if not ranking:
        return ranking
    if priors.document_weight > 0 and named:
        lib = ranking[0][0][0]
        docs = {(lib, d): v for d, v in named.items()}
        for key, _ in ranking:
            cands[key].scores["document"] = docs.get(_doc_of(key), 0.0)
        ranking = document_prior(ranking, _doc_of, docs, priors.document_weight, depth=MIN_CANDIDATES)
    if priors.page_weight > 0 and pages:
        ranking = named_pages(ranking, lambda key: key[2] in pages.get(key[1], ()), priors.page_weight,
                              depth=MIN_CANDIDATES)
    if priors.neighbour_weight > 0:
        ranking = borrow_neighbours(ranking, _neighbours, priors.neighbour_weight, depth=MIN_CANDIDATES)
    return ranking
