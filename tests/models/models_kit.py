"""Shared constants and marks for the model tests (``import models_kit``)."""

from __future__ import annotations

import numpy as np
import pytest

from ragspine.models._extras import (
    PAGE_MODEL_PACKAGES,
    SENTENCE_TRANSFORMERS_PACKAGES,
    missing,
)

MISSING = missing(tuple(dict.fromkeys(PAGE_MODEL_PACKAGES + SENTENCE_TRANSFORMERS_PACKAGES)))
#: Module-level mark for test files that load models (tests/conftest.py stops `make test` instead).
needs_gpu_extra = pytest.mark.skipif(
    bool(MISSING), reason=f"the gpu extra is not installed ({', '.join(MISSING)} missing)"
)



def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


#: For the tests marked ``gpu``: they run where a CUDA device is (bench/gpu_checks.sh).
needs_cuda = pytest.mark.skipif(not _cuda(), reason="no CUDA GPU")

PAGE_FAMILIES = ("colpali", "colqwen2", "colqwen2_5", "colidefics3")

#: Queries of very different lengths, so batches are padded (left for Qwen and Idefics3).
QUERIES = [
    "revenue grew",
    "which region led quarterly sales growth since 2019, and by how much in percent?",
    "x",
    "net income in millions of dollars",
    "  ?  ",
]


def np_maxsim(q: np.ndarray, d: np.ndarray) -> float:
    """MaxSim in plain loops: for each query row the best dot product with any doc row, summed."""
    total = 0.0
    for qi in q.astype(np.float64):
        total += max(float(np.dot(qi, dj)) for dj in d.astype(np.float64))
    return total


def assert_same_pages(plain: list, other: list, min_cos: float = 0.9999) -> None:  # type: ignore[type-arg]
    """Two encodings of the same pages agree: the same shapes, and every row's cosine at least
    ``min_cos`` (the same bf16 inputs on CUDA; kernels may differ in their last bits)."""
    for a, b in zip(plain, other, strict=True):
        assert a.vectors.shape == b.vectors.shape
        x, y = a.vectors.astype(np.float64), b.vectors.astype(np.float64)
        cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
        assert cos.min() >= min_cos
