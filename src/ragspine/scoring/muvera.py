"""MUVERA fixed-dimensional encodings: one vector per page multivector for the visual first stage.

MUVERA (Jayaram et al., "MUVERA: Multi-Vector Retrieval via Fixed Dimensional Encodings", 2024)
maps a multivector to one vector whose inner product with a query's encoding approximates
MaxSim (Chamfer similarity), so an ordinary HNSW index can find the candidates that exact
MaxSim then reranks. For each of ``r_reps`` repetitions, SimHash with ``k_sim`` random
hyperplanes splits the token space into ``2**k_sim`` buckets; a document's encoding holds the
mean of its tokens per bucket (an empty bucket borrows the first token of the nearest occupied
bucket by Hamming distance), a query's the sum; each bucket vector is projected to ``dim_proj``
dimensions by a random +-1 matrix scaled by ``1/sqrt(dim_proj)``. The encoding has
``r_reps * 2**k_sim * dim_proj`` dimensions (10,240 with the defaults).

:class:`Muvera` computes exactly what ``fastembed.postprocess.Muvera`` computes, with the same
random matrices for the same seed (``tests/scoring/test_muvera.py`` compares the two), but
vectorised: fastembed adds tokens to their buckets in a Python loop (~40 ms for a 1,030-token
ColPali page on the development machine, more than the rest of a page's ingest), this does one
matrix product for all hyperplanes and projections and one scatter-add (~2 ms). Owning the
arithmetic also pins it: a library's stored encodings stay comparable with its queries' however
a dependency changes its sampling, because the parameters and seed are recorded with the library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: fastembed's defaults, which its authors measured on ColBERT/ColPali vectors: 32 buckets,
#: 16-dim projections, 20 repetitions (10,240 dims; 20 KB a page as float16).
DEFAULT_K_SIM = 5
DEFAULT_DIM_PROJ = 16
DEFAULT_R_REPS = 20
DEFAULT_SEED = 42


@dataclass(frozen=True)
class MuveraParams:
    """What a library records about its encodings: a query must be encoded the same way."""

    dim: int
    k_sim: int = DEFAULT_K_SIM
    dim_proj: int = DEFAULT_DIM_PROJ
    r_reps: int = DEFAULT_R_REPS
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"MUVERA: dim must be >= 1, got {self.dim}")
        if not 1 <= self.k_sim <= 16:
            raise ValueError(f"MUVERA: k_sim must be in 1..16, got {self.k_sim}")
        if not 1 <= self.dim_proj <= self.dim:
            raise ValueError(f"MUVERA: dim_proj must be in 1..dim ({self.dim}), got {self.dim_proj}")
        if self.r_reps < 1:
            raise ValueError(f"MUVERA: r_reps must be >= 1, got {self.r_reps}")

    @property
    def size(self) -> int:
        """Dimensions of an encoding: ``r_reps * 2**k_sim * dim_proj``."""
        return self.r_reps * (1 << self.k_sim) * self.dim_proj

    def record(self) -> dict[str, int]:
        return {"dim": self.dim, "k_sim": self.k_sim, "dim_proj": self.dim_proj,
                "r_reps": self.r_reps, "seed": self.seed}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> MuveraParams:
        return cls(**{k: int(rec[k]) for k in ("dim", "k_sim", "dim_proj", "r_reps", "seed")})


#: (token, repetition, column) cells summed in one bincount (64 K: 512 KB of temporaries); more
#: go one repetition at a time (:meth:`Muvera._encode`).
_ONE_BINCOUNT = 1 << 16


class Muvera:
    """Document and query encodings for one :class:`MuveraParams`.

    The random matrices are drawn as fastembed draws them: one ``default_rng(seed)``, first a
    ``(dim, k_sim)`` standard-normal hyperplane matrix per repetition, then all ``(r_reps, dim,
    dim_proj)`` +-1 projections at once.
    """

    def __init__(self, params: MuveraParams) -> None:
        self.params = p = params
        rng = np.random.default_rng(p.seed)
        planes = [rng.normal(size=(p.dim, p.k_sim)) for _ in range(p.r_reps)]
        proj = rng.choice([-1, 1], size=(p.r_reps, p.dim, p.dim_proj))
        self.buckets = 1 << p.k_sim
        #: (dim, r_reps * k_sim): every repetition's hyperplanes side by side, float64 as
        #: fastembed's: a token within float32 rounding of a hyperplane must fall on its side.
        self._planes = np.concatenate(planes, axis=1)
        #: (dim, r_reps * dim_proj): every repetition's projection, scaled, side by side.
        scale = 1.0 / np.sqrt(p.dim_proj) if p.dim_proj < p.dim else 1.0
        self._proj = (np.concatenate(list(proj), axis=1) * scale).astype(np.float32)
        if p.dim_proj == p.dim:  # fastembed keeps the bucket vectors unprojected then
            self._proj = np.tile(np.eye(p.dim, dtype=np.float32), (1, p.r_reps))
        self._bits = (1 << np.arange(p.k_sim)).astype(np.int64)  # (k_sim,)
        ids = np.arange(self.buckets)
        #: (buckets, buckets) Hamming distance between bucket ids.
        self._hamming = np.array([[bin(a ^ b).count("1") for b in ids] for a in ids], dtype=np.int64)

    def _check(self, vectors: npt.ArrayLike) -> np.ndarray:
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != self.params.dim:
            raise ValueError(f"MUVERA: expected a multivector of shape (n, {self.params.dim}), got {v.shape}")
        if len(v) == 0:
            raise ValueError("MUVERA: cannot encode an empty multivector")
        return v

    def _encode(self, vectors: npt.ArrayLike, document: bool) -> np.ndarray:
        p = self.params
        v = self._check(vectors)  # (n, dim)
        n, b, r = len(v), self.buckets, p.r_reps
        signs = (v.astype(np.float64) @ self._planes > 0).reshape(n, r, p.k_sim)  # (n, r, k_sim)
        bucket = signs.astype(np.int64) @ self._bits  # (n, r): bucket of each token per repetition
        projected = (v @ self._proj).reshape(n, r, p.dim_proj)  # (n, r, dim_proj)
        # Bucket sums by a weighted bincount over (bucket, column) cells, one repetition at a
        # time: 2.6 ms a ColPali page's whole encoding (1,030 tokens) against 7.0 for sorting
        # the rows by bucket and adding runs. One bincount over every repetition's cells at once
        # made two 2.6 MB temporaries a page and took 6.1 (fresh pages of memory each time); a
        # one-hot product goes through BLAS, whose threads spin against render processes.
        # A query (a few dozen tokens) goes in one bincount: 20 small ones cost more. float64
        # sums, in token order.
        columns = np.arange(p.dim_proj)
        if n * r * p.dim_proj <= _ONE_BINCOUNT:
            slot = bucket + (np.arange(r) * b)[None, :]  # (n, r): row in the (r * b) bucket table
            cells = (slot[:, :, None] * p.dim_proj + columns).ravel()
            out = np.bincount(cells, weights=projected.ravel(), minlength=r * b * p.dim_proj)
        else:
            out = np.empty((r, b * p.dim_proj), dtype=np.float64)
            for rep in range(r):
                cells = (bucket[:, rep, None] * p.dim_proj + columns).ravel()  # (n * dim_proj,)
                out[rep] = np.bincount(cells, weights=projected[:, rep, :].ravel(), minlength=b * p.dim_proj)
        out = out.reshape(r, b, p.dim_proj)
        if document:
            counts = np.stack([np.bincount(bucket[:, rep], minlength=b) for rep in range(r)])  # (r, b)
            filled = counts > 0
            out[filled] /= counts[filled][:, None]
            for rep in np.flatnonzero(~filled.all(axis=1)):
                occupied = np.flatnonzero(filled[rep])
                for e in np.flatnonzero(~filled[rep]):
                    # Nearest occupied bucket by Hamming distance, ties to the lowest id; its
                    # first token stands in for the empty bucket (fastembed's rule).
                    near = occupied[np.argmin(self._hamming[e, occupied])]
                    first = int(np.flatnonzero(bucket[:, rep] == near)[0])
                    out[rep, e] = projected[first, rep]
        return out.reshape(-1).astype(np.float32)  # (r * b * dim_proj,)

    def document(self, vectors: npt.ArrayLike) -> np.ndarray:
        """A page's encoding ``(size,)`` float32: bucket means, empty buckets filled."""
        return self._encode(vectors, document=True)

    def query(self, vectors: npt.ArrayLike) -> np.ndarray:
        """A query's encoding ``(size,)`` float32: bucket sums, empty buckets left zero."""
        return self._encode(vectors, document=False)


_CACHE: dict[MuveraParams, Muvera] = {}


def muvera(params: MuveraParams) -> Muvera:
    """The (cached) encoder of ``params``: drawing the matrices costs ~5 ms."""
    enc = _CACHE.get(params)
    if enc is None:
        enc = _CACHE[params] = Muvera(params)
    return enc
