"""Reciprocal Rank Fusion (Cormack, Clarke and Büttcher, SIGIR 2009)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TypeVar

from ragspine.config import DEFAULT_RRF_K

K = TypeVar("K", bound=Hashable)


def rrf(
    rankings: Sequence[Sequence[K]],
    k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked id lists: ``score(d) = sum_i weight_i / (k + rank_i(d))``, rank from 1.

    Returns ``(id, score)`` sorted by ``(-score, id)`` so equal scores are broken by id and the
    result is deterministic (invariant 6). An id repeated inside one ranking counts once, at its
    best rank.
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
    scores = {item: math.fsum(ps) for item, ps in parts.items()}
    return sorted(scores.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))


def _sort_key(item: object) -> tuple[str, str]:
    # Ids may be tuples or strings; compare by a string form so mixed types still sort.
    return (type(item).__name__, repr(item))

