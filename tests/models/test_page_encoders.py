"""The four ColPali-family page encoders, on tiny random-weight checkpoints loaded by path.

Same behavioural tests for every family: shapes, one output per input, the caller's order after
size-bucketed / length-sorted batching, no NaN from left padding, patch grid consistent with the
image mask, determinism, model identity.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models_kit import PAGE_FAMILIES, QUERIES, needs_cuda, needs_gpu_extra

from ragspine.errors import InvalidRequestError
from ragspine.models import EncodedPage, ModelLoadError, PageEncoder, load_page_encoder

pytestmark = needs_gpu_extra

DIM = 128  # colpali-engine's projection width for all four families


def test_pages_shapes_types_and_grid(page_encoder: Any, page_images: list[Any]) -> None:
    assert isinstance(page_encoder, PageEncoder)
    assert page_encoder.dim == DIM
    pages = page_encoder.encode_pages(page_images)
    assert len(pages) == len(page_images)
    for page in pages:
        assert isinstance(page, EncodedPage)
        assert page.vectors.dtype == np.float32 and page.vectors.shape[1] == DIM
        assert page.image_mask.dtype == np.bool_
        assert page.image_mask.shape == (page.n_tokens,)
        assert np.isfinite(page.vectors).all()
        assert page.grid is not None
        rows, cols = page.grid
        assert rows * cols == int(page.image_mask.sum())
        assert page.patch_grid().shape == (rows, cols, DIM)
        assert page.n_tokens > rows * cols  # prompt tokens are kept for MaxSim
        # Rows are unit vectors (the models L2-normalise; padding rows, which are zero, are gone).
        np.testing.assert_allclose(np.linalg.norm(page.vectors, axis=1), 1.0, atol=1e-4)


def test_pages_come_back_in_the_callers_order(page_encoder: Any, page_images: list[Any]) -> None:
    batched = page_encoder.encode_pages(page_images)  # bucketed, 2 per batch
    for image, page in zip(page_images, batched, strict=True):
        alone = page_encoder.encode_pages([image])[0]
        assert alone.grid == page.grid
        np.testing.assert_array_equal(alone.image_mask, page.image_mask)
        np.testing.assert_allclose(alone.vectors, page.vectors, atol=2e-4)


def test_queries_padded_batches_match_single_and_have_no_nan(page_encoder: Any) -> None:
    batched = page_encoder.encode_queries(QUERIES)
    assert len(batched) == len(QUERIES)
    for text, q in zip(QUERIES, batched, strict=True):
        assert q.dtype == np.float32 and q.shape[1] == DIM
        assert np.isfinite(q).all()  # left-padded rows (NaN under SDPA) were dropped
        alone = page_encoder.encode_queries([text])[0]
        assert alone.shape == q.shape
        np.testing.assert_allclose(alone, q, atol=2e-4)
    # A longer query keeps more token vectors.
    assert batched[1].shape[0] > batched[0].shape[0]


def test_prefetch_threads_give_the_same_pages(page_encoder: Any, page_images: list[Any]) -> None:
    """Preprocessing on helper threads (the GPU default) changes nothing in the result."""
    inline = page_encoder.encode_pages(page_images)
    page_encoder.prefetch = 3
    try:
        threaded = page_encoder.encode_pages(page_images)
    finally:
        page_encoder.prefetch = 0
    for a, b in zip(inline, threaded, strict=True):
        assert a.grid == b.grid
        np.testing.assert_array_equal(a.image_mask, b.image_mask)
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-6)


def test_encoding_is_deterministic(page_encoder: Any, page_images: list[Any]) -> None:
    a = page_encoder.encode_pages(page_images[:3])
    b = page_encoder.encode_pages(page_images[:3])
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.vectors, y.vectors)
    np.testing.assert_array_equal(
        page_encoder.encode_queries(QUERIES[:2])[1], page_encoder.encode_queries(QUERIES[:2])[1]
    )


def test_maxsim_between_query_and_page_is_finite(page_encoder: Any, page_images: list[Any]) -> None:
    q = page_encoder.encode_queries(["revenue grew"])[0]
    page = page_encoder.encode_pages(page_images[:1])[0]
    sim = q @ page.vectors.T  # (n_query_tokens, n_page_tokens)
    score = float(sim.max(axis=1).sum())
    assert np.isfinite(score) and abs(score) <= q.shape[0] + 1e-3


def test_model_identity(page_encoder: Any, tiny_model_dir: Any) -> None:
    folder = tiny_model_dir(page_encoder.family)
    assert page_encoder.model_id == str(folder.resolve())
    assert page_encoder.revision.startswith("sha256:")


def test_bad_input_is_a_clear_error(page_encoder: Any) -> None:
    with pytest.raises(InvalidRequestError, match="PIL.Image"):
        page_encoder.encode_pages(["page.png"])
    with pytest.raises(InvalidRequestError, match="single str"):
        page_encoder.encode_queries("revenue")
    with pytest.raises(InvalidRequestError, match=r"queries \[1\] are empty"):
        page_encoder.encode_queries(["revenue", "  "])
    assert page_encoder.encode_pages([]) == []
    assert page_encoder.encode_queries([]) == []


# -- family-specific layout --------------------------------------------------------------------


def test_colqwen_grid_follows_the_aspect_ratio(tiny_model_dir: Any) -> None:
    from PIL import Image

    enc = load_page_encoder(str(tiny_model_dir("colqwen2")), device="cpu")
    # max 16 merged tokens of 28 px: 100x140 (w x h) -> smart_resize 84x112 px -> 3 x 4 tokens
    tall, wide = enc.encode_pages([Image.new("RGB", (100, 140)), Image.new("RGB", (140, 100))])
    assert tall.grid == (4, 3)
    assert wide.grid == (3, 4)


def test_colidefics3_grid_is_row_major_over_tiles(
    tiny_model_dir: Any, page_images: list[Any]
) -> None:
    """Our reordering matches colpali-engine's own ``rearrange_image_embeddings``."""
    import torch

    enc = load_page_encoder(str(tiny_model_dir("colidefics3")), device="cpu")
    image = page_images[1]
    page = enc.encode_pages([image])[0]
    rows, cols = page.grid
    assert (rows, cols) == (4, 4)  # 2 x 2 tiles of 2 x 2 tokens; thumbnail tokens outside
    assert int(page.image_mask.sum()) == rows * cols
    proc = enc.processor
    batch = proc.process_images([image])
    with torch.inference_mode():
        raw = enc.model(**batch)[0]  # (seq, dim)
    local = proc.get_local_image_mask(batch)[0]  # (seq,)
    ref = proc.rearrange_image_embeddings(raw, local, (cols, rows))  # (cols, rows, dim)
    np.testing.assert_allclose(page.patch_grid(), ref.permute(1, 0, 2).numpy(), atol=1e-5)
    # Thumbnail tokens are kept in the multivector, outside the grid.
    all_image = proc.get_image_mask(batch)[0].sum().item()
    assert all_image == rows * cols + proc.image_seq_len


