"""ColIdefics3's pages prepared as uint8 tiles and normalised by a table (``models/idefics3_prep``)
against the processor itself.

The expected values are transformers' own ``ColIdefics3Processor.process_images`` on the same
images, with SmolVLM's (ColSmol's) image settings: a page brought to 2,048 px on its long edge,
512 px tiles and a 512 px thumbnail, built offline as bench/prep_threads.py builds them
(``models.testing.colidefics3_parts("full")``). Equal means bit for bit: the same pixel values,
pixel attention mask, token ids and attention mask.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from models_kit import assert_same_pages, needs_cuda, needs_gpu_extra

pytestmark = needs_gpu_extra

#: (width, height) of the synthetic pages, and what each one stands for.
PAGES = {
    "portrait report page": (816, 1056),  # letter at 96 dpi: 4 x 4 tiles
    "landscape slide": (960, 540),  # 16:9: 3 x 4 tiles
    "very tall page": (300, 3000),  # 4 x 1 tiles after the aspect
    "page smaller than a tile": (17, 23),
    "extreme aspect": (900, 7),  # a 2,048 x 16 strip: one row of 4 tiles
    "already 2,048 px long": (1536, 2048),  # the first resize has nothing to do
}


@pytest.fixture(scope="module")
def smolvlm() -> tuple[Any, Any]:
    """ColIdefics3's processor with SmolVLM-256M's image settings, and its fast path."""
    from ragspine.models.idefics3_prep import Idefics3Tiles
    from ragspine.models.testing import colidefics3_parts

    _, proc = colidefics3_parts("full")
    ip = proc.image_processor
    assert ip.size["longest_edge"] == 2048 and ip.max_image_size["longest_edge"] == 512
    tiles = Idefics3Tiles.for_processor(proc)
    assert tiles is not None
    return proc, tiles


def _page(size: tuple[int, int], seed: int, mode: str = "RGB") -> Any:
    """Random bytes (every value of every channel, the hardest input for a resampler) with a
    flat white band, as a page has margins."""
    from PIL import Image

    w, h = size
    arr = np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    arr[: max(h // 8, 1)] = 255
    return Image.fromarray(arr, "RGB").convert(mode)


def _assert_equal(proc: Any, tiles: Any, images: list[Any]) -> tuple[Any, dict[str, Any]]:
    """The processor's batch and the fast path's, both ways of normalising (the table a GPU
    indexes, the processor's arithmetic the CPU runs), equal key by key."""
    import torch

    want = proc.process_images(images)
    prepared = dict(tiles.prepare(proc, images))
    for table in (True, False):
        got = tiles.model_inputs(prepared, torch.float32, table=table)
        assert set(got) == set(want)
        for key in want:
            assert got[key].shape == want[key].shape, key
            assert got[key].dtype == want[key].dtype, key
            assert torch.equal(got[key], want[key]), (key, table)
    return want, got


@pytest.mark.parametrize("name", list(PAGES))
def test_tiles_give_the_processors_inputs(smolvlm: tuple[Any, Any], name: str) -> None:
    proc, tiles = smolvlm
    want, got = _assert_equal(proc, tiles, [_page(PAGES[name], seed=len(name))])
    n_frames = want["pixel_values"].shape[1]
    # One <image> token run of image_seq_len per frame: the tiles and the thumbnail.
    n_image = int((got["input_ids"] == proc.image_token_id).sum())
    assert n_image == n_frames * proc.image_seq_len
    if name == "portrait report page":
        assert n_frames == 4 * 4 + 1
    if name == "landscape slide":
        assert n_frames == 3 * 4 + 1


def test_a_batch_of_several_grids_pads_as_the_processor_does(smolvlm: tuple[Any, Any]) -> None:
    """Pages of different tile grids in one batch: frames that only pad are 0.0 with a 0 mask,
    and the shorter prompts are left-padded."""
    proc, tiles = smolvlm
    images = [_page(PAGES["landscape slide"], 1), _page(PAGES["extreme aspect"], 2),
              _page((640, 480), 3, mode="L"), _page((500, 700), 4, mode="RGBA")]
    want, _ = _assert_equal(proc, tiles, images)
    frames = want["pixel_attention_mask"].flatten(2).any(-1)  # (b, n)
    assert frames.sum(1).tolist() == [13, 5, 13, 13]
    assert bool((want["attention_mask"] == 0).any())  # the test exercises padding


def test_a_changed_step_is_caught(smolvlm: tuple[Any, Any]) -> None:
    """The comparison fails when one table entry or the resampling filter is off, and the fast
    path follows the processor's own filter setting."""
    import copy

    import torch
    from PIL import Image

    from ragspine.models.idefics3_prep import Idefics3Tiles

    proc, tiles = smolvlm
    page = [_page((60, 40), 5)]
    assert tiles.differences(proc, page) == []
    off = Idefics3Tiles(proc)
    off.lut[1, 77] += 1e-6
    assert any(d.startswith("pixel_values values differ by the table") for d in off.differences(proc, page))
    bicubic = copy.deepcopy(proc)
    bicubic.image_processor.resample = Image.Resampling.BICUBIC
    assert tiles.differences(bicubic, page) == []  # both paths take the processor's filter
    resampled = tiles.model_inputs(dict(tiles.prepare(bicubic, page)), torch.float32)
    assert not torch.equal(resampled["pixel_values"], proc.process_images(page)["pixel_values"])


def test_processors_it_does_not_reproduce_keep_the_processor(smolvlm: tuple[Any, Any]) -> None:
    import copy

    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from ragspine.models.idefics3_prep import Idefics3Tiles

    proc, _ = smolvlm
    no_split = copy.deepcopy(proc)
    no_split.image_processor.do_image_splitting = False
    assert Idefics3Tiles.for_processor(no_split) is None
    pil = copy.deepcopy(proc)
    pil.image_processor = Idefics3ImageProcessorPil(size={"longest_edge": 2048},
                                                    max_image_size={"longest_edge": 512})
    assert Idefics3Tiles.for_processor(pil) is None


def test_a_processor_that_no_longer_agrees_at_load_keeps_the_processor(smolvlm: tuple[Any, Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The check at load: a processor whose output the uint8 path no longer reproduces (as a
    transformers release could change it) gets no fast path."""
    import copy

    from ragspine.models.idefics3_prep import Idefics3Tiles

    proc, _ = smolvlm
    changed = copy.deepcopy(proc)
    plain = changed.process_images

    def shifted(images: Any) -> Any:
        out = plain(images)
        out["pixel_values"] = out["pixel_values"] + 1e-3
        return out

    monkeypatch.setattr(changed, "process_images", shifted)
    assert Idefics3Tiles.for_processor(changed) is None
    assert Idefics3Tiles.for_processor(proc) is not None


def test_a_resize_that_is_not_whole_tiles_is_an_error(smolvlm: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from ragspine.models.errors import ModelOutputError

    proc, tiles = smolvlm
    odd = copy.deepcopy(proc)
    resize = odd.image_processor.resize_for_vision_encoder
    monkeypatch.setattr(odd.image_processor, "resize_for_vision_encoder",
                        lambda x, t, resample: resize(x, t, resample=resample)[..., :-1])
    with pytest.raises(ModelOutputError, match="not to whole 512 px tiles"):
        tiles.prepare(odd, [_page((60, 40), 3)])


def test_tiles_without_their_table_are_an_error(tiny_model_dir: Any, page_images: list[Any]) -> None:
    from ragspine.models import load_page_encoder
    from ragspine.models.errors import ModelOutputError

    enc = load_page_encoder(str(tiny_model_dir("colidefics3")), device="cpu")
    prepared = enc.prepare_pages(page_images[:1])
    enc.tiles = None  # the batch was prepared as tiles; nothing can expand them now
    with pytest.raises(ModelOutputError, match="a batch of uint8 tiles, but no table"):
        enc.encode_prepared(prepared)


def test_the_encoder_gives_the_processors_vectors(tiny_model_dir: Any, page_images: list[Any]) -> None:
    """ColIdefics3Encoder through the tiny random model: the same vectors, bit for bit, with the
    tiles as with the processor, at once and prepared apart (several batches and grids)."""
    from ragspine.models import load_page_encoder
    from ragspine.models.idefics3_prep import TILES

    enc = load_page_encoder(str(tiny_model_dir("colidefics3")), device="cpu")
    enc.batch_size = 2
    assert enc.tiles is not None
    prepared = enc.prepare_pages(page_images)
    batch, _ = prepared.batches[0]
    assert TILES in batch and "pixel_values" not in batch
    fast, fast_apart = enc.encode_pages(page_images), enc.encode_prepared(prepared)
    tiles, enc.tiles = enc.tiles, None
    try:
        plain = enc.encode_pages(page_images)
        assert "pixel_values" in enc.prepare_pages(page_images[:1]).batches[0][0]
    finally:
        enc.tiles = tiles
    assert len(plain) == len(fast) == len(fast_apart) == len(page_images)
    for a, b, c in zip(plain, fast, fast_apart, strict=True):
        assert a.grid == b.grid == c.grid
        np.testing.assert_array_equal(a.image_mask, b.image_mask)
        np.testing.assert_array_equal(a.vectors, b.vectors)
        np.testing.assert_array_equal(a.vectors, c.vectors)


def test_tiles_prepared_on_a_prep_thread(tiny_model_dir: Any, page_images: list[Any]) -> None:
    """A prep thread prepares with its own processor copy; the vectors are the main thread's."""
    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir("colidefics3")), device="cpu")
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.update(p=enc.prepare_pages(page_images[:4])))
    t.start()
    t.join()
    for a, b in zip(enc.encode_pages(page_images[:4]), enc.encode_prepared(got["p"]), strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)


@pytest.mark.gpu
@needs_cuda
def test_tiles_on_cuda_give_the_processors_vectors(tiny_model_dir: Any, page_images: list[Any]) -> None:
    """On CUDA in bf16: uint8 tiles pinned on the prep thread, the table applied on the device;
    the model's pixel values are the processor's cast to bf16, so its vectors are the plain
    path's."""
    import torch

    from ragspine.models import load_page_encoder
    from ragspine.models.idefics3_prep import TILES

    enc = load_page_encoder(str(tiny_model_dir("colidefics3")), dtype="bfloat16")
    assert enc.device.type == "cuda" and enc.pin_memory and enc.tiles is not None
    prepared = enc.prepare_pages(page_images)
    batch, _ = prepared.batches[0]
    assert batch[TILES].is_pinned() and batch[TILES].dtype == torch.uint8
    fast = enc.encode_prepared(prepared)
    enc.tiles = None
    plain = enc.encode_pages(page_images)
    assert_same_pages(plain, fast)
