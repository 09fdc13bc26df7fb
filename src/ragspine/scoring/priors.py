"""What a page's rank borrows from outside the page: its document, and its neighbours.

Pure functions over a fused page ranking (``[(page, score)]`` best first):

- :func:`normalised` - each page's fused score mapped to [0, 1] between the ranking's best
  score and its score at a fixed depth (as :func:`~ragspine.scoring.fusion.minmax_bounds`
  bounds a channel), so the prior weighs the same whatever ``top_k`` a request asked for;
- :func:`document_prior` - ``(1 - w) * page + w * document``, ``document`` the document
  channel's score in [0, 1] (0 for a document it does not name): the pages of the document the
  question names come first;
- :func:`named_pages` - a page the question names by number ("the chart on page 14") gains
  ``w``: among the pages the channels found, the named ones come first unless an unnamed page
  outscores them by more than ``w``;
- :func:`borrow_neighbours` - a page gains ``w`` times the better of its two neighbours'
  scores (evidence continues on the next page, or sits under a heading on the page before).

Each returns the ranking re-sorted by the new score, ties in the old order; a weight of 0
returns the ranking unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
D = TypeVar("D", bound=Hashable)


def normalised(ranking: Sequence[tuple[K, float]], depth: int) -> dict[K, float]:
    """``(s - lo) / (hi - lo)`` clipped to [0, 1], ``hi`` the best score and ``lo`` the one at
    ``depth`` (or the last); every page scores 1 when they are all equal."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not ranking:
        return {}
    hi = ranking[0][1]
    lo = ranking[min(depth, len(ranking)) - 1][1]
    span = hi - lo
    return {k: 1.0 if span <= 0 else min(1.0, max(0.0, (s - lo) / span)) for k, s in ranking}


def _resort(ranking: Sequence[tuple[K, float]], new: Mapping[K, float]) -> list[tuple[K, float]]:
    order = sorted(range(len(ranking)), key=lambda i: (-new[ranking[i][0]], i))
    return [(ranking[i][0], new[ranking[i][0]]) for i in order]


def document_prior(
    ranking: Sequence[tuple[K, float]],
    doc_of: Callable[[K], D],
    documents: Mapping[D, float],
    weight: float,
    *,
    depth: int,
) -> list[tuple[K, float]]:
    """``(1 - weight) * page + weight * document`` per page, re-sorted (ties: old order)."""
    if not 0 <= weight <= 1:
        raise ValueError(f"the document prior's weight must be in [0, 1], got {weight}")
    if weight == 0 or not ranking:
        return list(ranking)
    norm = normalised(ranking, depth)
    return _resort(ranking, {k: (1 - weight) * norm[k] + weight * documents.get(doc_of(k), 0.0)
                             for k, _ in ranking})


def named_pages(
    ranking: Sequence[tuple[K, float]],
    named: Callable[[K], bool],
    weight: float,
    *,
    depth: int,
) -> list[tuple[K, float]]:
    """Each page's normalised score plus ``weight`` where ``named(page)``, re-sorted (ties: old
    order). Only pages of the ranking move: a named page no channel found is not added."""
    if weight < 0:
        raise ValueError(f"the page-number weight must be >= 0, got {weight}")
    if weight == 0 or not ranking:
        return list(ranking)
    norm = normalised(ranking, depth)
    return _resort(ranking, {k: norm[k] + (weight if named(k) else 0.0) for k, _ in ranking})


def borrow_neighbours(
    ranking: Sequence[tuple[K, float]],
    neighbours: Callable[[K], Sequence[K]],
    weight: float,
    *,
    depth: int,
) -> list[tuple[K, float]]:
    """Each page's normalised score plus ``weight`` times its best ranked neighbour's,
    re-sorted (ties: old order). A neighbour not in the ranking lends nothing."""
    if weight < 0:
        raise ValueError(f"the neighbours' weight must be >= 0, got {weight}")
    if weight == 0 or not ranking:
        return list(ranking)
    norm = normalised(ranking, depth)
    return _resort(ranking, {k: norm[k] + weight * max((norm.get(n, 0.0) for n in neighbours(k)), default=0.0)
                             for k, _ in ranking})