def test_colpali_grid_is_the_square_patch_grid(tiny_model_dir: Any, page_images: list[Any]) -> None:
    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    pages = enc.encode_pages(page_images[:2])
    assert [p.grid for p in pages] == [(4, 4), (4, 4)]  # 56 px / 14 px patches, any page size
    # The LM head (tied, absent from the checkpoint) was re-tied, not left on the meta device.
    assert not any(p.is_meta for p in enc.model.parameters())


# -- registry ----------------------------------------------------------------------------------


def test_family_detection_and_explicit_family(tiny_model_dir: Any, tmp_path: Path) -> None:
    folder = tiny_model_dir("colidefics3")
    enc = load_page_encoder(str(folder), device="cpu", family="colsmol")
    assert enc.family == "colidefics3"
    with pytest.raises(ModelLoadError, match="unknown page-model family 'colqwen3'"):
        load_page_encoder(str(folder), device="cpu", family="colqwen3")


def test_unsupported_config_is_refused(tiny_model_dir: Any, tmp_path: Path) -> None:
    copy = tmp_path / "m"
    shutil.copytree(tiny_model_dir("colbert"), copy)  # a BERT config: no page family
    with pytest.raises(ModelLoadError, match="no supported page-model family"):
        load_page_encoder(str(copy), device="cpu")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "tpu"}, "unknown device"),
        ({"dtype": "int8"}, "unknown dtype"),
        ({"attn_implementation": "fast"}, "unknown attn_implementation"),
    ],
)
def test_bad_options_are_refused(tiny_model_dir: Any, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_page_encoder(str(tiny_model_dir("colqwen2")), **kwargs)


@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_eager_attention_matches_sdpa(
    tiny_model_dir: Any, page_images: list[Any], family: str
) -> None:
    folder = str(tiny_model_dir(family))
    sdpa = load_page_encoder(folder, device="cpu", attn_implementation="sdpa")
    eager = load_page_encoder(folder, device="cpu", attn_implementation="eager")
    a, b = sdpa.encode_pages(page_images[:2]), eager.encode_pages(page_images[:2])
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.vectors, y.vectors, atol=2e-4)
    qa, qb = sdpa.encode_queries(QUERIES), eager.encode_queries(QUERIES)
    for x, y in zip(qa, qb, strict=True):
        np.testing.assert_allclose(x, y, atol=2e-4)


