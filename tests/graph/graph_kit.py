"""Helpers for the relation graph tests (plain functions; the fixtures that use them live in
``conftest.py`` next to this file)."""

from __future__ import annotations

import os

import pytest

from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, DemoDocument
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
        kw.setdefault("dense_model", "none")  # as tests/conftest.py pins it: no dense channel unless asked
        return Settings(**kw)  # type: ignore[arg-type]


def ingest_demo(engine: Engine, docs: list[DemoDocument], *, relations: bool = True) -> None:
    engine.create_library(DEMO_LIBRARY)
    for d in docs:
        engine.ingest(DEMO_LIBRARY, d.path, d.metadata)
    if relations:
        engine.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), RELATIONS_FILE)
