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


class CountingReranker:
    """Scores passages by length and counts the calls."""

    def __init__(self, model_id: str) -> None:
        self.model_id, self.revision = model_id, "1"
        self.calls = 0

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.calls += 1
        return [float(len(t)) for t in texts]


def test_known_reranker_languages() -> None:
    from ragspine.models.registry import reranker_languages

    assert reranker_languages("cross-encoder/ms-marco-MiniLM-L6-v2", None) == ("en",)
    assert reranker_languages("colbert-ir/colbertv2.0", None) == ("en",)
    assert reranker_languages("BAAI/bge-reranker-v2-m3", None) == ("*",)
    assert reranker_languages("cross-encoder/ms-marco-MiniLM-L6-v2", ["zh"]) == ("zh",)


@pytest.mark.parametrize(("configured", "reranked"), [(None, False), (["en", "zh"], True)])
def test_a_query_the_reranker_does_not_know_keeps_the_fused_order(
        data_dir: Path, configured: list[str] | None, reranked: bool) -> None:
    rr = CountingReranker("cross-encoder/ms-marco-MiniLM-L6-v2")
    eng = Engine(Settings(data_dir=data_dir, reranker_languages=configured),
                 models=ModelSet(reranker_factory=lambda: rr))
    try:
        eng.create_library("lib")
        eng.ingest_text("lib", "short", "营业收入增长。")
        eng.ingest_text("lib", "long", "营业收入增长，营业收入增长，利润也增长了很多。")
        plain = eng.search({"query": "营业收入", "libraries": ["lib"], "mode": "bm25"})
        out = eng.search({"query": "营业收入", "libraries": ["lib"], "mode": "bm25", "rerank": True})
        assert rr.calls == int(reranked)
        if reranked:
            assert [h.doc_id for h in out.hits] == ["long", "short"] and out.notes == []
        else:
            assert [h.doc_id for h in out.hits] == [h.doc_id for h in plain.hits]
            assert all(h.scores["rerank"] is None for h in out.hits) and not out.degraded
            assert out.notes[0].startswith("rerank_skipped: query language zh is not served by "
                                           "cross-encoder/ms-marco-MiniLM-L6-v2")
        en = eng.search({"query": "revenue", "libraries": ["lib"], "mode": "bm25", "rerank": True})
        assert not any(n.startswith("rerank_skipped") for n in en.notes)
    finally:
        eng.close()
