"""The post-chain: steps over the final hits that reorder or drop them, never edit them.

- :func:`mmr` — Maximal Marginal Relevance (Carbonell and Goldstein, SIGIR 1998): choose hits
  one at a time by ``λ · relevance − (1 − λ) · max similarity to the hits already chosen``, so a
  passage that repeats one already chosen (the same table in two reports, an overlapping
  chunk) gives way to one that adds something. Relevance is the hit's rerank score when every
  hit has one, else its fused score, min-max scaled to [0, 1]; similarity is the cosine of the
  passages' BM25 token counts. Ties keep the incoming order.
- :func:`lost_in_middle` — language models use the start and end of a long context best and
  the middle worst (Liu et al., TACL 2024): ranks 1, 3, 5, … go first and 2, 4, 6, … come back
  from the end, so the two best hits sit at the two ends.

Hits are moved, not copied or changed: citations stay byte for byte what the search gave.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ragspine.retrieval.search import SearchHit
from ragspine.scoring.tokenizer import tokenize


def relevance(hits: Sequence[SearchHit]) -> list[float]:
    """Each hit's relevance in [0, 1]: rerank scores when all hits have one, else fused."""
    key = "rerank" if hits and all(h.scores.get("rerank") is not None for h in hits) else "fused"
    raw = [float(h.scores.get(key) or 0.0) for h in hits]
    lo, hi = (min(raw), max(raw)) if raw else (0.0, 0.0)
    if hi - lo <= 0:
        return [1.0] * len(raw)
    return [(x - lo) / (hi - lo) for x in raw]


def _cosine(a: Counter[str], b: Counter[str], norm_a: float, norm_b: float) -> float:
    if not norm_a or not norm_b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return sum(c * large.get(t, 0) for t, c in small.items()) / (norm_a * norm_b)


def mmr(hits: Sequence[SearchHit], k: int, lam: float) -> list[SearchHit]:
    """The ``k`` hits MMR chooses, in the order chosen."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"MMR lambda must be in [0, 1], got {lam}")
    rel = relevance(hits)
    bags = [Counter(tokenize(h.text)) for h in hits]
    norms = [math.sqrt(sum(c * c for c in b.values())) for b in bags]
    max_sim = [0.0] * len(hits)
    left = list(range(len(hits)))
    chosen: list[int] = []
    while left and len(chosen) < k:
        best = max(left, key=lambda i: (lam * rel[i] - (1.0 - lam) * max_sim[i], -i))
        chosen.append(best)
        left.remove(best)
        for i in left:
            max_sim[i] = max(max_sim[i], _cosine(bags[i], bags[best], norms[i], norms[best]))
    return [hits[i] for i in chosen]


def lost_in_middle(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """Best hits at both ends: ranks 1, 3, 5, … then …, 6, 4, 2."""
    return list(hits[0::2]) + list(hits[1::2])[::-1]
