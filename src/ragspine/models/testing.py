"""Tiny random-weight models, built offline, for tests and CPU benchmarks. Not for retrieval.

No Hugging Face Hub is needed: each builder trains a small tokenizer with ``tokenizers`` on the
text below, builds the image processor from its defaults (scaled down), builds a tiny config of
the real architecture, initialises it at random with a fixed seed, and writes model + processor
with ``save_pretrained`` - the same folder layout a real checkpoint has, so the real loading
code is what tests exercise. Every builder returns the folder and takes well under a few seconds.

Needs the ``gpu`` extra (torch, transformers, colpali-engine, sentence-transformers).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Text the tiny tokenizers are trained on (report language, digits, punctuation).
CORPUS = [
    "Revenue grew by twelve percent in the third quarter while operating costs fell.",
    "The chart shows quarterly sales by region, with Asia leading growth since 2019.",
    "Net income, gross margin and free cash flow are reported in millions of dollars.",
    "Figure 3: market share of mobile operators; Table 2 lists the survey questions.",
    "Describe the image. User: Assistant: query answer page table figure document",
    "the cat sat on the mat and the dog slept in the sun",
    "0 1 2 3 4 5 6 7 8 9 10 25 50 75 100 percent % $ ",
    " ".join(string.punctuation),
]

PAGE_FAMILIES = ("colpali", "colqwen2", "colqwen2_5", "colidefics3")
_HIDDEN = 32  # text and vision width of every tiny model


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


def _wordpiece(extra_specials: list[str] = ()) -> Any:  # type: ignore[assignment]
    """A BERT-style WordPiece tokenizer (``[CLS] ... [SEP]``) wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *extra_specials]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(CORPUS * 8, trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def _bert_config(vocab_size: int, **kw: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=_HIDDEN,
        intermediate_size=2 * _HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=256,
        **kw,
    )


# -- page models -------------------------------------------------------------------------------


def build_colpali(folder: Path, seed: int = 0) -> Path:
    """ColPali: PaliGemma with a tiny Gemma and a tiny SigLIP (56 px, 4x4 patch grid)."""
    import torch
    from colpali_engine.models import ColPali, ColPaliProcessor
    from transformers import PaliGemmaConfig, PreTrainedTokenizerFast, SiglipImageProcessor

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<image>"]),
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"},
    )
    image_size, patch = 56, 14
    ip = SiglipImageProcessor(
        size={"height": image_size, "width": image_size}, image_seq_length=(image_size // patch) ** 2
    )
    processor = ColPaliProcessor(image_processor=ip, tokenizer=tok)  # adds PaliGemma's loc/seg tokens
    vocab = len(tok)
    config = PaliGemmaConfig(
        text_config={
            "model_type": "gemma",
            "vocab_size": vocab,
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "pad_token_id": tok.pad_token_id,
        },
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": image_size,
            "patch_size": patch,
            "projection_dim": _HIDDEN,
        },
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        projection_dim=_HIDDEN,
        hidden_size=_HIDDEN,
        vocab_size=vocab,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return _save(ColPali(config), processor, folder)


_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def _qwen_parts(model_cls: str, processor_cls: str, config_cls: str, vision: dict[str, Any]) -> Callable[[Path, int], Path]:
    def build(folder: Path, seed: int = 0) -> Path:
        import colpali_engine.models as cem
        import torch
        import transformers
        from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        tok = PreTrainedTokenizerFast(
            tokenizer_object=_bpe(_QWEN_SPECIALS),
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
        )
        # 2..16 merged visual tokens per image (each token is 28x28 px).
        size = {"shortest_edge": 28 * 28 * 4, "longest_edge": 28 * 28 * 16}
        processor = getattr(cem, processor_cls)(
            image_processor=Qwen2VLImageProcessor(size=size),
            tokenizer=tok,
            video_processor=Qwen2VLVideoProcessor(size=size),
        )
        ids = {t: tok.convert_tokens_to_ids(t) for t in _QWEN_SPECIALS}
        head_dim = _HIDDEN // 2
        config = getattr(transformers, config_cls)(
            text_config={
                "vocab_size": len(tok),
                "hidden_size": _HIDDEN,
                "intermediate_size": 2 * _HIDDEN,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                # multimodal RoPE: temporal, height, width sections sum to head_dim / 2
                "rope_parameters": {
                    "rope_type": "default",
                    "rope_theta": 10000.0,
                    "mrope_section": [2, 3, head_dim // 2 - 5],
                },
                "bos_token_id": ids["<|endoftext|>"],
                "eos_token_id": ids["<|im_end|>"],
                "pad_token_id": ids["<|endoftext|>"],
            },
            vision_config=vision,
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
        torch.manual_seed(seed)
        return _save(getattr(cem, model_cls)(config), processor, folder)

    return build


build_colqwen2 = _qwen_parts(
    "ColQwen2",
    "ColQwen2Processor",
    "Qwen2VLConfig",
    {
        "depth": 2,
        "embed_dim": _HIDDEN,
        "hidden_size": _HIDDEN,
        "num_heads": 2,
        "mlp_ratio": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
)
build_colqwen2.__doc__ = "ColQwen2: Qwen2-VL with 2 text and 2 vision layers; 2x2 merge."

build_colqwen2_5 = _qwen_parts(
    "ColQwen2_5",
    "ColQwen2_5_Processor",
    "Qwen2_5_VLConfig",
    {
        "depth": 2,
        "hidden_size": _HIDDEN,
        "out_hidden_size": _HIDDEN,
        "intermediate_size": 2 * _HIDDEN,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
    },
)
build_colqwen2_5.__doc__ = "ColQwen2.5: Qwen2.5-VL (windowed vision attention) at the same size."

_IDEFICS3_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<image>",
    "<fake_token_around_image>",
    "<global-img>",
    *[f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)],
]


def build_colidefics3(folder: Path, seed: int = 0) -> Path:
    """ColIdefics3 (ColSmol): Llama text, SigLIP-style vision, 56 px tiles of 2x2 tokens."""
    import torch
    from colpali_engine.models import ColIdefics3, ColIdefics3Processor
    from transformers import Idefics3Config, Idefics3ImageProcessor, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(_IDEFICS3_SPECIALS),
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
    )
    tile, patch, scale = 56, 14, 2
    seq_len = (tile // patch) ** 2 // scale**2
    ip = Idefics3ImageProcessor(size={"longest_edge": 2 * tile}, max_image_size={"longest_edge": tile})
    processor = ColIdefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=seq_len)
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tok),
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "pad_token_id": tok.pad_token_id,
        },
        vision_config={
            "hidden_size": _HIDDEN,
            "intermediate_size": 2 * _HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": tile,
            "patch_size": patch,
        },
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return _save(ColIdefics3(config), processor, folder)


