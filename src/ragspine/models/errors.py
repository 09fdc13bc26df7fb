"""Errors raised by the model layer, under one base class (:class:`ModelError`).

They derive from :class:`ragspine.errors.RagspineError`, so the REST layer maps them like every
other ragspine error. A missing optional dependency is :class:`ragspine.errors.MissingExtraError`.
"""

from __future__ import annotations

from ragspine.errors import RagspineError


class ModelError(RagspineError):
    """Base class of every error the model layer raises on purpose."""

    status = 500
    type = "model-error"
    title = "Model error"


class ModelLoadError(ModelError):
    """A model name, path, family or reranker kind cannot be turned into a working model."""

    status = 500
    type = "model-load-failed"
    title = "Model could not be loaded"


class ModelOutputError(ModelError):
    """A model returned something unusable: NaN, the wrong count, the wrong shape.

    Raised before anything is stored or scored, so bad vectors never reach the index.
    """

    status = 500
    type = "model-output-invalid"
    title = "Model returned invalid output"
