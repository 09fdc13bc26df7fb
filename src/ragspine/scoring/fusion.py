"""Reciprocal Rank Fusion (Cormack, Clarke and Büttcher, SIGIR 2009): the one fusion every
ranking path uses (BM25 channels in the in-memory index and through the store, visual and dense
channels, several libraries, graph expansion), so that two paths over the same rankings give the
same order bit for bit.

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


def _sort_key(item: object) -> tuple[str, str]:
    return (type(item).__name__, repr(item))
