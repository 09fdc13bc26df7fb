"""ColBERT through transformers: late-interaction text encoder and MaxSim reranker.

Two checkpoint layouts load:

- **colbert-ai (colbertv2.0)**: a BERT checkpoint (``architectures: ["HF_ColBERT"]``) whose
  weights hold the encoder under ``bert.*`` plus a bias-free ``linear`` projection; query and
  document markers ``[unused0]`` / ``[unused1]``, query length 32, document length 180,
  punctuation skiplist. ``artifact.metadata`` (written by colbert-ai) overrides the defaults.
- **PyLate**: a sentence-transformers folder (``modules.json``) with a Transformer module and one
  or more Dense modules; markers, lengths, query expansion and skiplist come from
  ``config_sentence_transformers.json``.

Encoding follows colbert-ai: ``[CLS] marker text [SEP]``; queries are padded with ``[MASK]`` to
the query length (query augmentation; the mask tokens are not attended to unless the checkpoint
says so, but their output vectors are kept); documents drop padding and skiplist tokens. Every
vector is L2-normalised, so MaxSim is a sum of cosine maxima.
"""

from __future__ import annotations

import json
import logging
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ragspine.models._runtime import check_attn, resolve_device, resolve_dtype
from ragspine.models._source import ModelSource
from ragspine.models.base import BaseReranker, BaseTextMultiVectorEncoder, TextKind
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: Activations a PyLate Dense module may name (sentence-transformers stores the class path).
_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "torch.nn.modules.linear.Identity": nn.Identity,
    "torch.nn.modules.activation.Tanh": nn.Tanh,
    "torch.nn.modules.activation.ReLU": nn.ReLU,
    "torch.nn.modules.activation.GELU": nn.GELU,
}


