"""Availability checks for the ``gpu`` extra, without importing it.

The base install runs the CPU path; every model needs torch and friends from
``pip install 'ragspine[gpu]'``. Loaders call :func:`require` first, so a missing package is one
clear :class:`~ragspine.errors.MissingExtraError` naming the extra, never an ImportError from
deep inside transformers.
"""

from __future__ import annotations

import importlib.util

from ragspine.errors import MissingExtraError

#: Import names each kind of model needs, in the order they are checked.
PAGE_MODEL_PACKAGES = ("torch", "torchvision", "transformers", "colpali_engine")
TRANSFORMERS_PACKAGES = ("torch", "transformers")
SENTENCE_TRANSFORMERS_PACKAGES = ("torch", "transformers", "sentence_transformers")

#: Import name -> the name pip knows it by (for the error message).
_PIP_NAMES = {
    "colpali_engine": "colpali-engine",
    "sentence_transformers": "sentence-transformers",
}


def missing(packages: tuple[str, ...]) -> list[str]:
    """The import names in ``packages`` that are not installed."""
    return [p for p in packages if importlib.util.find_spec(p) is None]


def require(packages: tuple[str, ...], purpose: str) -> None:
    """Raise MissingExtraError naming the first missing package of the ``gpu`` extra."""
    absent = missing(packages)
    if absent:
        raise MissingExtraError(_PIP_NAMES.get(absent[0], absent[0]), "gpu", purpose)
