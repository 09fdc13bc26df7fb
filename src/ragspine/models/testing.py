"""Tiny random-weight models, built offline, for tests and CPU benchmarks. Not for retrieval.

No Hugging Face Hub is needed: each builder trains a small tokenizer with ``tokenizers`` on the
text below, builds the image processor from its defaults (scaled down), builds a tiny config of
the real architecture, initialises it at random with a fixed seed, and writes model + processor
with ``save_pretrained`` - the same folder layout a real checkpoint has, so the real loading
code is what tests exercise. Every builder returns the folder and takes well under a few seconds.

Needs the ``gpu`` extra (torch, transformers, colpali-engine, sentence-transformers). The page
models are here; the text models (ColBERT, cross-encoder, dense) in
:mod:`ragspine.models.testing_text`; :func:`build` makes either by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragspine.models._testing_base import CORPUS
from ragspine.models._testing_base import HIDDEN as _HIDDEN
from ragspine.models._testing_base import save as _save
from ragspine.models.testing_text import TEXT_BUILDERS

PAGE_FAMILIES = ("colpali", "colqwen2", "colqwen2_5", "colidefics3")


def _bpe(specials: list[str], vocab_size: int = 512) -> Any:
    """A byte-level BPE (GPT-2 / Gemma / Qwen style) trained on :data:`CORPUS`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 8, trainer)
    return tok


# -- page models -------------------------------------------------------------------------------
#
# Each family has two sizes: ``tiny`` (2 layers of width 32, a handful of image tokens: for
# tests) and ``full`` (the real architecture's shapes - PaliGemma-3B at 448 px, Qwen2-VL-2B,
# Qwen2.5-VL-3B, SmolVLM-256M - for benchmarks with random weights, which do not change the
# arithmetic). Both use a tiny trained tokenizer: only token ids below the vocabulary size
# matter to the compute, and the prompt lengths differ from the real tokenizers' by a few tokens.

SIZES = ("tiny", "full")

_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
_IDEFICS3_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<image>",
    "<fake_token_around_image>",
    "<global-img>",
    *[f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)],
]


def _tiny_lm(vocab: int, **kw: Any) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": _HIDDEN,
        "intermediate_size": 2 * _HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        **kw,
    }


