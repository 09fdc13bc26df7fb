"""Fixtures for the folder sync tests: a folder of small PDFs (PyMuPDF, milliseconds each) and
an engine on a fresh data dir (the root conftest's ``engine``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import sync_kit`` whatever pytest's import mode
    sys.path.insert(0, _HERE)

from sync_kit import write_pdf


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """``docs/`` with three PDFs: ``a/report.pdf``, ``b/report.pdf`` and ``top.pdf``."""
    root = tmp_path / "docs"
    write_pdf(root / "a" / "report.pdf", "Acme revenue grew in 2023 thanks to robots.")
    write_pdf(root / "b" / "report.pdf", "Globex revenue fell in 2022 after the flood.")
    write_pdf(root / "top.pdf", "Initech staplers annual overview.")
    return root
