"""Fixtures for the relation graph tests: the demo corpus built once per session, a pristine
demo library (documents and declared relations) built once, and per-test copies of it.

Building the PDFs (matplotlib) takes seconds and ingesting them a few more, so tests that
change the library work on a copy of the pristine data dir, never on the original.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import graph_kit`` whatever pytest's import mode
    sys.path.insert(0, _HERE)

from ragspine.config import Settings  # noqa: E402
from ragspine.demo import DemoDocument, build_demo_corpus  # noqa: E402
from ragspine.engine import Engine  # noqa: E402

from graph_kit import clean_settings, ingest_demo  # noqa: E402


@pytest.fixture(scope="session")
def demo_docs(tmp_path_factory: pytest.TempPathFactory) -> list[DemoDocument]:
    return build_demo_corpus(tmp_path_factory.mktemp("demo-pdfs"))


@pytest.fixture(scope="session")
def demo_data_dir(tmp_path_factory: pytest.TempPathFactory, demo_docs: list[DemoDocument]) -> Path:
    """A data dir holding the demo library with its relations (engine closed)."""
    d = tmp_path_factory.mktemp("demo-data")
    eng = Engine(clean_settings(data_dir=d))
    try:
        ingest_demo(eng, demo_docs)
    finally:
        eng.close()
    return d


@pytest.fixture
def demo_engine(demo_data_dir: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a private copy of the demo data dir: change it freely."""
    d = tmp_path / "data"
    shutil.copytree(demo_data_dir, d)
    eng = Engine(Settings(data_dir=d))
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="module")
def demo_reader(tmp_path_factory: pytest.TempPathFactory, demo_data_dir: Path) -> Iterator[Engine]:
    """One engine per module on a copy of the demo data dir, for tests that only read."""
    d = tmp_path_factory.mktemp("demo-read") / "data"
    shutil.copytree(demo_data_dir, d)
    eng = Engine(clean_settings(data_dir=d))
    try:
        yield eng
    finally:
        eng.close()
