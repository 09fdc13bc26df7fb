"""Fixtures for the OCR tests. The real engine (PP-OCRv4 on onnxruntime, shipped inside the
``rapidocr-onnxruntime`` wheel, no download) is loaded once per session, only by ``slow``
tests; the default run uses :class:`ocr_kit.SpyEngine`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import ocr_kit`` whatever pytest's import mode
    sys.path.insert(0, _HERE)

from ragspine.ocr import RapidOcrEngine  # noqa: E402


@pytest.fixture(scope="session", params=["openvino", "onnxruntime"])
def rapid_engine(request: pytest.FixtureRequest) -> RapidOcrEngine:
    # Every real-engine test runs on both inference backends. No skip when a package is
    # missing: the engine's error names the pip install.
    return RapidOcrEngine(backend=request.param)
