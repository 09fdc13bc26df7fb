"""Preparing pages apart from encoding them (``BasePageEncoder.prepare_pages`` and
``encode_prepared``), as the ingest's encode stage does, and pinned host memory on CUDA.

The expected vectors are the encoder's own ``encode_pages`` of the same images: the split must
change where the work runs, never what comes out.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from models_kit import assert_same_pages, needs_cuda, needs_gpu_extra

from ragspine.errors import InvalidRequestError

pytestmark = needs_gpu_extra


@pytest.mark.parametrize("family", ["colpali", "colqwen2", "colidefics3"])
def test_prepared_then_encoded_equals_encoded_at_once(tiny_model_dir: Any, page_images: list[Any], family: str) -> None:
    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir(family)), device="cpu")
    enc.batch_size = 2  # several batches, and (ColQwen2, ColIdefics3) several buckets
    whole = enc.encode_pages(page_images)
    prepared = enc.prepare_pages(page_images)
    assert len(prepared.batches) == len(prepared.plan) >= 3
    assert sorted(i for idx in prepared.plan for i in idx) == list(range(len(page_images)))
    split = enc.encode_prepared(prepared)
    assert len(split) == len(whole)
    for a, b in zip(whole, split, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)
        np.testing.assert_array_equal(a.image_mask, b.image_mask)
        assert a.grid == b.grid
    assert enc.encode_prepared(enc.prepare_pages([])) == []


def test_pages_prepared_on_another_thread_and_by_another_encoder(tiny_model_dir: Any, page_images: list[Any]) -> None:
    """A prep thread uses its own copy of the processor; pages prepared by one encoder are refused
    by another (their batch plan and tensors are that encoder's)."""
    from ragspine.models import load_page_encoder

    folder = str(tiny_model_dir("colqwen2"))
    enc, other = load_page_encoder(folder, device="cpu"), load_page_encoder(folder, device="cpu")
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.update(p=enc.prepare_pages(page_images[:3]),
                                                   own=enc.prep.processor_for_thread() is not enc.processor))
    t.start()
    t.join()
    assert got["own"]
    for a, b in zip(enc.encode_pages(page_images[:3]), enc.encode_prepared(got["p"]), strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)
    with pytest.raises(ValueError, match="another encoder"):
        other.encode_prepared(got["p"])


def test_prepare_pages_checks_its_input(tiny_model_dir: Any) -> None:
    from PIL import Image

    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    with pytest.raises(InvalidRequestError, match="item 0 is str"):
        enc.prepare_pages(["page.png"])
    with pytest.raises(InvalidRequestError, match="empty"):
        enc.prepare_pages([Image.new("RGB", (0, 5))])


def test_pages_are_pinned_only_for_cuda(tiny_model_dir: Any, page_images: list[Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU nothing is pinned (pinning needs CUDA's driver); the switch, turned on, pins."""
    from ragspine.models import colpali, load_page_encoder

    pinned: list[Any] = []
    monkeypatch.setattr(colpali, "pin", lambda batch, dtype: pinned.append(dtype) or batch)
    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    assert enc.pin_memory is False
    batch, _ = enc.prepare_pages(page_images[:2]).batches[0]
    assert not batch["pixel_values"].is_pinned() and pinned == []
    enc.pin_memory = True
    enc.prepare_pages(page_images[:2])
    assert pinned == [enc.dtype]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("family", ["colpali", "colqwen2"])
def test_pinned_batches_give_the_plain_vectors_on_cuda(tiny_model_dir: Any, page_images: list[Any], family: str) -> None:
    """Pinned, cast to bf16 on the prep thread and copied without blocking: the same vectors as
    the plain copy (cast on the device after a blocking copy)."""
    import torch

    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir(family)), dtype="bfloat16")
    assert enc.device.type == "cuda" and enc.pin_memory
    prepared = enc.prepare_pages(page_images)
    batch, _ = prepared.batches[0]
    assert batch["pixel_values"].is_pinned() and batch["pixel_values"].dtype == torch.bfloat16
    pinned = enc.encode_prepared(prepared)
    enc.pin_memory = False
    plain = enc.encode_pages(page_images)
    assert_same_pages(plain, pinned)
