"""Tiny random-weight text models, built offline, for tests: ColBERT (colbert-ai's layout and
PyLate's), a cross-encoder and a sentence-transformers dense encoder, each a tiny BERT with a
WordPiece tokenizer trained on :data:`~ragspine.models._testing_base.CORPUS`. The page models
and :func:`ragspine.models.testing.build` are in :mod:`ragspine.models.testing`.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragspine.models._testing_base import CORPUS
from ragspine.models._testing_base import HIDDEN as _HIDDEN
from ragspine.models._testing_base import save as _save


def _wordpiece(extra_specials: list[str] = ()) -> Any:  # type: ignore[assignment]
    """A BERT-style WordPiece tokenizer (``[CLS] ... [SEP]``) wrapped for transformers."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    specials = [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *extra_specials,
    ]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=specials, show_progress=False
    )
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
    save_file(
        {"linear.weight": linear.weight.detach().contiguous()}, str(dense / "model.safetensors")
    )
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
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.models.Transformer",
                },
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
    from sentence_transformers import SentenceTransformer
    from transformers import BertModel

    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers import models  # type: ignore[no-redef]

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
