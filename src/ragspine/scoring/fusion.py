"""The two fusions of ranked channels.

- :func:`rrf`, Reciprocal Rank Fusion (Cormack, Clarke and Büttcher, SIGIR 2009): ranks only.
  Every ranking path uses it (BM25 channels in the in-memory index and through the store, the
  visual channel, several libraries, query variants, graph expansion), so that two paths over
  the same rankings give the same order bit for bit.
- :func:`convex`, a convex combination of min-max normalised scores (Bruch, Gai and Ingber, "An
  Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023): a library's BM25 and dense
  channels when no visual channel ranks beside them. It keeps how far apart two scores are,
  which ranks throw away: a passage BM25 finds far ahead of the rest stays ahead of one the
  dense channel ranks first by a hair (bench/fusion_loo.py --fusion convex, docs/measured.md).

Tie-break rule (stated once, here): equal fused scores are ordered by the caller's
``tiebreak`` score, higher first (the search paths pass each page's best passage BM25 score, so
the page whose passage matches best comes first), then by id in its natural order (``doc_id``
then page number for page keys). Ids that cannot be compared with each other (mixed types) are
ordered by type name and ``repr``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from ragspine.config import DEFAULT_RRF_K

K = TypeVar("K", bound=Hashable)


def rrf(
    rankings: Sequence[Sequence[K]],
    k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    *,
    tiebreak: Mapping[K, float | None] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked id lists: ``score(d) = sum_i weight_i / (k + rank_i(d))``, rank from 1.

    Returns ``(id, score)`` sorted by ``(-score, -tiebreak[id], id)`` (see the module docstring),
    so the result is deterministic. An id repeated inside one ranking counts once, at its best
    rank. ``tiebreak`` values that are missing or ``None`` count as 0.
    """
    if k < 1:
        raise ValueError(f"RRF k must be >= 1, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    # Contributions are summed with math.fsum (exactly rounded, so independent of the order of
    # the rankings): equal sums of equal terms tie exactly and the id decides.
    parts: dict[K, list[float]] = {}
    for ranking, w in zip(rankings, weights):
        seen: set[K] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            parts.setdefault(item, []).append(w / (k + rank))
    scores = [(item, math.fsum(ps)) for item, ps in parts.items()]
    tb = tiebreak or {}
    try:
        return sorted(scores, key=lambda kv: (-kv[1], -(tb.get(kv[0]) or 0.0), kv[0]))
    except TypeError:  # ids of mixed types: compare a stable string form instead
        return sorted(scores, key=lambda kv: (-kv[1], -(tb.get(kv[0]) or 0.0), _sort_key(kv[0])))


def minmax_bounds(scores: Sequence[float], depth: int) -> tuple[float, float]:
    """``(lo, hi)`` of a channel's scores sorted best first: its best score and the score at
    ``depth`` (or its last, when it has fewer). Bounding by a fixed depth, not by however many
    hits a request asked for, keeps the normalised scores, and so the order, the same whatever
    the request's ``top_k``."""
    if not scores:
        raise ValueError("a channel with no scores has no bounds")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    return float(scores[min(depth, len(scores)) - 1]), float(scores[0])


def convex(
    channels: Sequence[Mapping[K, float]],
    weights: Sequence[float],
    *,
    bounds: Sequence[tuple[float, float]] | None = None,
    tiebreak: Mapping[K, float | None] | None = None,
) -> list[tuple[K, float]]:
    """Fuse scored channels: ``score(d) = sum_i weight_i * norm_i(s_i(d))`` with
    ``norm_i(s) = (s - lo_i) / (hi_i - lo_i)`` clipped to [0, 1], ``(lo_i, hi_i)`` from ``bounds``
    (default: the channel's own min and max). An id a channel did not return scores 0 there; in a
    channel whose ``hi == lo`` every id it returned scores 1. Weights must be >= 0 (only their
    ratios matter). Sorted as :func:`rrf` sorts, by ``(-score, -tiebreak[id], id)``."""
    if len(weights) != len(channels):
        raise ValueError(f"{len(weights)} weights for {len(channels)} channels")
    if any(not (0 <= w < math.inf) for w in weights):  # an infinite weight times a 0 is NaN
        raise ValueError(f"convex fusion weights must be finite and >= 0, got {list(weights)}")
    if bounds is None:
        bounds = [(min(ch.values()), max(ch.values())) if ch else (0.0, 0.0) for ch in channels]
    if len(bounds) != len(channels):
        raise ValueError(f"{len(bounds)} bounds for {len(channels)} channels")
    parts: dict[K, list[float]] = {}
    for ch, w, (lo, hi) in zip(channels, weights, bounds):
        span = hi - lo
        for item, score in ch.items():
            norm = 1.0 if span <= 0 else min(1.0, max(0.0, (score - lo) / span))
            parts.setdefault(item, []).append(w * norm)
    scores = [(item, math.fsum(ps)) for item, ps in parts.items()]
    tb = tiebreak or {}
    try:
        return sorted(scores, key=lambda kv: (-kv[1], -(tb.get(kv[0]) or 0.0), kv[0]))
    except TypeError:
        return sorted(scores, key=lambda kv: (-kv[1], -(tb.get(kv[0]) or 0.0), _sort_key(kv[0])))


def _sort_key(item: object) -> tuple[str, str]:
    return (type(item).__name__, repr(item))
