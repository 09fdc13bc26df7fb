"""Page preparation in worker processes (models/prep_processes.py): the same model inputs and
vectors as in the process, tensors back through shared memory, the auto rule, and the fallback
to the process when the pool breaks or is closed."""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
import pytest

from models_kit import needs_gpu_extra

pytestmark = needs_gpu_extra


def test_the_setting() -> None:
    from ragspine.models.prep_processes import prep_workers

    assert prep_workers(0) == 0 and prep_workers(1) == 0  # auto and 1: the prep threads
    assert prep_workers(2) == 2 and prep_workers(5) == 5


@pytest.mark.parametrize("family", ["colpali", "colqwen2", "colidefics3"])
def test_processes_make_the_same_inputs_and_vectors(family: str, tiny_model_dir: Any,
                                                    page_images: list[Any]) -> None:
    import torch

    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir(family)), device="cpu", prep_workers=2)
    try:
        assert enc.prep_processes is not None and enc.prep_processes.workers == 2
        assert not enc.prep_processes.started  # nothing spawned until pages are prepared
        enc.batch_size = 2
        in_process = enc.prep.prepare(page_images[:2])
        made = enc.prep_processes.prepare(page_images[:2])
        assert made is not None
        batch, layouts = made
        assert set(batch) == set(in_process[0])
        for key, value in batch.items():
            assert torch.equal(value, in_process[0][key]), key
            assert value.is_shared()  # came through shared memory, not copied down a pipe
        for a, b in zip(layouts, in_process[1], strict=True):
            assert a.grid == b.grid
            np.testing.assert_array_equal(a.image_mask, b.image_mask)
        via_processes = enc.encode_pages(page_images)  # several batches and buckets
    finally:
        enc.close()
    plain = load_page_encoder(str(tiny_model_dir(family)), device="cpu").encode_pages(page_images)
    for a, b in zip(via_processes, plain, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)
        assert a.grid == b.grid


def test_a_killed_worker_leaves_the_pages_to_the_process(tiny_model_dir: Any, page_images: list[Any],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir("colqwen2")), device="cpu", prep_workers=2)
    try:
        procs = enc.prep_processes
        assert procs is not None and procs.prepare(page_images[:1]) is not None
        for pid in list(procs._pool._processes):  # type: ignore[union-attr]
            os.kill(pid, signal.SIGKILL)
        with caplog.at_level("WARNING"):
            assert procs.prepare(page_images[:1]) is None  # broken: the caller prepares
        assert procs.broken and "page prep processes failed" in caplog.text
        expected = load_page_encoder(str(tiny_model_dir("colqwen2")), device="cpu").encode_pages(page_images)
        got = enc.encode_pages(page_images)  # prepared in the process now
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a.vectors, b.vectors)
    finally:
        enc.close()


def test_a_page_the_processor_refuses_is_the_callers_error_and_a_closed_pool_prepares_nothing(
        tiny_model_dir: Any) -> None:
    from PIL import Image

    from ragspine.models import load_page_encoder
    from ragspine.models.prep_processes import PrepProcesses

    enc = load_page_encoder(str(tiny_model_dir("colqwen2")), device="cpu")
    assert enc.prep_processes is None  # auto: the prep threads
    procs = PrepProcesses(enc.prep, 1)
    try:
        # Qwen's resize refuses a page 400 times taller than wide, in the worker; raised here.
        with pytest.raises(ValueError, match="absolute aspect ratio must be smaller than 200, got 400.0"):
            procs.prepare([Image.new("RGB", (1, 400))])
        assert not procs.broken  # a page's error is not a broken pool
        assert procs.prepare([Image.new("RGB", (40, 40))]) is not None
    finally:
        procs.close()
    assert procs.prepare([Image.new("RGB", (40, 40))]) is None  # closed: the caller prepares
    with pytest.raises(ValueError, match="at least one worker, not 0"):
        PrepProcesses(enc.prep, 0)


def test_floating_tensors_come_back_in_the_models_dtype(tiny_model_dir: Any, page_images: list[Any]) -> None:
    """On CUDA the batch is cast to the model's dtype before it is pinned anyway: the worker casts
    it first, and half the bytes are shared (the pixels; the token ids stay int64)."""
    import torch

    from ragspine.models import load_page_encoder
    from ragspine.models.prep_processes import PrepProcesses

    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    procs = PrepProcesses(enc.prep, 1, torch.bfloat16)
    try:
        made = procs.prepare(page_images[:2])
    finally:
        procs.close()
    assert made is not None
    batch, _ = made
    here, _ = enc.prep.prepare(page_images[:2])
    assert batch["pixel_values"].dtype == torch.bfloat16 and batch["input_ids"].dtype == torch.int64
    assert torch.equal(batch["pixel_values"], here["pixel_values"].to(torch.bfloat16))
    assert torch.equal(batch["input_ids"], here["input_ids"])


def test_a_batch_sent_as_the_pool_closes_is_prepared_by_the_caller(tiny_model_dir: Any) -> None:
    """close() can shut the pool down between a prep thread's taking it and its submitting: the
    submit's refusal answers None (the caller prepares), not an error that fails the ingest."""
    from PIL import Image

    from ragspine.models import load_page_encoder
    from ragspine.models.prep_processes import PrepProcesses

    enc = load_page_encoder(str(tiny_model_dir("colqwen2")), device="cpu")
    procs = PrepProcesses(enc.prep, 1)
    taken = procs._get()
    assert taken is not None
    procs.close()  # shuts `taken` down
    procs._get = lambda: taken  # type: ignore[method-assign]  (the thread took it before close)
    assert procs.prepare([Image.new("RGB", (40, 40))]) is None


class _FailingPool:
    """An executor whose every task ends as ``outcome`` says: raising it, or cancelled."""

    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        from concurrent.futures import Future

        fut: Future[Any] = Future()
        if self.outcome is None:
            fut.cancel()
        else:
            fut.set_exception(self.outcome)
        return fut

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_a_hand_over_that_fails_gives_the_pool_up_and_a_cancelled_batch_does_not(
        tiny_model_dir: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Shared memory full (torch: 'No space left on device') is not the page's fault: the pool
    is given up and the caller prepares. A batch close() cancelled is prepared by the caller too,
    and the pool is not given up for it."""
    from PIL import Image

    from ragspine.models import load_page_encoder
    from ragspine.models.prep_processes import PrepProcesses

    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    page = [Image.new("RGB", (40, 40))]
    cancelled = PrepProcesses(enc.prep, 1)
    cancelled._pool = _FailingPool(None)  # type: ignore[assignment]
    assert cancelled.prepare(page) is None and not cancelled.broken
    full = PrepProcesses(enc.prep, 1)
    full._pool = _FailingPool(RuntimeError("unable to write to file </torch_1_2>: No space left on device (28)"))  # type: ignore[assignment]
    with caplog.at_level("WARNING"):
        assert full.prepare(page) is None
    assert full.broken and "No space left on device" in caplog.text
    assert full.prepare(page) is None  # for good
