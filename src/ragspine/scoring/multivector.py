"""Multivector math for the visual channel: MaxSim, token pooling, quantization.

Pure numpy functions, no model and no store. Shapes are in the comments; ``d`` is the embedding
width (128 for the ColPali family), a "page" is one multivector ``(n_tokens, d)``.

- :func:`maxsim`, :func:`maxsim_many` — late-interaction score
  ``sum_i max_j <q_i, d_j>`` (ColBERT, Khattab & Zaharia 2020; ColPali, Faysse et al. 2024);
  :func:`maxsim_int8` the same over pages stored as int8 codes with a scale per token.
- :func:`pool_rows_cols` — mean of every row and every column of the image-patch grid: the
  pooled multivector the store's prefetch stage searches before exact MaxSim on the full one.
- :func:`pool_hierarchical` — agglomerative clustering of the tokens into
  ``ceil(n / factor)`` clusters, each mean-pooled (after colpali-engine's
  ``HierarchicalTokenPooler``; differences are in its docstring).
- :func:`quantize_int8` / :func:`quantize_binary` and the error helpers, to reason about what
  the store's scalar and binary quantization lose and how much rescoring must win back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ragspine.errors import MissingExtraError

FloatArray = npt.NDArray[np.float32]

#: Largest magnitude of a symmetric int8 code (-127..127; -128 is left unused so that the
#: code range is symmetric and ``-code`` is always representable).
INT8_MAX = 127
#: Query tokens x page tokens scored per block in :func:`maxsim_many` (bounds the temporary
#: similarity matrix to ``MAXSIM_BLOCK * 4`` bytes, 64 MiB).
MAXSIM_BLOCK = 16 * 1024 * 1024
#: What :func:`pool_rows_cols` does with the non-image tokens (ColPali's prompt tokens,
#: ColQwen's chat-template tokens) by default. See its docstring for why.
DEFAULT_TEXT_TOKENS: Literal["keep", "mean", "drop"] = "keep"


# -- validation --------------------------------------------------------------------------------


def _as_2d(name: str, x: npt.ArrayLike, d: int | None = None) -> FloatArray:
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_tokens, dim), got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError(f"{name} has no tokens (shape {a.shape}); MaxSim needs at least one")
    if d is not None and a.shape[1] != d:
        raise ValueError(f"{name} has dim {a.shape[1]}, the query has dim {d}")
    return a


# -- MaxSim ------------------------------------------------------------------------------------


def maxsim(q: npt.ArrayLike, doc: npt.ArrayLike) -> float:
    """Late-interaction score ``sum_i max_j <q_i, doc_j>`` of one query and one page.

    Dot products, not cosines: the ColPali family emits L2-normalised token vectors, so the two
    agree, and Qdrant's ``MaxSim`` comparator on a ``Dot`` field computes exactly this.
    """
    qa = _as_2d("query", q)  # (nq, d)
    da = _as_2d("doc", doc, qa.shape[1])  # (nd, d)
    sim = qa @ da.T  # (nq, nd)
    return float(sim.max(axis=1).sum(dtype=np.float64))


def maxsim_many(q: npt.ArrayLike, docs: Sequence[npt.ArrayLike]) -> npt.NDArray[np.float64]:
    """:func:`maxsim` of one query against many pages of any lengths, one score per page.

    Pages are concatenated and scored in blocks of about ``MAXSIM_BLOCK`` similarities; each
    block takes the per-page maximum with ``np.maximum.reduceat``.
    """
    qa = _as_2d("query", q)  # (nq, d)
    arrays = [_as_2d(f"docs[{i}]", x, qa.shape[1]) for i, x in enumerate(docs)]
    out = np.empty(len(arrays), dtype=np.float64)  # (n_docs,)
    if not arrays:
        return out
    per_block = max(1, MAXSIM_BLOCK // max(1, qa.shape[0]))  # page tokens per block
    start = 0
    while start < len(arrays):
        stop, tokens = start, 0
        while stop < len(arrays) and (stop == start or tokens + len(arrays[stop]) <= per_block):
            tokens += len(arrays[stop])
            stop += 1
        block = np.concatenate(arrays[start:stop])  # (tokens, d)
        lengths = np.fromiter((len(a) for a in arrays[start:stop]), dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # (stop - start,)
        sim = qa @ block.T  # (nq, tokens)
        best = np.maximum.reduceat(sim, starts, axis=1)  # (nq, stop - start)
        out[start:stop] = best.sum(axis=0, dtype=np.float64)
        start = stop
    if len(out) != len(arrays):  # pragma: no cover - guards the block loop
        raise AssertionError(f"maxsim_many returned {len(out)} scores for {len(arrays)} pages")
    return out


#: Page tokens converted from int8 to float32 at a time in :func:`maxsim_int8`: 4,096 x 128
#: float32 is 2 MiB, so each block is converted and multiplied while it is still in cache.
#: Measured on the 2-core development machine (100 ColPali pages, 20 query tokens): blocks of
#: 1,030-16,480 tokens took 10-12 ms, converting all 103,000 tokens first 13-14 ms.
INT8_CONVERT_BLOCK = 4096


def maxsim_int8(
    q: npt.ArrayLike,
    pages: Sequence[tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]],
) -> npt.NDArray[np.float64]:
    """:func:`maxsim_many` of pages stored as int8 codes with one scale per token, as matrix
    products.

    Each page is ``(codes, scale)``: ``codes`` ``(n, d)`` int8 and ``scale`` ``(n,)``, token
    ``t`` being ``codes[t] * scale[t]``. The codes may be views of a memory map: they are read
    once, converted to float32 straight into a reused block of ``INT8_CONVERT_BLOCK`` tokens
    (several pages, or one longer page), and the block is multiplied with the query while it is
    in cache, as ``block @ query.T`` (page tokens x query tokens: the long side is the rows,
    15-20% faster with OpenBLAS than ``query @ block.T``, same values). Each row is then scaled
    (``<q, c * s> = s <q, c>``) and the per-page maximum is one ``np.maximum.reduceat``. The
    scores are :func:`maxsim_many` of the dequantized pages up to float32 rounding (a test
    holds them to it).
    """
    qa = _as_2d("query", q)  # (nq, d)
    d = qa.shape[1]
    lengths = np.empty(len(pages), dtype=np.int64)  # (n_pages,)
    for i, (c, sc) in enumerate(pages):
        if c.dtype != np.int8 or c.ndim != 2 or c.shape[1] != d or not c.shape[0]:
            raise ValueError(f"page {i}: codes must be int8 (tokens >= 1, {d}), got {c.dtype} {c.shape}")
        if np.shape(sc) != (c.shape[0],):
            raise ValueError(f"page {i}: {c.shape[0]} tokens but scales of shape {np.shape(sc)}")
        lengths[i] = c.shape[0]
    out = np.empty(len(pages), dtype=np.float64)  # (n_pages,)
    if not len(pages):
        return out
    buf = np.empty((max(INT8_CONVERT_BLOCK, int(lengths.max())), d), dtype=np.float32)
    q_t = np.ascontiguousarray(qa.T)  # (d, nq)
    per_block = max(1, MAXSIM_BLOCK // qa.shape[0])  # page tokens per similarity block
    first = 0
    while first < len(pages):
        # Pages [first, last): as many as fit one similarity block (at least one).
        last, tokens = first, 0
        while last < len(pages) and (last == first or tokens + lengths[last] <= per_block):
            tokens += int(lengths[last])
            last += 1
        sim = np.empty((tokens, qa.shape[0]), dtype=np.float32)  # (tokens, nq)
        row = 0  # rows of sim filled
        i = first
        while i < last:
            # Convert pages into the buffer until the next one would overflow it, then multiply.
            fill = 0
            while i < last and (fill == 0 or fill + lengths[i] <= INT8_CONVERT_BLOCK):
                n = int(lengths[i])
                np.copyto(buf[fill : fill + n], pages[i][0], casting="unsafe")
                fill += n
                i += 1
            np.matmul(buf[:fill], q_t, out=sim[row : row + fill])
            row += fill
        sim *= np.concatenate([np.asarray(pages[k][1], dtype=np.float32) for k in range(first, last)])[:, None]
        starts = np.concatenate(([0], np.cumsum(lengths[first : last - 1])))
        out[first:last] = np.maximum.reduceat(sim, starts, axis=0).sum(axis=1, dtype=np.float64)
        first = last
    return out


# -- pooling -----------------------------------------------------------------------------------


def _l2_normalize(x: FloatArray) -> FloatArray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)  # (n, 1)
    return (x / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def pool_rows_cols(
    vectors: npt.ArrayLike,
    image_mask: npt.ArrayLike,
    grid: tuple[int, int],
    *,
    text_tokens: Literal["keep", "mean", "drop"] = DEFAULT_TEXT_TOKENS,
    normalize: bool = True,
) -> FloatArray:
    """Row and column means of the image-patch grid: ``(rows + cols + k, d)``.

    ``vectors`` ``(n, d)`` is a page multivector, ``image_mask`` ``(n,)`` marks its image-patch
    tokens, whose ``rows * cols`` vectors lie on ``grid = (rows, cols)`` in row-major order. The
    output is ``rows`` row means, then ``cols`` column means, then the ``k`` non-image tokens:

    - ``"keep"`` (default, ``k = n - rows * cols``): they are few (ColPali's 6 prompt tokens,
      ColQwen's ~15 template tokens, against 700-1,024 patches), the model attends over the whole
      page in them, and full MaxSim scores them too; keeping them costs a handful of vectors and
      makes the pooled score a closer stand-in for the full one than dropping or averaging them.
    - ``"mean"`` (``k = 1`` if there are any): one vector for all of them.
    - ``"drop"`` (``k = 0``).

    With ``normalize`` (default) every output vector is L2-normalised, as the page tokens are.
    A raw mean is shorter the more its tokens disagree, so raw row/column means rank pages by how
    uniform their rows are as much as by what they say; measured in ``bench/multivector.py``
    (MiniLM token vectors on a 32x32 grid, 2,000 real pages), normalised means raised recall@10
    of a 200-page prefetch against exhaustive MaxSim from 0.93 to 0.98.
    """
    v = _as_2d("vectors", vectors)  # (n, d)
    mask = np.asarray(image_mask, dtype=bool)  # (n,)
    rows, cols = int(grid[0]), int(grid[1])
    if mask.shape != (v.shape[0],):
        raise ValueError(f"image_mask has shape {mask.shape}, vectors have {v.shape[0]} tokens")
    if rows < 1 or cols < 1:
        raise ValueError(f"grid must be (rows >= 1, cols >= 1), got {grid}")
    n_img = int(mask.sum())
    if n_img != rows * cols:
        raise ValueError(
            f"image_mask marks {n_img} image tokens but grid {rows}x{cols} holds {rows * cols}"
        )
    if text_tokens not in ("keep", "mean", "drop"):
        raise ValueError(f"text_tokens must be 'keep', 'mean' or 'drop', got {text_tokens!r}")
    img = v[mask].reshape(rows, cols, v.shape[1])  # (rows, cols, d)
    parts = [img.mean(axis=1), img.mean(axis=0)]  # (rows, d), (cols, d)
    text = v[~mask]  # (n - rows*cols, d)
    if len(text) and text_tokens == "keep":
        parts.append(text)  # (k, d)
    elif len(text) and text_tokens == "mean":
        parts.append(text.mean(axis=0, keepdims=True))  # (1, d)
    out = np.concatenate(parts).astype(np.float32)  # (rows + cols + k, d)
    return _l2_normalize(out) if normalize else out


def _require_scipy():  # noqa: ANN202 - returns the scipy.cluster.hierarchy module
    try:
        from scipy.cluster import hierarchy
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("scipy", "gpu", "hierarchical token pooling") from exc
    return hierarchy


def hierarchical_labels(vectors: npt.ArrayLike, n_clusters: int) -> npt.NDArray[np.int64]:
    """Cluster label ``0..n_clusters-1`` of every token ``(n,)``, by Ward linkage on the sphere.

    Tokens are L2-normalised first, so the Euclidean distance Ward merges by is
    ``sqrt(2 - 2 cos)``: the closest tokens by cosine similarity merge first. The tree is cut
    after exactly ``n - n_clusters`` merges (not with ``fcluster(maxclust)``, which returns
    fewer clusters when merge heights tie, as they do for repeated tokens), so the count is
    exact. Labels are numbered by first occurrence, so token 0 is in cluster 0.
    """
    v = _as_2d("vectors", vectors)  # (n, d)
    n = v.shape[0]
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be in 1..{n} for {n} tokens, got {n_clusters}")
    if n_clusters == n:
        return np.arange(n, dtype=np.int64)
    hierarchy = _require_scipy()
    u = _l2_normalize(v)  # (n, d) on the unit sphere
    # Condensed Euclidean distances from one matrix product: |a - b|^2 = 2 - 2 <a, b>.
    gram = (u @ u.T).astype(np.float64)  # (n, n)
    iu = np.triu_indices(n, k=1)
    dist = np.sqrt(np.clip(2.0 - 2.0 * gram[iu], 0.0, None))  # (n * (n - 1) / 2,)
    z = hierarchy.linkage(dist, method="ward")  # (n - 1, 4)
    # Union-find over the first n - n_clusters merges; node n+i is the cluster made by merge i.
    # Merge i joins two current roots, so each side's root is set once (plain lists: fast).
    parent = list(range(2 * n - 1))
    merges = z[: n - n_clusters, :2].astype(np.int64).tolist()
    for i, (a, b) in enumerate(merges):
        parent[a] = n + i
        parent[b] = n + i

    def find(i: int) -> int:
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:  # path compression
            parent[i], i = root, parent[i]
        return root

    roots = np.fromiter((find(i) for i in range(n)), dtype=np.int64, count=n)  # (n,)
    _, first, inverse = np.unique(roots, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # rank of each root by first occurrence
    return order[inverse].astype(np.int64)


def pool_hierarchical(
    vectors: npt.ArrayLike, factor: int, *, normalize: bool = True
) -> FloatArray:
    """Hierarchical token pooling: ``(ceil(n / factor), d)`` cluster means.

    After colpali-engine's ``HierarchicalTokenPooler`` (Clavié et al., "Reducing the footprint
    of multi-vector retrieval with minimal performance impact via token pooling", 2024), with
    two deliberate differences:

    - Ward linkage runs on the normalised token vectors themselves (cosine geometry), not on
      the rows of the ``1 - cos`` matrix treated as ``n``-dimensional observations;
    - ``ceil(n / factor)`` clusters, exactly (colpali-engine: at most ``max(n // factor, 1)``).

    Cluster means are L2-normalised by default, as colpali-engine's are (see
    :func:`pool_rows_cols` for why); with ``normalize=False`` they are raw, and their
    size-weighted average equals the mean of the input. Clusters are in order of their first
    token; ``factor == 1`` keeps every token. Pool image and non-image tokens separately if the
    non-image ones must survive (see :func:`pool_rows_cols`). Costs ~0.1-0.2 s per 1,024-token
    page on one CPU core (the Ward linkage). Needs scipy (a dependency of colpali-engine, so
    ``ragspine[gpu]`` has it).
    """
    v = _as_2d("vectors", vectors)  # (n, d)
    if int(factor) != factor or factor < 1:
        raise ValueError(f"factor must be an integer >= 1, got {factor!r}")
    k = math.ceil(v.shape[0] / int(factor))
    labels = hierarchical_labels(v, k)  # (n,)
    order = np.argsort(labels, kind="stable")  # tokens grouped by cluster
    counts = np.bincount(labels, minlength=k)  # (k,), every cluster non-empty
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))  # (k,)
    sums = np.add.reduceat(v[order].astype(np.float64), starts, axis=0)  # (k, d)
    out = (sums / counts[:, None]).astype(np.float32)  # (k, d)
    return _l2_normalize(out) if normalize else out


# -- quantization ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int8Codes:
    """Symmetric int8 codes: ``x ~= codes * scale``; ``scale`` broadcasts against ``codes``."""

    codes: npt.NDArray[np.int8]  # (n, d)
    scale: FloatArray  # (n, 1) per vector, or (1, d) per dimension

    def dequantize(self) -> FloatArray:
        return (self.codes.astype(np.float32) * self.scale).astype(np.float32)  # (n, d)

    @property
    def nbytes(self) -> int:
        """Storage: one byte per component plus the float32 scales."""
        return int(self.codes.nbytes + self.scale.nbytes)


def quantize_int8(x: npt.ArrayLike, per: Literal["vector", "dim"] = "vector") -> Int8Codes:
    """Scalar int8 quantization with one symmetric scale per vector or per dimension.

    ``scale = max|x| / INT8_MAX`` over the vector (``per="vector"``) or over the dimension
    across vectors (``per="dim"``); ``codes = round(x / scale)``. Every component is then within
    ``scale / 2`` of its original (:func:`int8_error_bound`). Qdrant's own scalar quantization
    is per collection with a quantile clip; this is the reference to reason about it.
    """
    a = _as_2d("x", x)  # (n, d)
    if per not in ("vector", "dim"):
        raise ValueError(f"per must be 'vector' or 'dim', got {per!r}")
    axis = 1 if per == "vector" else 0
    amax = np.abs(a).max(axis=axis, keepdims=True)  # (n, 1) or (1, d)
    scale = np.where(amax == 0, 1.0, amax / INT8_MAX).astype(np.float32)
    codes = np.clip(np.rint(a / scale), -INT8_MAX, INT8_MAX).astype(np.int8)  # (n, d)
    return Int8Codes(codes=codes, scale=scale)


def int8_error_bound(q: npt.ArrayLike, quantized: Int8Codes) -> float:
    """Upper bound on ``|maxsim(q, doc) - maxsim(q, doc_int8)|`` for that quantized page.

    Each component moves by at most ``scale / 2``, so each dot product by at most
    ``sum_k |q_ik| * max_j scale_jk / 2``, and a max of such values moves no more than that:
    the bound sums this over the query tokens.
    """
    qa = _as_2d("query", q)  # (nq, d)
    if qa.shape[1] != quantized.codes.shape[1]:
        raise ValueError(f"query dim {qa.shape[1]} != page dim {quantized.codes.shape[1]}")
    half = np.broadcast_to(quantized.scale, quantized.codes.shape).max(axis=0) / 2  # (d,)
    return float((np.abs(qa) @ half).sum(dtype=np.float64))


@dataclass(frozen=True)
class BinaryCodes:
    """Sign bits packed 8 per byte (``np.packbits`` order); ``1`` for a component > 0."""

    bits: npt.NDArray[np.uint8]  # (n, ceil(d / 8))
    dim: int

    def unpack(self) -> FloatArray:
        """The ``{-1, +1}`` vectors the codes stand for ``(n, d)``."""
        signs = np.unpackbits(self.bits, axis=1, count=self.dim)  # (n, d) in {0, 1}
        return (signs.astype(np.float32) * 2.0 - 1.0).astype(np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


def quantize_binary(x: npt.ArrayLike) -> BinaryCodes:
    """One bit per component: the sign (Qdrant's binary quantization, 32x smaller than float32)."""
    a = _as_2d("x", x)  # (n, d)
    return BinaryCodes(bits=np.packbits(a > 0, axis=1), dim=a.shape[1])  # (n, ceil(d/8))


def binary_dot(a: BinaryCodes, b: BinaryCodes) -> npt.NDArray[np.int64]:
    """``<sign(a_i), sign(b_j)>`` for all pairs, from Hamming distances: ``d - 2 * hamming``.

    Returns ``(n_a, n_b)``; this is the score a binary-quantized index ranks by before rescoring.
    """
    if a.dim != b.dim:
        raise ValueError(f"binary codes of dims {a.dim} and {b.dim}")
    xor = np.bitwise_xor(a.bits[:, None, :], b.bits[None, :, :])  # (n_a, n_b, bytes)
    hamming = np.unpackbits(xor, axis=2, count=a.dim).sum(axis=2, dtype=np.int64)  # (n_a, n_b)
    return a.dim - 2 * hamming


def binary_maxsim_many(q: npt.ArrayLike, docs: Sequence[BinaryCodes]) -> npt.NDArray[np.float64]:
    """MaxSim of the sign-quantized query against sign-quantized pages (rescaled by ``1/d``).

    ``sum_i max_j <sign(q_i), sign(d_j)> / d``: in ``[-nq, nq]``, comparable across pages of one
    query, not to float MaxSim; use it to rank candidates, then rescore (see
    :func:`rescore_recall`).
    """
    qb = quantize_binary(q)
    out = np.empty(len(docs), dtype=np.float64)  # (n_docs,)
    for i, d in enumerate(docs):
        out[i] = binary_dot(qb, d).max(axis=1).sum() / qb.dim
    return out


def quantization_error(x: npt.ArrayLike, approx: npt.ArrayLike) -> tuple[float, float]:
    """``(max absolute, relative Frobenius)`` error of a dequantized ``approx`` of ``x``."""
    a = _as_2d("x", x)  # (n, d)
    b = np.asarray(approx, dtype=np.float32)
    if b.shape != a.shape:
        raise ValueError(f"approx has shape {b.shape}, x has {a.shape}")
    diff = a - b  # (n, d)
    denom = float(np.linalg.norm(a)) or 1.0
    return float(np.abs(diff).max()), float(np.linalg.norm(diff)) / denom


def rescore_recall(exact: npt.ArrayLike, approx: npt.ArrayLike, k: int, candidates: int) -> float:
    """Share of the exact top ``k`` found in the top ``candidates`` by the approximate score.

    This is the recall that rescoring can reach: with oversampling ``candidates / k``, the
    store scores ``candidates`` pages on the quantized vectors and rescores them exactly; a page
    of the exact top ``k`` that is not among them is lost. Ties in ``exact`` are broken by index.
    """
    e = np.asarray(exact, dtype=np.float64)  # (n,)
    a = np.asarray(approx, dtype=np.float64)  # (n,)
    if e.shape != a.shape or e.ndim != 1:
        raise ValueError(f"exact {e.shape} and approx {a.shape} must be equal 1-D shapes")
    if k < 1 or candidates < 1:
        raise ValueError(f"k and candidates must be >= 1, got {k}, {candidates}")
    k = min(k, len(e))
    top_exact = set(np.lexsort((np.arange(len(e)), -e))[:k].tolist())
    top_approx = set(np.lexsort((np.arange(len(a)), -a))[:candidates].tolist())
    return len(top_exact & top_approx) / k
