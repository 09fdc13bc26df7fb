"""bench/prep_threads.py: its processors are built offline with the checkpoints' image settings
and turn a page into what each model takes."""

from __future__ import annotations

import pytest

from bench_kit import load_bench

pytest.importorskip("transformers")
pt = load_bench("prep_threads")


def test_the_processors_make_each_models_input_on_threads() -> None:
    from PIL import Image

    procs = pt.processors()
    page = Image.new("RGB", (960, 540), (200, 30, 30))
    siglip, qwen = procs.values()
    assert siglip(images=[page], return_tensors="np")["pixel_values"].shape == (1, 3, 448, 448)
    out = qwen(images=[page], return_tensors="np")
    t, rows, cols = out["image_grid_thw"][0]
    # At most 768 merged tokens (2 x 2 patches of 14 px each), at the page's aspect.
    assert t == 1 and rows * cols // 4 <= 768 and cols > rows
    assert pt.rate(siglip, [page] * 4, threads=2, batch=2) > 0
