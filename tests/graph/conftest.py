"""Fixtures for the relation graph tests: the demo corpus built once per session, a pristine
demo library (documents and declared relations) built once, and per-test copies of it.

Building the PDFs (matplotlib) takes seconds and ingesting them a few more, so tests that
change the library work on a copy of the pristine data dir, never on the original.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, DemoDocument, build_demo_corpus
from ragspine.demo.corpus import demo_relations_csv
from ragspine.engine import Engine

RELATIONS_FILE = "demo-relations.csv"


def clean_settings(**kw: object) -> Settings:
    """Settings with every ``RAGSPINE_*`` variable out of the way (session fixtures run before
    the per-test environment cleanup)."""
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith("RAGSPINE_"):
                mp.delenv(k, raising=False)
        return Settings(**kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def demo_docs(tmp_path_factory: pytest.TempPathFactory) -> list[DemoDocument]:
    return build_demo_corpus(tmp_path_factory.mktemp("demo-pdfs"))


def ingest_demo(engine: Engine, docs: list[DemoDocument], *, relations: bool = True) -> None:
    engine.create_library(DEMO_LIBRARY)
    for d in docs:
        engine.ingest(DEMO_LIBRARY, d.path, d.metadata)
    if relations:
        engine.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)


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