PAGE_BUILDERS: dict[str, Callable[[Path, int], Path]] = {
    "colpali": build_colpali,
    "colqwen2": build_colqwen2,
    "colqwen2_5": build_colqwen2_5,
    "colidefics3": build_colidefics3,
}


def _save(model: Any, processor: Any, folder: Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


# -- text models -------------------------------------------------------------------------------


def build_colbert(folder: Path, seed: int = 0, dim: int = 16) -> Path:
    """colbert-ai layout (as colbertv2.0): ``bert.*`` + bias-free ``linear``, HF_ColBERT config,
    ``artifact.metadata`` with markers ``[unused0]``/``[unused1]`` and query length 32."""
    import torch
    from safetensors.torch import save_file
    from transformers import BertModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _wordpiece()
    config = _bert_config(len(tok))
    torch.manual_seed(seed)
    bert = BertModel(config)
    linear = torch.nn.Linear(_HIDDEN, dim, bias=False)
    tensors = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    tensors["linear.weight"] = linear.weight.detach().contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.architectures = ["HF_ColBERT"]
    config.save_pretrained(folder)
    tok.save_pretrained(folder)
    meta = {
        "query_token_id": "[unused0]",
        "doc_token_id": "[unused1]",
        "query_maxlen": 32,
        "doc_maxlen": 180,
        "dim": dim,
        "similarity": "cosine",
        "mask_punctuation": True,
        "attend_to_mask_tokens": False,
    }
    (folder / "artifact.metadata").write_text(json.dumps(meta, indent=2))
    return folder


def build_pylate(folder: Path, seed: int = 1, dim: int = 16) -> Path:
    """PyLate layout: sentence-transformers folder (Transformer + ``pylate`` Dense module)."""
    import torch
    from safetensors.torch import save_file
    from transformers import BertModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _wordpiece(extra_specials=["[Q]", "[D]"])
    torch.manual_seed(seed)
    BertModel(_bert_config(len(tok))).save_pretrained(folder)
    tok.save_pretrained(folder)
    dense = folder / "1_Dense"
    dense.mkdir(exist_ok=True)
    linear = torch.nn.Linear(_HIDDEN, dim, bias=False)
    save_file({"linear.weight": linear.weight.detach().contiguous()}, str(dense / "model.safetensors"))
    (dense / "config.json").write_text(
        json.dumps(
            {
                "in_features": _HIDDEN,
                "out_features": dim,
                "bias": False,
                "activation_function": "torch.nn.modules.linear.Identity",
            }
        )
    )
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
            ]
        )
    )
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {
                "query_prefix": "[Q] ",
                "document_prefix": "[D] ",
                "query_length": 24,
                "document_length": 96,
                "attend_to_expansion_tokens": False,
                "do_query_expansion": True,
                "skiplist_words": list(string.punctuation),
                "similarity_fn_name": "MaxSim",
            }
        )
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 95}))
    return folder


def build_cross_encoder(folder: Path, seed: int = 2) -> Path:
    """A BERT sequence classifier with one label, as ms-marco cross-encoders are."""
    import torch
    from transformers import BertForSequenceClassification

    tok = _wordpiece()
    torch.manual_seed(seed)
    model = BertForSequenceClassification(_bert_config(len(tok), num_labels=1))
    return _save(model, tok, folder)


def build_dense(folder: Path, seed: int = 3) -> Path:
    """A sentence-transformers folder: tiny BERT + mean pooling + normalisation."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    folder = Path(folder)
    backbone = folder.parent / f"{folder.name}-backbone"
    tok = _wordpiece()
    torch.manual_seed(seed)
    _save(BertModel(_bert_config(len(tok))), tok, backbone)
    st = SentenceTransformer(
        modules=[
            models.Transformer(str(backbone)),
            models.Pooling(_HIDDEN, pooling_mode="mean"),
            models.Normalize(),
        ],
        device="cpu",
    )
    st.save(str(folder))
    return folder


TEXT_BUILDERS: dict[str, Callable[[Path, int], Path]] = {
    "colbert": build_colbert,
    "pylate": build_pylate,
    "cross_encoder": build_cross_encoder,
    "dense": build_dense,
}


def build(kind: str, folder: Path, seed: int = 0) -> Path:
    """Build the tiny model ``kind`` (a page family or a text model kind) into ``folder``."""
    builders = {**PAGE_BUILDERS, **TEXT_BUILDERS}
    if kind not in builders:
        raise ValueError(f"unknown tiny model {kind!r}; known: {', '.join(builders)}")
    return builders[kind](Path(folder), seed)