def colpali_parts(size: str = "tiny") -> tuple[Any, Any]:
    """ColPali (PaliGemma) ``(config, processor)``: tiny = 56 px, 4x4 patches; full = 3B, 448 px."""
    from colpali_engine.models import ColPaliProcessor
    from transformers import (
        PaliGemmaConfig,
        PreTrainedTokenizerFast,
        SiglipImageProcessor,
    )

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<image>"]),
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"},
    )
    image_size, patch = (56, 14) if size == "tiny" else (448, 14)
    ip = SiglipImageProcessor(
        size={"height": image_size, "width": image_size},
        image_seq_length=(image_size // patch) ** 2,
    )
    processor = ColPaliProcessor(
        image_processor=ip, tokenizer=tok
    )  # adds PaliGemma's loc/seg tokens
    if size == "tiny":
        vocab, proj = len(tok), _HIDDEN
        text = _tiny_lm(vocab, head_dim=16)
        vision = {
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
        }
    else:  # PaliGemma-3B: Gemma-2B + SigLIP-So400m/14 at 448 px
        vocab, proj = 257216, 2048
        text = {
            "vocab_size": vocab,
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
        }
        vision = {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
        }
    config = PaliGemmaConfig(
        text_config={"model_type": "gemma", "pad_token_id": tok.pad_token_id, **text},
        vision_config={
            "model_type": "siglip_vision_model",
            "image_size": image_size,
            "patch_size": patch,
            "projection_dim": proj,
            **vision,
        },
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        projection_dim=proj,
        hidden_size=text["hidden_size"],
        vocab_size=vocab,
    )
    return config, processor


def _qwen_parts(family: str, size: str) -> tuple[Any, Any]:
    import colpali_engine.models as cem
    import transformers
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import (
        Qwen2VLVideoProcessor,
    )

    v25 = family == "colqwen2_5"
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(_QWEN_SPECIALS), eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    # Each merged visual token covers 28x28 px. tiny: 4..16 tokens; full: colqwen2's 768 max.
    max_tokens = 16 if size == "tiny" else 768
    px = {"shortest_edge": 28 * 28 * 4, "longest_edge": 28 * 28 * max_tokens}
    proc_cls = getattr(cem, "ColQwen2_5_Processor" if v25 else "ColQwen2Processor")
    processor = proc_cls(
        image_processor=Qwen2VLImageProcessor(size=px),
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(size=px),
    )
    ids = {t: tok.convert_tokens_to_ids(t) for t in _QWEN_SPECIALS}
    if size == "tiny":
        head_dim = _HIDDEN // 2
        text = _tiny_lm(len(tok))
        mrope = [2, 3, head_dim // 2 - 5]  # temporal, height, width: sums to head_dim / 2
        if v25:
            vision = {
                "depth": 2,
                "hidden_size": _HIDDEN,
                "out_hidden_size": _HIDDEN,
                "intermediate_size": 2 * _HIDDEN,
                "num_heads": 2,
                "window_size": 56,
                "fullatt_block_indexes": [1],
            }
        else:
            vision = {
                "depth": 2,
                "embed_dim": _HIDDEN,
                "hidden_size": _HIDDEN,
                "num_heads": 2,
                "mlp_ratio": 2,
            }
    else:
        mrope = [16, 24, 24]
        if v25:  # Qwen2.5-VL-3B
            text = {
                "vocab_size": 151936,
                "hidden_size": 2048,
                "intermediate_size": 11008,
                "num_hidden_layers": 36,
                "num_attention_heads": 16,
                "num_key_value_heads": 2,
            }
            vision = {
                "depth": 32,
                "hidden_size": 1280,
                "out_hidden_size": 2048,
                "intermediate_size": 3420,
                "num_heads": 16,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
            }
        else:  # Qwen2-VL-2B
            text = {
                "vocab_size": 151936,
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 28,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
            }
            vision = {
                "depth": 32,
                "embed_dim": 1280,
                "hidden_size": 1536,
                "num_heads": 16,
                "mlp_ratio": 4,
            }
    config = getattr(transformers, "Qwen2_5_VLConfig" if v25 else "Qwen2VLConfig")(
        text_config={
            **text,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0 if size == "tiny" else 1000000.0,
                "mrope_section": mrope,
            },
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            **vision,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    return config, processor


def colqwen2_parts(size: str = "tiny") -> tuple[Any, Any]:
    """ColQwen2 (Qwen2-VL) ``(config, processor)``: tiny = 2 layers; full = Qwen2-VL-2B, 768 tokens."""
    return _qwen_parts("colqwen2", size)


def colqwen2_5_parts(size: str = "tiny") -> tuple[Any, Any]:
    """ColQwen2.5 (Qwen2.5-VL, windowed vision attention): tiny; full = Qwen2.5-VL-3B."""
    return _qwen_parts("colqwen2_5", size)


def colidefics3_parts(size: str = "tiny") -> tuple[Any, Any]:
    """ColIdefics3 / ColSmol: tiny = 56 px tiles of 2x2 tokens; full = SmolVLM-256M, 512 px
    tiles of 8x8 tokens, pages up to 2048 px on the long edge."""
    from colpali_engine.models import ColIdefics3Processor
    from transformers import (
        Idefics3Config,
        Idefics3ImageProcessor,
        PreTrainedTokenizerFast,
    )

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(_IDEFICS3_SPECIALS),
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
    )
    if size == "tiny":
        tile, patch, scale, longest = 56, 14, 2, 112
        text = _tiny_lm(len(tok))
        vision = {
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
        }
    else:  # SmolVLM-256M
        tile, patch, scale, longest = 512, 16, 4, 2048
        text = {
            "vocab_size": 49280,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
        }
        vision = {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
        }
    seq_len = (tile // patch) ** 2 // scale**2
    ip = Idefics3ImageProcessor(
        size={"longest_edge": longest}, max_image_size={"longest_edge": tile}
    )
    processor = ColIdefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=seq_len)
    config = Idefics3Config(
        text_config={"model_type": "llama", "pad_token_id": tok.pad_token_id, **text},
        vision_config={"image_size": tile, "patch_size": patch, **vision},
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
    )
    return config, processor


#: Family -> ``parts(size) -> (config, processor)``; the model class is colpali-engine's.
PAGE_PARTS: dict[str, Callable[[str], tuple[Any, Any]]] = {
    "colpali": colpali_parts,
    "colqwen2": colqwen2_parts,
    "colqwen2_5": colqwen2_5_parts,
    "colidefics3": colidefics3_parts,
}
_PAGE_MODEL_CLASSES = {
    "colpali": "ColPali",
    "colqwen2": "ColQwen2",
    "colqwen2_5": "ColQwen2_5",
    "colidefics3": "ColIdefics3",
}


def random_page_model(
    family: str, size: str = "tiny", *, seed: int = 0, device: Any = "cpu", dtype: Any = None
) -> tuple[Any, Any]:
    """A randomly initialised colpali-engine model of ``family`` and its processor, in memory.

    The weights are created directly on ``device`` in ``dtype`` (default float32).
    """
    import colpali_engine.models as cem
    import torch

    if family not in PAGE_PARTS or size not in SIZES:
        raise ValueError(
            f"unknown family/size {family!r}/{size!r}; known {list(PAGE_PARTS)} x {SIZES}"
        )
    config, processor = PAGE_PARTS[family](size)
    torch.manual_seed(seed)
    dt = dtype or torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with torch.device(device):
            model = getattr(cem, _PAGE_MODEL_CLASSES[family])(config)
    finally:
        torch.set_default_dtype(previous)
    return model.to(dtype=dt).eval(), processor


def build_page_model(
    family: str, folder: Path, seed: int = 0, size: str = "tiny", device: Any = "cpu", dtype: Any = None
) -> Path:
    """A random page model of ``family`` (tiny by default; ``full`` = the real architecture, for a
    GPU benchmark), saved with save_pretrained (model + processor)."""
    model, processor = random_page_model(family, size, seed=seed, device=device, dtype=dtype)
    return _save(model, processor, folder)


def _page_builder(family: str) -> Callable[[Path, int], Path]:
    def build(folder: Path, seed: int = 0) -> Path:
        return build_page_model(family, folder, seed)

    build.__doc__ = f"Tiny random {family} checkpoint in ``folder``."
    return build


PAGE_BUILDERS: dict[str, Callable[[Path, int], Path]] = {f: _page_builder(f) for f in PAGE_PARTS}


def build(kind: str, folder: Path, seed: int = 0) -> Path:
    """Build the tiny model ``kind`` (a page family or a text model kind) into ``folder``."""
    builders = {**PAGE_BUILDERS, **TEXT_BUILDERS}
    if kind not in builders:
        raise ValueError(f"unknown tiny model {kind!r}; known: {', '.join(builders)}")
    return builders[kind](Path(folder), seed)
