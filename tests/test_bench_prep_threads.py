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
    siglip, qwen, idefics = procs.values()
    assert siglip([page])["pixel_values"].shape == (1, 3, 448, 448)
    out = qwen([page])
    t, rows, cols = out["image_grid_thw"][0]
    # At most 768 merged tokens (2 x 2 patches of 14 px each), at the page's aspect.
    assert t == 1 and rows * cols // 4 <= 768 and cols > rows
    # 960 x 540 brought to 2,048 px long (2,048 x 1,152): 4 x 3 tiles of 512 px and the global
    # thumbnail.
    tiles = idefics([page])["pixel_values"]
    assert tiles.shape == (1, 4 * 3 + 1, 3, 512, 512)
    assert pt.rate(siglip, [page] * 4, threads=2, batch=2) > 0


def test_colsmols_paths_make_the_same_inputs_on_their_own_processor_copies() -> None:
    import torch
    from PIL import Image

    paths = pt.idefics3_paths(threads=2)
    page = Image.new("RGB", (960, 540), (200, 30, 30))
    plain = paths[pt.IDEFICS_PROCESSOR]([page])
    tiles = paths[pt.IDEFICS_TILES]([page])
    assert "pixel_values" not in tiles and tiles["page_tiles"].shape == (1, 13, 512, 512, 3)
    on_cpu = paths[pt.IDEFICS_TILES_CPU]([page])
    for key in ("input_ids", "attention_mask", "pixel_values", "pixel_attention_mask"):
        assert torch.equal(plain[key], on_cpu[key]), key
    assert pt.rate(paths[pt.IDEFICS_TILES], [page] * 4, threads=2, batch=2) > 0


def test_the_gil_probe_counts_what_a_thread_beside_it_prepares() -> None:
    from PIL import Image

    siglip = next(iter(pt.processors().values()))
    page = Image.new("RGB", (960, 540), (200, 30, 30))
    calls = []

    def proc(batch: list) -> object:
        calls.append(len(batch))
        return siglip(batch)

    lost, rate = pt.gil_share(proc, [page] * 4, batch=2, seconds=0.3, duty=0.5)
    assert 0.0 <= lost <= 1.0 and rate >= 0
    assert calls and set(calls) == {2}  # batches of 2 pages, taken round and round
    assert pt.spin(0.01) > 0 and pt.spin(0.01, duty=0.25) > 0


def test_the_encoder_paths_prepare_alike_on_the_thread_and_in_a_process() -> None:
    import torch
    from PIL import Image

    paths, pools = pt.encoder_paths()
    try:
        assert set(paths) == {f"{f} {w}" for f in ("colpali", "colqwen2", "colidefics3")
                              for w in ("on the thread", "in a prep process")}
        page = Image.new("RGB", (300, 200), (200, 30, 30))
        here, _ = paths["colqwen2 on the thread"]([page])
        there, _ = paths["colqwen2 in a prep process"]([page])
        assert set(here) == set(there) and all(torch.equal(here[k], there[k]) for k in here)
    finally:
        for pool in pools:
            pool.close()
