"""MUVERA encodings: ragspine's vectorised encoder against fastembed's reference implementation.

The expected values are fastembed's own ``Muvera.process_document`` / ``process_query`` for the
same parameters and seed: an independent implementation (a per-token Python loop) of the same
definition. Cases cover ColPali-shaped pages, pages so short that most buckets are empty (the
fill-from-the-nearest-bucket rule), and no projection (``dim_proj == dim``).
"""

from __future__ import annotations

import numpy as np
import pytest
from fastembed.postprocess import Muvera as Reference

from ragspine.scoring.muvera import Muvera, MuveraParams, muvera


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


CASES = [
    # (dim, k_sim, dim_proj, r_reps, seed, tokens)
    (128, 5, 16, 20, 42, 1030),  # ColPali page, fastembed's defaults
    (128, 5, 16, 20, 42, 20),  # a query-sized page: most of the 32 buckets empty
    (128, 4, 8, 10, 7, 300),
    (16, 3, 16, 2, 1, 5),  # no projection
    (8, 2, 3, 3, 0, 1),  # a single token fills every bucket
]


@pytest.mark.parametrize(("dim", "k_sim", "dim_proj", "r_reps", "seed", "n"), CASES)
def test_encodings_equal_fastembeds(dim: int, k_sim: int, dim_proj: int, r_reps: int, seed: int, n: int) -> None:
    rng = np.random.default_rng([dim, n, seed])
    x = unit(rng.standard_normal((n, dim)))
    params = MuveraParams(dim, k_sim, dim_proj, r_reps, seed)
    ours, ref = Muvera(params), Reference(dim, k_sim, dim_proj, r_reps, seed)
    assert params.size == ref.embedding_size == r_reps * 2**k_sim * dim_proj
    doc = ours.document(x)
    assert doc.shape == (params.size,) and doc.dtype == np.float32
    np.testing.assert_allclose(doc, ref.process_document(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.query(x), ref.process_query(x), rtol=1e-5, atol=1e-5)


def test_query_buckets_are_sums_and_documents_means() -> None:
    """With one repetition and no projection the encoding is the bucket table itself: a token
    repeated three times triples a query's bucket and leaves a document's unchanged."""
    params = MuveraParams(dim=4, k_sim=1, dim_proj=4, r_reps=1, seed=3)
    enc = Muvera(params)
    x = unit(np.array([[1.0, 2.0, 0.5, -1.0]]))
    once, thrice = np.repeat(x, 1, axis=0), np.repeat(x, 3, axis=0)
    np.testing.assert_allclose(enc.query(thrice), 3 * enc.query(once), rtol=1e-6)
    np.testing.assert_allclose(enc.document(thrice), enc.document(once), rtol=1e-6)
    # The token's bucket holds it; the document fills the other bucket with it, the query not.
    q = enc.query(once).reshape(2, 4)
    filled = np.flatnonzero(np.abs(q).sum(axis=1) > 0)
    assert len(filled) == 1
    np.testing.assert_allclose(q[filled[0]], x[0], rtol=1e-6)
    np.testing.assert_allclose(enc.document(once).reshape(2, 4), np.vstack([x, x]), rtol=1e-6)


def test_bad_input_is_a_clear_error() -> None:
    enc = muvera(MuveraParams(dim=8, k_sim=2, dim_proj=4, r_reps=2))
    with pytest.raises(ValueError, match="empty multivector"):
        enc.document(np.zeros((0, 8), dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(n, 8\)"):
        enc.query(np.zeros((3, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="dim_proj"):
        MuveraParams(dim=8, dim_proj=9)
    with pytest.raises(ValueError, match="k_sim"):
        MuveraParams(dim=8, k_sim=0)


def test_record_round_trip_and_cache() -> None:
    p = MuveraParams(dim=128)
    assert MuveraParams.from_record(p.record()) == p
    assert muvera(p) is muvera(MuveraParams.from_record(p.record()))
    assert p.size == 10_240
