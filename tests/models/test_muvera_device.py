"""MUVERA page encodings of a batch in torch (``ragspine.models.muvera_device``) against
fastembed's reference implementation, page by page.

The expected values are fastembed's ``Muvera.process_document`` for the same parameters and seed
(a per-token Python loop, written apart from both of ragspine's encoders). The batch mixes
ColPali-sized pages with pages so short that most buckets are empty (the rule that fills them
from the nearest occupied bucket), so one page's cells must never leak into another's.
"""

from __future__ import annotations

import numpy as np
import pytest
from models_kit import needs_cuda, needs_gpu_extra

from ragspine.scoring.muvera import Muvera, MuveraParams

pytestmark = needs_gpu_extra


def _pages(dim: int, lengths: list[int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([dim, seed, *lengths])
    out = []
    for n in lengths:
        x = rng.standard_normal((n, dim))
        out.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    return out


@pytest.mark.parametrize(("dim", "k_sim", "dim_proj", "r_reps", "seed", "lengths"), [
    (128, 5, 16, 20, 42, [1030, 20, 1, 300, 1030]),  # the defaults: pages and near-empty ones
    (16, 3, 16, 2, 1, [5, 40]),  # no projection
    (8, 2, 3, 3, 0, [1, 1, 7]),
])
def test_a_batch_on_the_device_encodes_each_page_as_fastembed_does(
    dim: int, k_sim: int, dim_proj: int, r_reps: int, seed: int, lengths: list[int]
) -> None:
    from ragspine.models.muvera_device import DeviceMuvera

    params = MuveraParams(dim, k_sim, dim_proj, r_reps, seed)
    pages = _pages(dim, lengths, seed)
    got = DeviceMuvera(Muvera(params), "cpu").documents(pages)
    # Here, not at the top: the GPU machine's image has no fastembed, and the CUDA test below
    # needs none (it checks against ragspine's numpy encoder, itself checked against fastembed).
    from fastembed.postprocess import Muvera as Reference

    ref = Reference(dim, k_sim, dim_proj, r_reps, seed)
    assert len(got) == len(pages)
    for page, enc in zip(pages, got, strict=True):
        assert enc.shape == (params.size,) and enc.dtype == np.float32
        np.testing.assert_allclose(enc, ref.process_document(page), rtol=1e-5, atol=1e-6)
        # and the numpy encoder the query side uses
        np.testing.assert_allclose(enc, Muvera(params).document(page), rtol=1e-5, atol=1e-6)


def test_tensors_in_and_bad_batches_out() -> None:
    import torch

    from ragspine.models.muvera_device import DeviceMuvera

    params = MuveraParams(16, 3, 4, 2, 5)
    dev = DeviceMuvera(Muvera(params), "cpu")
    page = _pages(16, [9], 0)[0]
    np.testing.assert_allclose(dev.documents([torch.from_numpy(page)])[0], Muvera(params).document(page),
                               rtol=1e-5, atol=1e-6)
    assert dev.documents([]) == []
    with pytest.raises(ValueError, match="empty multivector"):
        dev.documents([page, page[:0]])
    with pytest.raises(ValueError, match=r"shape \(n, 16\)"):
        dev.documents([np.zeros((3, 8), dtype=np.float32)])


@pytest.mark.gpu
@needs_cuda
def test_the_batch_on_cuda_equals_the_numpy_encodings() -> None:
    from ragspine.models.muvera_device import DeviceMuvera

    params = MuveraParams(128)
    pages = _pages(128, [1030, 700, 20, 1030], 3)
    got = DeviceMuvera(Muvera(params), "cuda").documents(pages)
    for page, enc in zip(pages, got, strict=True):
        np.testing.assert_allclose(enc, Muvera(params).document(page), rtol=1e-4, atol=1e-5)
