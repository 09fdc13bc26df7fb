"""Vision attention over packed spans in one call per span length (ragspine.models.windows).

The expected values are worked out apart: attention within each span written out as
softmax(q k^T * scale) v in float64, and, for the encoders, the same tiny checkpoint run through
transformers' own split (one SDPA call per span).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models_kit import needs_cuda, needs_gpu_extra

pytestmark = needs_gpu_extra


def _spans_by_hand(q: Any, k: Any, v: Any, bounds: list[int], scale: float) -> np.ndarray:
    """(seq, heads, head_dim) float64: each span attends only to itself."""
    q, k, v = (t[0].double().numpy() for t in (q, k, v))  # (heads, seq, head_dim)
    out = np.zeros((q.shape[1], q.shape[0], q.shape[2]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b == a:
            continue
        s = np.einsum("hid,hjd->hij", q[:, a:b], k[:, a:b]) * scale
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        out[a:b] = np.einsum("hij,hjd->hid", w, v[:, a:b]).transpose(1, 0, 2)
    return out


# Spans of mixed lengths in no order, an empty one (transformers' window lists hold them), and
# one span alone of its length.
BOUNDS = [0, 16, 32, 32, 40, 56, 72, 80, 83, 99]


def _qkv(seed: int = 0, heads: int = 3, head_dim: int = 8) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, heads, BOUNDS[-1], head_dim, generator=g) for _ in range(3))  # type: ignore[return-value]


def test_each_span_attends_to_itself_only() -> None:
    import torch

    from ragspine.models.windows import window_attention

    q, k, v = _qkv()
    out, none = window_attention(torch.nn.Module(), q, k, v, scaling=0.3, cu_seq_lens_q=torch.tensor(BOUNDS))
    assert none is None and out.shape == (1, BOUNDS[-1], 3, 8)
    np.testing.assert_allclose(out[0].double().numpy(), _spans_by_hand(q, k, v, BOUNDS, 0.3), atol=1e-5)


def test_one_call_per_length_and_split_when_the_scores_would_be_large(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import ragspine.models.windows as mod

    calls: list[tuple[int, ...]] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    q, k, v = _qkv(1)
    cu = torch.tensor(BOUNDS)
    expected = _spans_by_hand(q, k, v, BOUNDS, 0.25)
    out, _ = mod.window_attention(torch.nn.Module(), q, k, v, scaling=0.25, cu_seq_lens_q=cu)
    # Lengths 16 (x5), 8 (x2), 3 (x1): three calls for eight spans.
    assert sorted(calls) == sorted([(5, 3, 16, 8), (2, 3, 8, 8), (1, 3, 3, 8)])
    np.testing.assert_allclose(out[0].double().numpy(), expected, atol=1e-5)
    # Room for the scores of two 16-long spans a call: the five go in three calls.
    calls.clear()
    monkeypatch.setattr(mod, "MAX_SCORE_BYTES", 2 * 3 * 16 * 16 * 4)
    out, _ = mod.window_attention(torch.nn.Module(), q, k, v, scaling=0.25, cu_seq_lens_q=cu)
    assert sorted(c for c in calls if c[2] == 16) == [(1, 3, 16, 8), (2, 3, 16, 8), (2, 3, 16, 8)]
    np.testing.assert_allclose(out[0].double().numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("family", ["colqwen2_5", "colqwen2"])
def test_encoders_batch_their_spans_with_the_same_vectors(
    tiny_model_dir: Any, page_images: list[Any], family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny ColQwen2.5 (two windowed blocks' worth of windows) and ColQwen2 (one span a page)
    give the vectors transformers' split gives, in fewer attention calls."""
    import torch

    from ragspine.models import load_page_encoder
    from ragspine.models.windows import batch_windows

    folder = str(tiny_model_dir(family))
    batched = load_page_encoder(folder, device="cpu")
    split = load_page_encoder(folder, device="cpu")
    assert batched.batched_windows > 0
    assert batch_windows(split.model, on=False) == 0
    calls = {"n": 0}
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    pages = page_images[:6]
    a = split.encode_pages(pages)
    n_split, calls["n"] = calls["n"], 0
    b = batched.encode_pages(pages)
    assert calls["n"] < n_split
    for x, y in zip(a, b, strict=True):
        assert x.vectors.shape == y.vectors.shape
        np.testing.assert_allclose(y.vectors, x.vectors, atol=1e-5)


def test_eager_attention_is_left_alone(tiny_model_dir: Any) -> None:
    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir("colqwen2_5")), device="cpu", attn_implementation="eager")
    assert enc.batched_windows == 0


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("family", ["colqwen2_5", "colqwen2"])
def test_batched_spans_match_the_split_on_cuda_bf16(tiny_model_dir: Any, page_images: list[Any], family: str) -> None:
    """On the GPU, in bf16, SDPA's fused kernels run: the vectors agree to a cosine of 0.999."""
    from ragspine.models import load_page_encoder
    from ragspine.models.windows import batch_windows

    folder = str(tiny_model_dir(family))
    batched, split = load_page_encoder(folder), load_page_encoder(folder)
    assert batched.device.type == "cuda" and batched.batched_windows > 0
    batch_windows(split.model, on=False)
    for x, y in zip(split.encode_pages(page_images), batched.encode_pages(page_images), strict=True):
        a, b = x.vectors.astype(np.float64), y.vectors.astype(np.float64)
        cos = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        assert cos.min() >= 0.999