@dataclass(frozen=True)
class ColBERTSettings:
    """Tokenisation settings of a ColBERT checkpoint (colbert-ai defaults)."""

    query_marker: str = "[unused0]"
    document_marker: str = "[unused1]"
    query_maxlen: int = 32
    doc_maxlen: int = 180
    query_expansion: bool = True
    attend_to_mask_tokens: bool = False
    skiplist: tuple[str, ...] = field(default_factory=lambda: tuple(string.punctuation))


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Late-interaction score: for each query token its best document token, summed.

    ``query`` is ``(n_q, dim)``, ``document`` ``(n_d, dim)``.
    """
    sim = query @ document.T  # (n_q, n_d)
    return float(sim.max(axis=1).sum())


class ColBERTEncoder(BaseTextMultiVectorEncoder):
    """A BERT-family encoder plus linear projection, with ColBERT markers and augmentation."""

    def __init__(
        self,
        backbone: nn.Module,
        projection: nn.Module,
        tokenizer: Any,
        settings: ColBERTSettings,
        *,
        source: ModelSource,
        device: torch.device,
        batch_size: int | None = None,
    ) -> None:
        self.backbone = backbone
        self.projection = projection
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "right"
        self.settings = settings
        self.source = source
        self.model_id = source.model_id
        self.revision = source.revision
        self.device = device
        self.dim = int(_out_features(projection))
        if batch_size:
            self.batch_size = batch_size
        self._query_marker_id = _token_id(tokenizer, settings.query_marker, source.model_id)
        self._doc_marker_id = _token_id(tokenizer, settings.document_marker, source.model_id)
        self._mask_id = tokenizer.mask_token_id
        if settings.query_expansion and self._mask_id is None:
            raise ModelLoadError(f"{source.model_id}: query expansion needs a [MASK] token")
        unk = tokenizer.unk_token_id
        ids = {tokenizer.convert_tokens_to_ids(w) for w in settings.skiplist}
        self._skip_ids = torch.tensor(sorted(i for i in ids if i is not None and i != unk))

    @classmethod
    def from_source(
        cls,
        source: ModelSource,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        attn_implementation: str | None = None,
        batch_size: int | None = None,
    ) -> ColBERTEncoder:
        from transformers import AutoModel, AutoTokenizer

        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        attn = check_attn(attn_implementation)
        folder = source.materialize()
        layout = colbert_layout(folder)
        if layout is None:
            raise ModelLoadError(
                f"{source.model_id}: not a ColBERT checkpoint (no 'linear' projection in the "
                "weights, no PyLate modules.json with a Dense module)"
            )
        if layout == "pylate":
            backbone_dir, projection, settings = _pylate_parts(folder)
        else:
            backbone_dir, projection, settings = _colbert_ai_parts(folder)
        kw: dict[str, Any] = {"dtype": dt}
        if attn is not None:
            kw["attn_implementation"] = attn
        try:
            backbone = AutoModel.from_pretrained(str(backbone_dir), **kw)
            tokenizer = AutoTokenizer.from_pretrained(str(backbone_dir))
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{source.model_id}: cannot load the encoder: {e}") from e
        backbone = backbone.to(dev).eval()
        projection = projection.to(device=dev, dtype=dt).eval()
        logger.info("loaded ColBERT %s (%s layout) on %s", source.model_id, layout, dev)
        return cls(
            backbone,
            projection,
            tokenizer,
            settings,
            source=source,
            device=dev,
            batch_size=batch_size,
        )

    @torch.inference_mode()
    def _encode(self, texts: list[str], kind: TextKind) -> list[np.ndarray]:
        s = self.settings
        is_query = kind == "query"
        expand = is_query and s.query_expansion
        enc = self.tokenizer(
            texts,
            padding="max_length" if expand else "longest",
            truncation=True,
            max_length=(s.query_maxlen if is_query else s.doc_maxlen) - 1,  # room for the marker
            return_tensors="pt",
        )
        ids, att = enc["input_ids"], enc["attention_mask"]  # (b, L)
        marker = self._query_marker_id if is_query else self._doc_marker_id
        b = ids.shape[0]
        ids = torch.cat([ids[:, :1], torch.full((b, 1), marker), ids[:, 1:]], dim=1)  # (b, L+1)
        att = torch.cat([att[:, :1], torch.ones((b, 1), dtype=att.dtype), att[:, 1:]], dim=1)
        if expand:
            pad = att == 0  # (b, L+1)
            ids[pad] = self._mask_id
            if s.attend_to_mask_tokens:
                att[pad] = 1
            keep = torch.ones_like(ids, dtype=torch.bool)  # augmentation rows are kept
        else:
            keep = att.bool()
            if not is_query and self._skip_ids.numel():
                keep &= ~torch.isin(ids, self._skip_ids)
        hidden = self.backbone(
            input_ids=ids.to(self.device), attention_mask=att.to(self.device)
        ).last_hidden_state  # (b, L+1, hidden)
        emb = self.projection(hidden)  # (b, L+1, dim)
        emb = nn.functional.normalize(emb.float(), p=2, dim=-1).cpu().numpy()  # (b, L+1, dim)
        keep_np = keep.numpy()
        return [np.ascontiguousarray(emb[i][keep_np[i]]) for i in range(b)]


class ColBERTReranker(BaseReranker):
    """Reranks candidate texts by MaxSim between ColBERT query and document vectors."""

    def __init__(self, encoder: ColBERTEncoder) -> None:
        self.encoder = encoder
        self.model_id = encoder.model_id
        self.revision = encoder.revision
        self.batch_size = encoder.batch_size
        self._last_query: tuple[str, np.ndarray] | None = None

    def _score(self, query: str, texts: list[str]) -> list[float]:
        if self._last_query is None or self._last_query[0] != query:
            self._last_query = (query, self.encoder.encode_queries([query])[0])
        q = self._last_query[1]  # (n_q, dim)
        return [maxsim(q, d) for d in self.encoder.encode_documents(texts)]


# -- checkpoint layouts ------------------------------------------------------------------------


def colbert_layout(folder: Path) -> str | None:
    """``"pylate"``, ``"colbert"`` (colbert-ai / HF_ColBERT), or None when neither."""
    modules = _read_json(folder / "modules.json")
    if isinstance(modules, list):
        types = [str(m.get("type", "")) for m in modules]
        st_cfg = _read_json(folder / "config_sentence_transformers.json") or {}
        pylate_keys = {"query_length", "document_length", "do_query_expansion"}
        if any("pylate" in t for t in types) or (
            any(t.endswith("Dense") for t in types) and pylate_keys & set(st_cfg)
        ):
            return "pylate"
        return None
    cfg = _read_json(folder / "config.json") or {}
    if "HF_ColBERT" in (cfg.get("architectures") or []) or (folder / "artifact.metadata").is_file():
        return "colbert"
    if "linear.weight" in _tensor_names(folder):
        return "colbert"
    return None


def _colbert_ai_parts(folder: Path) -> tuple[Path, nn.Module, ColBERTSettings]:
    weights = _read_tensors(folder, ["linear.weight"])
    if "linear.weight" not in weights:
        raise ModelLoadError(f"{folder}: no 'linear.weight' projection in the checkpoint")
    w = weights["linear.weight"]  # (dim, hidden)
    linear = nn.Linear(w.shape[1], w.shape[0], bias=False)
    linear.weight.data.copy_(w.float())
    meta = _read_json(folder / "artifact.metadata") or {}
    d = ColBERTSettings()
    settings = ColBERTSettings(
        query_marker=str(meta.get("query_token_id", d.query_marker)),
        document_marker=str(meta.get("doc_token_id", d.document_marker)),
        query_maxlen=int(meta.get("query_maxlen", d.query_maxlen)),
        doc_maxlen=int(meta.get("doc_maxlen", d.doc_maxlen)),
        attend_to_mask_tokens=bool(meta.get("attend_to_mask_tokens", d.attend_to_mask_tokens)),
        skiplist=d.skiplist if meta.get("mask_punctuation", True) else (),
    )
    return folder, linear, settings


def _pylate_parts(folder: Path) -> tuple[Path, nn.Module, ColBERTSettings]:
    modules = _read_json(folder / "modules.json") or []
    backbone_dir: Path | None = None
    layers: list[nn.Module] = []
    for m in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        mtype = str(m.get("type", ""))
        mdir = folder / str(m.get("path", ""))
        if mtype.endswith("Transformer"):
            backbone_dir = mdir
        elif mtype.endswith("Dense"):
            layers.extend(_dense_module(mdir))
        else:
            raise ModelLoadError(
                f"{folder}: PyLate module {mtype!r} is not supported (Transformer and Dense are)"
            )
    if backbone_dir is None or not layers:
        raise ModelLoadError(f"{folder}: modules.json needs a Transformer and a Dense module")
    cfg = _read_json(folder / "config_sentence_transformers.json") or {}
    d = ColBERTSettings()
    skip = cfg.get("skiplist_words")
    settings = ColBERTSettings(
        query_marker=str(cfg.get("query_prefix", "[Q] ")),
        document_marker=str(cfg.get("document_prefix", "[D] ")),
        query_maxlen=int(cfg.get("query_length") or d.query_maxlen),
        doc_maxlen=int(cfg.get("document_length") or d.doc_maxlen),
        query_expansion=bool(cfg.get("do_query_expansion", True)),
        attend_to_mask_tokens=bool(cfg.get("attend_to_expansion_tokens", False)),
        skiplist=tuple(skip) if isinstance(skip, list) else d.skiplist,
    )
    return backbone_dir, nn.Sequential(*layers), settings


def _dense_module(mdir: Path) -> list[nn.Module]:
    cfg = _read_json(mdir / "config.json")
    if not isinstance(cfg, dict):
        raise ModelLoadError(f"{mdir}: Dense module without config.json")
    bias = bool(cfg.get("bias", True))
    linear = nn.Linear(int(cfg["in_features"]), int(cfg["out_features"]), bias=bias)
    names = ["linear.weight"] + (["linear.bias"] if bias else [])
    weights = _read_tensors(mdir, names)
    missing = [n for n in names if n not in weights]
    if missing:
        raise ModelLoadError(f"{mdir}: Dense weights lack {missing}")
    linear.weight.data.copy_(weights["linear.weight"].float())
    if bias:
        linear.bias.data.copy_(weights["linear.bias"].float())
    act_name = str(cfg.get("activation_function", "torch.nn.modules.linear.Identity"))
    if act_name not in _ACTIVATIONS:
        raise ModelLoadError(
            f"{mdir}: activation {act_name!r} not supported; known: {sorted(_ACTIVATIONS)}"
        )
    return [linear, _ACTIVATIONS[act_name]()]


def _out_features(projection: nn.Module) -> int:
    linears = [m for m in projection.modules() if isinstance(m, nn.Linear)]
    return linears[-1].out_features


def _token_id(tokenizer: Any, token: str, model_id: str) -> int:
    for candidate in (token, token.strip()):
        tid = tokenizer.convert_tokens_to_ids(candidate)
        if tid is not None and tid != tokenizer.unk_token_id:
            return int(tid)
    raise ModelLoadError(f"{model_id}: marker token {token!r} is not in the tokenizer's vocabulary")


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot read {path}: {e}") from e


def _weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> file, from a safetensors index, or every name of a single file."""
    index = _read_json(folder / "model.safetensors.index.json")
    if isinstance(index, dict) and isinstance(index.get("weight_map"), dict):
        return {k: folder / v for k, v in index["weight_map"].items()}
    return {}


def _tensor_names(folder: Path) -> set[str]:
    names = set(_weight_files(folder))
    st = folder / "model.safetensors"
    if st.is_file():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt") as f:
            names |= set(f.keys())
    elif (folder / "pytorch_model.bin").is_file():
        names |= set(_load_bin(folder / "pytorch_model.bin"))
    return names


def _read_tensors(folder: Path, names: list[str]) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    files = _weight_files(folder)
    st = folder / "model.safetensors"
    for name in names:
        path = files.get(name) or (st if st.is_file() else None)
        if path is not None and path.is_file():
            with safe_open(str(path), framework="pt") as f:
                if name in f.keys():  # noqa: SIM118 - safe_open has no __contains__
                    out[name] = f.get_tensor(name)
    rest = [n for n in names if n not in out]
    if rest and (folder / "pytorch_model.bin").is_file():
        state = _load_bin(folder / "pytorch_model.bin")
        out.update({n: state[n] for n in rest if n in state})
    return out


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(str(path), map_location="cpu", weights_only=True)
