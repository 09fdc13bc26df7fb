"""A dense model that does not know a query's language does not get a say in its ranking, and
the answer says so (RAGSPINE_DENSE_LANGUAGES; known defaults per model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.models.modelset import ModelSet
from ragspine.models.registry import dense_languages
from ragspine.scoring.tokenizer import query_language


class CountingDense:
    """A dense encoder that counts query encodings (4-d vectors from the text length)."""

    def __init__(self, model_id: str) -> None:
        self.model_id, self.revision, self.dim = model_id, "1", 4
        self.queries = 0

    def encode(self, texts: list[str], kind: str = "document") -> list[np.ndarray]:
        if kind == "query":
            self.queries += len(texts)
        return [np.array([1.0, len(t) % 7, 1.0, 0.5], dtype=np.float32) for t in texts]


@pytest.mark.parametrize(("text", "lang"), [
    ("revenue grew in Asia", "en"), ("营业收入 增长", "zh"), ("阿克米能源 revenue 2023", "zh"),
    ("Acme 公司 revenue growth in the second quarter", "en"), ("", "en"), ("２０２３ ＲＥＶＥＮＵＥ", "en"),
])
def test_query_language(text: str, lang: str) -> None:
    assert query_language(text) == lang


def test_known_and_configured_languages() -> None:
    assert dense_languages("sentence-transformers/all-MiniLM-L6-v2", None) == ("en",)
    assert dense_languages("BAAI/bge-m3", None) == ("*",)
    assert dense_languages("some/unknown-model", None) == ("*",)  # unknown: never dropped silently
    assert dense_languages("sentence-transformers/all-MiniLM-L6-v2", [" ZH ", "en"]) == ("zh", "en")


def _engine(data_dir: Path, dense: Any, **kw: Any) -> Engine:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", **kw), models=ModelSet(dense=dense))
    eng.create_library("lib")
    eng.ingest_text("lib", "en", "Revenue grew strongly in Asia during the year.")
    eng.ingest_text("lib", "zh", "阿克米能源的营业收入在本年度大幅增长。")
    return eng


def test_a_query_in_a_language_the_dense_model_does_not_know_skips_the_channel(data_dir: Path) -> None:
    dense = CountingDense("sentence-transformers/all-MiniLM-L6-v2")
    eng = _engine(data_dir, dense)
    try:
        zh = eng.search({"query": "营业收入 增长", "libraries": ["lib"], "mode": "hybrid"})
        assert dense.queries == 0
        assert not zh.degraded and all(h.scores["dense"] is None for h in zh.hits)
        assert zh.notes and zh.notes[0].startswith("dense_skipped: query language zh")
        assert "notes" in zh.to_json()
        assert zh.hits[0].doc_id == "zh"
        en = eng.search({"query": "revenue grew", "libraries": ["lib"], "mode": "hybrid"})
        assert dense.queries == 1 and en.notes == []
        assert any(h.scores["dense"] is not None for h in en.hits)
    finally:
        eng.close()


def test_the_setting_lets_the_channel_serve_more_languages(data_dir: Path) -> None:
    dense = CountingDense("sentence-transformers/all-MiniLM-L6-v2")
    eng = _engine(data_dir, dense, dense_languages=["en", "zh"])
    try:
        out = eng.search({"query": "营业收入 增长", "libraries": ["lib"], "mode": "hybrid"})
        assert dense.queries == 1 and out.notes == []
    finally:
        eng.close()