def test_revision_tracks_the_weights(tiny_model_dir: Any, tmp_path: Path) -> None:
    from ragspine.models import testing

    folder = tiny_model_dir("colqwen2")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    other = testing.build("colqwen2", tmp_path / "other", seed=99)
    r_orig = load_page_encoder(str(folder), device="cpu").revision
    r_copy = load_page_encoder(str(copy), device="cpu").revision
    r_other = load_page_encoder(str(other), device="cpu").revision
    assert r_orig == r_copy  # a copied or moved folder is the same model
    assert r_other != r_orig  # other weights, other revision


@pytest.mark.gpu
@needs_cuda
def test_cuda_bf16_by_default(tiny_model_dir: Any, page_images: list[Any]) -> None:
    import torch

    enc = load_page_encoder(str(tiny_model_dir("colqwen2")))
    assert enc.device.type == "cuda" and enc.dtype == torch.bfloat16
    pages = enc.encode_pages(page_images)
    assert all(np.isfinite(p.vectors).all() for p in pages)
    assert all(np.isfinite(q).all() for q in enc.encode_queries(QUERIES))


# -- Hub ids (offline, from a pre-filled Hugging Face cache) ------------------------------------


def _cache_repo(
    hub: Path, repo_id: str, commit: str, files_from: Path, absent: tuple[str, ...] = ()
) -> None:
    """Lay out a Hugging Face cache entry as an online download leaves it, including the
    ``.no_exist`` markers for files the hub answered 404 for (so offline loads skip them)."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(files_from, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name in absent:
        marker = repo / ".no_exist" / commit / name
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


_HUB_SCRIPT = """
import sys
import numpy as np
from PIL import Image
from ragspine.models import load_page_encoder
enc = load_page_encoder(sys.argv[1], device="cpu")
page = enc.encode_pages([Image.new("RGB", (100, 140), (200, 30, 30))])[0]
np.save(sys.argv[2], page.vectors)
print(enc.family, enc.model_id, enc.revision)
"""


def _run_offline(hub: Path, name: str, out: Path) -> list[str]:
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _HUB_SCRIPT, name, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()[-3:]


@pytest.mark.slow
def test_hub_adapter_loads_on_its_base_and_records_the_adapter_commit(
    tiny_model_dir: Any, tmp_path: Path
) -> None:
    """vidore/colqwen2-v1.0 and friends are PEFT adapters: the family comes from the base
    model's config, the weights are base + LoRA, and the adapter's commit is recorded (and not
    asked of the base repository, which does not have it)."""
    import json

    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from peft import LoraConfig, get_peft_model

    base_dir = tiny_model_dir("colqwen2")
    base = ColQwen2.from_pretrained(str(base_dir))
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapter_dir = tmp_path / "adapter"
    get_peft_model(base, lora).save_pretrained(str(adapter_dir))
    ColQwen2Processor.from_pretrained(str(base_dir)).save_pretrained(str(adapter_dir))
    cfg_path = adapter_dir / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = "acme/tiny-colqwen2-base"
    cfg_path.write_text(json.dumps(cfg))
    assert not (adapter_dir / "config.json").exists()

    hub = tmp_path / "hub"
    base_commit, adapter_commit = "a" * 40, "b" * 40
    _cache_repo(hub, "acme/tiny-colqwen2-base", base_commit, base_dir)
    _cache_repo(
        hub, "acme/tiny-colqwen2-lora", adapter_commit, adapter_dir, absent=("config.json",)
    )

    fam, model_id, rev = _run_offline(hub, "acme/tiny-colqwen2-lora", tmp_path / "lora.npy")
    assert (fam, model_id, rev) == ("colqwen2", "acme/tiny-colqwen2-lora", adapter_commit)
    assert _run_offline(hub, "acme/tiny-colqwen2-base", tmp_path / "base.npy") == [
        "colqwen2",
        "acme/tiny-colqwen2-base",
        base_commit,
    ]
    with_lora, plain = np.load(tmp_path / "lora.npy"), np.load(tmp_path / "base.npy")
    assert with_lora.shape == plain.shape
    assert not np.allclose(with_lora, plain, atol=1e-3)  # the LoRA weights were applied
