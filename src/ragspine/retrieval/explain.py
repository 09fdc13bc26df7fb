"""Similarity maps: where on a page the query's token vectors found their matches.

As in colpali-engine's interpretability code (``get_similarity_maps_from_embeddings``), the map
of query token ``i`` is the dot product of its vector with every image-patch vector of the page,
laid out on the patch grid. MaxSim adds, per query token, its best match anywhere on the page;
:func:`similarity_map` reports those contributions too, so the map and the visual score agree:
``sum(contributions) == maxsim(query, page)`` when every token's best match is a patch.

The overlay image averages the per-token maps after scaling each to [0, 1] over the page (so
one strongly matching token does not hide the others) and paints it as a heat map whose
opacity grows with the value. It is written with PyMuPDF (already a dependency): no PIL needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pymupdf


@dataclass(frozen=True)
class SimilarityMap:
    rows: int
    cols: int
    #: ``(n_query_tokens, rows, cols)``: query token · patch vector.
    per_token: np.ndarray
    #: ``(rows, cols)`` in [0, 1]: the mean of the per-token maps, each min-max scaled.
    combined: np.ndarray
    #: Per query token: its MaxSim contribution (best dot product over all page tokens) and the
    #: patch ``(row, col)`` where it lies, or None when its best match is not an image patch.
    contributions: list[dict[str, Any]]
    #: MaxSim of the query against the whole stored page multivector (the ``visual`` score).
    score: float

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "cols": self.cols,
            "score": self.score,
            "combined": np.round(self.combined, 4).tolist(),
            "per_token": np.round(self.per_token, 4).tolist(),
            "contributions": self.contributions,
        }


def image_token_index(runs: list[list[int]]) -> np.ndarray:
    """Indices of the image tokens from their ``[start, end)`` runs (page payload)."""
    if not runs:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs])


def similarity_map(query: np.ndarray, page: np.ndarray, grid: tuple[int, int], image_tokens: np.ndarray) -> SimilarityMap:
    """The map of ``query`` ``(nq, d)`` over ``page`` ``(n, d)`` whose ``image_tokens`` (row-major
    indices into ``page``) form a ``grid = (rows, cols)`` patch grid."""
    rows, cols = int(grid[0]), int(grid[1])
    q = np.asarray(query, dtype=np.float32)  # (nq, d)
    p = np.asarray(page, dtype=np.float32)  # (n, d)
    if image_tokens.shape[0] != rows * cols:
        raise ValueError(f"{image_tokens.shape[0]} image tokens do not fill a {rows}x{cols} grid")
    sims = q @ p.T  # (nq, n)
    per_token = sims[:, image_tokens].reshape(len(q), rows, cols)  # (nq, rows, cols)
    lo = per_token.min(axis=(1, 2), keepdims=True)
    hi = per_token.max(axis=(1, 2), keepdims=True)
    scaled = (per_token - lo) / np.where(hi > lo, hi - lo, 1.0)  # (nq, rows, cols) in [0, 1]
    combined = scaled.mean(axis=0)  # (rows, cols)
    best = sims.argmax(axis=1)  # (nq,) index of each token's best match on the page
    where = {int(t): i for i, t in enumerate(image_tokens)}
    contributions = []
    for i, b in enumerate(best):
        cell = where.get(int(b))
        contributions.append({
            "token": i,
            "value": float(sims[i, b]),
            "patch": None if cell is None else [cell // cols, cell % cols],
        })
    return SimilarityMap(rows, cols, per_token, combined, contributions, float(sims.max(axis=1).sum()))


def heatmap_png(combined: np.ndarray) -> bytes:
    """RGBA PNG, one pixel per patch: yellow → red as the value grows, transparent at 0."""
    v = np.clip(np.asarray(combined, dtype=np.float32), 0.0, 1.0)  # (rows, cols)
    rgba = np.empty(v.shape + (4,), dtype=np.uint8)
    rgba[..., 0] = 255
    rgba[..., 1] = np.round(220 * (1.0 - v)).astype(np.uint8)
    rgba[..., 2] = 0
    rgba[..., 3] = np.round(230 * v**1.5).astype(np.uint8)
    h, w = v.shape
    pix = pymupdf.Pixmap(pymupdf.csRGB, w, h, rgba.tobytes(), True)
    return pix.tobytes("png")
