"""Tiny random-weight models for the model tests: built once per test run, offline, loaded back
through the registry by path.

Every model is written with ``save_pretrained`` into a session temp folder by
:mod:`ragspine.models.testing`; tests that change a folder copy it first. Model tests need the
``gpu`` extra (torch, transformers, colpali-engine, sentence-transformers). Without it they are
skipped - unless ``RAGSPINE_TEST_REQUIRE_EXTRAS=1`` (set by ``make test``), which makes the root
conftest stop the run when any extra does not import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# No Hugging Face Hub in tests: set before transformers is first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import models_kit`` whatever pytest's import mode
    sys.path.insert(0, _HERE)

from models_kit import PAGE_FAMILIES



@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir(kind)`` -> folder of the tiny model ``kind``, built on first use."""
    import torch

    from ragspine.models import testing

    # Tiny matrices: one thread is fastest, and several spin-wait badly on a loaded 2-core box.
    torch.set_num_threads(1)

    root = tmp_path_factory.mktemp("tiny-models")
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            built[kind] = testing.build(kind, root / kind)
        return built[kind]

    return get


@pytest.fixture(scope="session", params=PAGE_FAMILIES)
def page_encoder(
    request: pytest.FixtureRequest, tiny_model_dir: Callable[[str], Path]
) -> Iterator[Any]:
    """Each tiny page model, loaded back through the registry by path (CPU, float32)."""
    from ragspine.models import load_page_encoder

    enc = load_page_encoder(str(tiny_model_dir(request.param)), device="cpu")
    enc.batch_size = 2  # several batches even for a handful of test pages
    enc.query_batch_size = 2
    yield enc


@pytest.fixture(scope="session")
def page_images() -> list[Any]:
    """Seven pages of five sizes (portrait, landscape, square, tiny), distinct pixels."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    sizes = [(100, 140), (300, 200), (100, 140), (60, 60), (100, 140), (300, 200), (17, 23)]
    return [
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), "RGB")
        for w, h in sizes
    ]
