"""MaxSim, token pooling and quantization against plain loops and hand-built pages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragspine.scoring import multivector as mv
from ragspine.scoring.multivector import (
    INT8_MAX,
    binary_dot,
    binary_maxsim_many,
    hierarchical_labels,
    int8_error_bound,
    maxsim,
    maxsim_many,
    pool_hierarchical,
    pool_rows_cols,
    quantization_error,
    quantize_binary,
    quantize_int8,
    rescore_recall,
)

EXAMPLES = settings(max_examples=40, deadline=None)
FLOATS = st.floats(-1.0, 1.0, width=32, allow_nan=False, allow_subnormal=False)


def matrices(max_rows: int = 12, dim: int | None = None) -> st.SearchStrategy[np.ndarray]:
    dims = st.just(dim) if dim is not None else st.integers(1, 8)
    return st.tuples(st.integers(1, max_rows), dims).flatmap(
        lambda shape: arrays(np.float32, shape, elements=FLOATS)
    )


def loop_maxsim(q: np.ndarray, doc: np.ndarray) -> float:
    total = 0.0
    for qi in q:
        best = -math.inf
        for dj in doc:
            best = max(best, sum(float(a) * float(b) for a, b in zip(qi, dj)))
        total += best
    return total


# -- MaxSim ----------------------------------------------------------------------------------


@EXAMPLES
@given(st.integers(1, 8).flatmap(lambda d: st.tuples(matrices(6, d), st.lists(matrices(10, d), min_size=1, max_size=5))))
def test_maxsim_equals_double_loop(case: tuple[np.ndarray, list[np.ndarray]]) -> None:
    q, docs = case
    want = [loop_maxsim(q, d) for d in docs]
    for d, w in zip(docs, want):
        assert maxsim(q, d) == pytest.approx(w, abs=1e-4)
    assert maxsim_many(q, docs) == pytest.approx(want, abs=1e-4)


def test_maxsim_hand_computed() -> None:
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    doc = np.array([[0.5, 0.5], [1.0, -1.0], [0.0, 0.25]])
    # token 1: max(0.5, 1.0, 0.0) = 1.0; token 2: max(0.5, -1.0, 0.25) = 0.5
    assert maxsim(q, doc) == pytest.approx(1.5)


def test_maxsim_many_blocks_give_the_same_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(3, 4)).astype(np.float32)
    docs = [rng.normal(size=(int(n), 4)).astype(np.float32) for n in rng.integers(1, 9, size=25)]
    whole = maxsim_many(q, docs)
    monkeypatch.setattr(mv, "MAXSIM_BLOCK", 3 * 7)  # 7 page tokens per block: many blocks
    assert maxsim_many(q, docs) == pytest.approx(whole, abs=1e-5)
    assert whole == pytest.approx([maxsim(q, d) for d in docs], abs=1e-5)
    assert maxsim_many(q, []).shape == (0,)


@pytest.mark.parametrize(
    ("q", "doc", "msg"),
    [
        (np.zeros((2, 3)), np.zeros((4, 2)), "dim 2"),
        (np.zeros((0, 3)), np.zeros((4, 3)), "no tokens"),
        (np.zeros((2, 3)), np.zeros((0, 3)), "no tokens"),
        (np.zeros(3), np.zeros((4, 3)), "must be 2-D"),
    ],
)
def test_maxsim_rejects_bad_shapes(q: np.ndarray, doc: np.ndarray, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        maxsim(q, doc)


# -- rows/cols pooling ------------------------------------------------------------------------


def grid_2x3() -> tuple[np.ndarray, np.ndarray]:
    """A page of a 2x3 patch grid (token k has value k+1 in dim 0, 10*(k+1) in dim 1) and two
    text tokens, one before and one after the patches, as a processor may place them."""
    patches = np.array([[k + 1, 10 * (k + 1)] for k in range(6)], dtype=np.float32)  # (6, 2)
    text = np.array([[100.0, -1.0], [200.0, -2.0]], dtype=np.float32)
    vectors = np.concatenate([text[:1], patches, text[1:]])  # (8, 2)
    mask = np.array([False] + [True] * 6 + [False])
    return vectors, mask


def test_rows_cols_hand_built_grid() -> None:
    vectors, mask = grid_2x3()
    pooled = pool_rows_cols(vectors, mask, (2, 3), normalize=False)
    # grid (dim 0):  1 2 3 / 4 5 6  -> rows 2, 5; cols 2.5, 3.5, 4.5; dim 1 is ten times that
    expected = np.array(
        [[2, 20], [5, 50], [2.5, 25], [3.5, 35], [4.5, 45], [100, -1], [200, -2]], dtype=np.float32
    )
    np.testing.assert_allclose(pooled, expected)
    assert pooled.dtype == np.float32


def test_rows_cols_text_token_modes() -> None:
    vectors, mask = grid_2x3()
    assert pool_rows_cols(vectors, mask, (2, 3), text_tokens="drop").shape == (5, 2)
    mean = pool_rows_cols(vectors, mask, (2, 3), text_tokens="mean", normalize=False)
    np.testing.assert_allclose(mean[-1], [150.0, -1.5])
    assert mean.shape == (6, 2)
    normed = pool_rows_cols(vectors, mask, (2, 3))  # default: unit vectors, same directions
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, rtol=1e-6)
    raw = pool_rows_cols(vectors, mask, (2, 3), normalize=False)
    np.testing.assert_allclose(normed, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)
    # All-image page: k = 0 whatever the mode.
    assert pool_rows_cols(vectors[1:7], mask[1:7], (2, 3)).shape == (5, 2)


@EXAMPLES
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 3), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_rows_cols_shape_and_means(rows: int, cols: int, k: int, d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(rows * cols + k, d)).astype(np.float32)
    mask = np.zeros(rows * cols + k, dtype=bool)
    mask[rng.choice(rows * cols + k, size=rows * cols, replace=False)] = True
    pooled = pool_rows_cols(vectors, mask, (rows, cols), normalize=False)
    assert pooled.shape == (rows + cols + k, d)
    img = vectors[mask]
    # The mean of the row means and of the column means are both the mean of the patches.
    np.testing.assert_allclose(pooled[:rows].mean(0), img.mean(0), atol=1e-5)
    np.testing.assert_allclose(pooled[rows : rows + cols].mean(0), img.mean(0), atol=1e-5)
    np.testing.assert_allclose(pooled[rows + cols :], vectors[~mask], atol=0)


def test_rows_cols_errors() -> None:
    vectors, mask = grid_2x3()
    with pytest.raises(ValueError, match="marks 6 image tokens but grid 3x3 holds 9"):
        pool_rows_cols(vectors, mask, (3, 3))
    with pytest.raises(ValueError, match="image_mask has shape"):
        pool_rows_cols(vectors, mask[:-1], (2, 3))
    with pytest.raises(ValueError, match="text_tokens"):
        pool_rows_cols(vectors, mask, (2, 3), text_tokens="max")  # type: ignore[arg-type]


# -- hierarchical pooling ---------------------------------------------------------------------


def test_hierarchical_hand_built_groups() -> None:
    """Three tokens near e1 and three near e2, interleaved: factor 3 -> two clusters, the two
    group means, in order of first token."""
    a = np.array([[1.0, 0.05, 0.0], [1.0, -0.05, 0.0], [1.0, 0.0, 0.05]])
    b = np.array([[0.0, 1.0, 0.05], [0.05, 1.0, 0.0], [0.0, 1.0, -0.05]])
    vectors = np.stack([b[0], a[0], b[1], a[1], a[2], b[2]]).astype(np.float32)
    labels = hierarchical_labels(vectors, 2)
    assert labels.tolist() == [0, 1, 0, 1, 1, 0]
    pooled = pool_hierarchical(vectors, 3, normalize=False)
    np.testing.assert_allclose(pooled, [b.mean(0), a.mean(0)], atol=1e-6)
    unit = pool_hierarchical(vectors, 3)  # default: normalised cluster means
    np.testing.assert_allclose(unit, pooled / np.linalg.norm(pooled, axis=1, keepdims=True), rtol=1e-6)


@EXAMPLES
@given(st.integers(1, 40), st.integers(1, 9), st.integers(2, 6), st.booleans(), st.integers(0, 2**31 - 1))
def test_hierarchical_count_and_mean(n: int, factor: int, d: int, repeat: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, d)).astype(np.float32)
    if repeat:  # padded pages repeat tokens: tied merge heights must not change the count
        vectors = np.resize(vectors[: max(1, n // 3)], (n, d)).astype(np.float32)
    k = math.ceil(n / factor)
    labels = hierarchical_labels(vectors, k)
    assert sorted(set(labels.tolist())) == list(range(k))
    pooled = pool_hierarchical(vectors, factor, normalize=False)
    assert pooled.shape == (k, d)
    sizes = np.bincount(labels, minlength=k)  # (k,)
    # Size-weighted mean of the cluster means = mean of the tokens.
    np.testing.assert_allclose((pooled * sizes[:, None]).sum(0) / n, vectors.mean(0), atol=1e-5)
    for c in range(k):
        np.testing.assert_allclose(pooled[c], vectors[labels == c].mean(0), atol=1e-5)


def test_hierarchical_factor_one_is_identity_and_errors() -> None:
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(pool_hierarchical(v, 1, normalize=False), v)
    assert np.linalg.norm(pool_hierarchical(v + 1, 2), axis=1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="factor"):
        pool_hierarchical(v, 0)
    with pytest.raises(ValueError, match="factor"):
        pool_hierarchical(v, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_clusters"):
        hierarchical_labels(v, 5)


# -- quantization ----------------------------------------------------------------------------


@EXAMPLES
@given(matrices(20), st.sampled_from(["vector", "dim"]))
def test_int8_round_trip_within_half_a_step(x: np.ndarray, per: str) -> None:
    qz = quantize_int8(x, per=per)  # type: ignore[arg-type]
    assert qz.codes.dtype == np.int8 and qz.codes.shape == x.shape
    assert np.abs(qz.codes).max() <= INT8_MAX
    assert qz.scale.shape == ((x.shape[0], 1) if per == "vector" else (1, x.shape[1]))
    err = np.abs(x - qz.dequantize())
    assert np.all(err <= np.broadcast_to(qz.scale, x.shape) / 2 + 1e-6)
    assert qz.nbytes == x.size + qz.scale.nbytes


@EXAMPLES
@given(st.integers(1, 8).flatmap(lambda d: st.tuples(matrices(6, d), matrices(15, d))), st.sampled_from(["vector", "dim"]))
def test_int8_maxsim_error_within_bound(case: tuple[np.ndarray, np.ndarray], per: str) -> None:
    q, doc = case
    qz = quantize_int8(doc, per=per)  # type: ignore[arg-type]
    err = abs(maxsim(q, doc) - maxsim(q, qz.dequantize()))
    assert err <= int8_error_bound(q, qz) + 1e-5


def test_int8_hand_computed() -> None:
    qz = quantize_int8(np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]]))
    assert qz.codes.tolist() == [[64, -127, 32], [0, 0, 0]]  # 0.5 * 127 = 63.5 rounds to 64
    np.testing.assert_allclose(qz.scale.ravel(), [1 / 127, 1.0])
    max_abs, rel = quantization_error([[0.5, -1.0, 0.25], [0, 0, 0]], qz.dequantize())
    assert max_abs == pytest.approx(0.5 / 127 / 1, abs=1e-3)
    assert rel < 0.01


@EXAMPLES
@given(matrices(10), matrices(10))
def test_binary_codes_and_dot(x: np.ndarray, y: np.ndarray) -> None:
    if x.shape[1] != y.shape[1]:
        y = np.resize(y, (y.shape[0], x.shape[1])).astype(np.float32)
    bx, by = quantize_binary(x), quantize_binary(y)
    assert bx.bits.shape == (x.shape[0], math.ceil(x.shape[1] / 8)) and bx.nbytes == bx.bits.size
    sx = np.where(x > 0, 1.0, -1.0)
    np.testing.assert_array_equal(bx.unpack(), sx)
    np.testing.assert_array_equal(binary_dot(bx, by), (sx @ np.where(y > 0, 1.0, -1.0).T).astype(np.int64))


def test_binary_maxsim_ranks_sign_agreement() -> None:
    q = np.array([[1.0, 1.0, -1.0, -1.0]])
    same = quantize_binary(np.array([[0.2, 0.9, -0.1, -0.3]]))  # all signs agree: 4/4
    half = quantize_binary(np.array([[0.2, -0.9, 0.1, -0.3]]))  # two agree: (2 - 2) / 4 = 0
    assert binary_maxsim_many(q, [same, half]).tolist() == [1.0, 0.0]


def test_rescore_recall() -> None:
    exact = np.array([9.0, 8.0, 7.0, 1.0, 0.0])
    approx = np.array([5.0, 0.0, 4.0, 6.0, 3.0])  # approx order: 3, 0, 2, 4, 1
    assert rescore_recall(exact, approx, k=2, candidates=2) == 0.5  # {0,1} vs {3,0}
    assert rescore_recall(exact, approx, k=2, candidates=4) == 0.5  # 1 is last by approx
    assert rescore_recall(exact, approx, k=2, candidates=5) == 1.0
    with pytest.raises(ValueError):
        rescore_recall(exact, approx[:3], k=2, candidates=2)


# -- maxsim_int8 ------------------------------------------------------------------------------


@pytest.mark.parametrize(("block", "convert"), [(None, None), (64, 7)])
def test_maxsim_int8_is_maxsim_of_the_dequantized_pages(monkeypatch: pytest.MonkeyPatch, block: int | None,
                                                        convert: int | None) -> None:
    """Pages of 1-50 tokens; with tiny blocks (64 similarities, 7 tokens converted at a time)
    pages longer than a conversion block or a similarity block are converted and scored
    alone, and the rest several to a block."""
    import ragspine.scoring.multivector as mv

    if block is not None:
        monkeypatch.setattr(mv, "MAXSIM_BLOCK", block)
        monkeypatch.setattr(mv, "INT8_CONVERT_BLOCK", convert)
    rng = np.random.default_rng(5)
    pages = [rng.normal(size=(int(rng.integers(1, 50)), 8)).astype(np.float32) for _ in range(30)]
    quant = [mv.quantize_int8(p) for p in pages]
    q = rng.normal(size=(3, 8)).astype(np.float32)
    got = mv.maxsim_int8(q, [(x.codes, x.scale.reshape(-1)) for x in quant])
    want = [float((q @ (x.codes.astype(np.float64) * x.scale).T).max(axis=1).sum()) for x in quant]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert mv.maxsim_int8(q, []).shape == (0,)
    with pytest.raises(ValueError, match="must be int8"):
        mv.maxsim_int8(q, [(quant[0].codes.astype(np.float32), quant[0].scale.reshape(-1))])
    with pytest.raises(ValueError, match="must be int8"):
        mv.maxsim_int8(q, [(quant[0].codes[:0], quant[0].scale.reshape(-1)[:0])])
    with pytest.raises(ValueError, match="scales of shape"):
        mv.maxsim_int8(q, [(quant[0].codes, quant[0].scale.reshape(-1)[1:])])
