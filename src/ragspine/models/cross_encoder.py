"""Cross-encoder reranking through sentence-transformers' ``CrossEncoder``.

Works with any sequence-classification checkpoint sentence-transformers can load
(``cross-encoder/ms-marco-MiniLM-L6-v2``, ``BAAI/bge-reranker-base``, ...), by Hub id or folder.
Scores are the model's relevance scores after the checkpoint's own activation (sigmoid for
single-label models unless the checkpoint says otherwise): comparable within one query only.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ragspine.models._runtime import check_attn, resolve_device, resolve_dtype
from ragspine.models._source import ModelSource
from ragspine.models.base import BaseReranker
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)


class CrossEncoderReranker(BaseReranker):
    """``(query, text)`` pairs scored jointly by one transformer."""

    def __init__(self, model: Any, *, source: ModelSource, batch_size: int | None = None) -> None:
        self.model = model
        self.source = source
        self.model_id = source.model_id
        self.revision = source.revision
        if batch_size:
            self.batch_size = batch_size

    @classmethod
    def from_source(
        cls,
        source: ModelSource,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        attn_implementation: str | None = None,
        max_length: int | None = 512,
        batch_size: int | None = None,
    ) -> CrossEncoderReranker:
        from sentence_transformers import CrossEncoder

        dev = resolve_device(device)
        mk: dict[str, Any] = {"dtype": resolve_dtype(dtype, dev)}
        attn = check_attn(attn_implementation)
        if attn is not None:
            mk["attn_implementation"] = attn
        try:
            model = CrossEncoder(
                source.load_name,
                device=str(dev),
                max_length=max_length,
                model_kwargs=mk,
                **source.file_kwargs,
            )
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"{source.model_id}: cannot load it as a cross-encoder: {e}"
            ) from e
        model.eval()
        logger.info("loaded cross-encoder %s on %s", source.model_id, dev)
        return cls(model, source=source, batch_size=batch_size)

    @torch.inference_mode()
    def _score(self, query: str, texts: list[str]) -> list[float]:
        scores = self.model.predict(
            [(query, t) for t in texts],
            batch_size=len(texts),
            show_progress_bar=False,
            convert_to_numpy=True,
        )  # (b,) or (b, 1)
        return [float(s) for s in scores.reshape(len(texts), -1)[:, 0]]
