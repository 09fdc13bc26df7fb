"""The BM25 channel weights chosen by leave-one-dataset-out (bench/fusion_loo.py): with BM25
ranking alone the passage channel ranks at a quarter of the page channel's weight (0.375
against 1.5) and its search picks each page's citation; beside a dense channel it ranks at 0.75
against page 1.5, and the channels fuse with RRF's k at ``rrf_k_dense`` (10), not ``rrf_k`` (60).

Expected fused scores are worked out here from each hit's own channel scores: a page's rank in
a channel is its position when the hits are sorted by that channel's score, and its fused score
is the sum of ``weight / (rrf_k + rank)`` over the channels that rank it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragspine.config import (
    DEFAULT_BM25_CHUNK_SHARE_ALONE,
    DEFAULT_BM25_CHUNK_WEIGHT,
    DEFAULT_RRF_K,
    DEFAULT_RRF_K_DENSE,
    Settings,
)
from ragspine.engine import Engine
from ragspine.models.modelset import ModelSet
from ragspine.retrieval.search import Searcher, SearchRequest

DOCS = {
    # Many query words once each across long text (strong page, weak passages) against a
    # short document whose one passage holds two query words (strong passage).
    "long": "\n\n".join([
        "Solar revenue grew in the northern region during the year.",
        "Storage contracts expanded with the grid operators in the south.",
        "Wind capacity doubled and transmission costs fell over the period.",
    ]),
    "short": "Solar storage.",
    "mid": "Grid revenue and wind capacity were reported by the operators.",
    "other": "The museum opened a new wing for modern art.",
}
QUERY = "solar storage revenue grid wind capacity"


def _engine(data_dir: Path, dense: Any = None, **kw: Any) -> Engine:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", **kw),
                 models=ModelSet(dense=dense) if dense is not None else None)
    eng.create_library("lib")
    for doc_id, text in DOCS.items():
        eng.ingest_text("lib", doc_id, text)
    return eng


def _ranks(hits: list[Any], channel: str) -> dict[str, int]:
    scored = sorted((h for h in hits if h.scores.get(channel) is not None), key=lambda h: -h.scores[channel])
    return {h.doc_id: r for r, h in enumerate(scored, start=1)}


def _expected_fused(hits: list[Any], weights: dict[str, float], k: int) -> dict[str, float]:
    ranks = {ch: _ranks(hits, ch) for ch in weights}
    return {h.doc_id: sum(w / (k + ranks[ch][h.doc_id]) for ch, w in weights.items() if h.doc_id in ranks[ch])
            for h in hits}


def test_passage_weight_resolves_by_what_ranks_beside_bm25() -> None:
    s = Settings()
    assert s.bm25_chunk_weight is None and s.bm25_page_weight == 1.5
    assert s.passage_weight(alone=True) == DEFAULT_BM25_CHUNK_SHARE_ALONE * 1.5 == 0.375
    assert Settings(bm25_page_weight=2).passage_weight(alone=True) == 0.5  # the 1 : 4 ratio is kept
    assert s.passage_weight(alone=False) == DEFAULT_BM25_CHUNK_WEIGHT == 0.75
    assert Settings(bm25_chunk_weight=0.5).passage_weight(alone=True) == 0.5  # set: always that
    assert Settings(bm25_chunk_weight=0.5).passage_weight(alone=False) == 0.5
    # the page channel off: the passage channel is all BM25 has, even alone
    assert Settings(bm25_page_weight=0).passage_weight(alone=True) == 0.75
    with pytest.raises(ValueError, match="cannot both be 0"):
        Settings(bm25_chunk_weight=0, bm25_page_weight=0)


def test_env_unset_is_auto_and_a_value_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSPINE_BM25_CHUNK_WEIGHT", raising=False)
    assert Settings().bm25_chunk_weight is None
    monkeypatch.setenv("RAGSPINE_BM25_CHUNK_WEIGHT", "0.25")
    assert Settings().bm25_chunk_weight == 0.25


@pytest.mark.parametrize("lexical_index", ["memory", "store"])
def test_bm25_alone_fuses_passage_and_page_one_to_four_and_cites_a_passage(data_dir: Path, lexical_index: str) -> None:
    eng = _engine(data_dir, lexical_index=lexical_index)
    try:
        out = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "bm25", "top_k": 10})
        hits = out.hits
        want = _expected_fused(hits, {"bm25": 0.375, "bm25_page": 1.5}, eng.settings.rrf_k)
        assert [h.doc_id for h in hits] == sorted(want, key=lambda d: -want[d])
        assert {h.doc_id: h.scores["fused"] for h in hits} == pytest.approx(want, rel=1e-9)
        assert {h.doc_id for h in hits} == {"long", "short", "mid"}
        for h in hits:  # the citation is the page's best passage, found by the passage search
            assert h.chunk_id is not None and h.scores["bm25"] is not None, h
            assert h.text and h.text in DOCS[h.doc_id]
        long_hit = next(h for h in hits if h.doc_id == "long")
        assert long_hit.text.startswith("Solar revenue")  # 2 query words in its first passage
        # the passage channel given a weight: it ranks again, and the order is the two channels'
        explicit = _engine(data_dir / "x", lexical_index=lexical_index, bm25_chunk_weight=1.0)
        try:
            both = explicit.search({"query": QUERY, "libraries": ["lib"], "mode": "bm25", "top_k": 10}).hits
            want2 = _expected_fused(both, {"bm25": 1.0, "bm25_page": 1.5}, eng.settings.rrf_k)
            assert {h.doc_id: h.scores["fused"] for h in both} == pytest.approx(want2, rel=1e-9)
            assert want2 != pytest.approx(want, rel=1e-6)  # the guard: the weight changed the fusion
        finally:
            explicit.close()
    finally:
        eng.close()


def test_store_and_memory_paths_agree_on_the_default(data_dir: Path) -> None:
    eng = _engine(data_dir, lexical_index="memory")
    try:
        req = SearchRequest.model_validate({"query": QUERY, "libraries": ["lib"], "mode": "bm25", "top_k": 10})
        fast = eng.search(req)
        slow = Searcher(eng.settings, eng.store, eng.libraries, eng.models, lexical=None).search(req)
        rows = [(h.doc_id, h.page, h.chunk_id, h.text) for h in fast.hits]
        assert rows == [(h.doc_id, h.page, h.chunk_id, h.text) for h in slow.hits] and rows
    finally:
        eng.close()


class VocabDense:
    """A 6-d bag-of-words dense encoder over the query's words (deterministic, no weights)."""

    model_id, revision, dim = "test/vocab-dense", "1", 6
    WORDS = ("solar", "storage", "revenue", "grid", "wind", "museum")

    def encode(self, texts: list[str], kind: str = "document") -> list[np.ndarray]:
        out = []
        for t in texts:
            v = np.array([t.lower().count(w) for w in self.WORDS], dtype=np.float32) + 0.01
            out.append(v / np.linalg.norm(v))
        return out


def test_the_fusion_k_is_rrf_k_dense_where_the_dense_channel_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert (s.rrf_k, s.rrf_k_dense) == (DEFAULT_RRF_K, DEFAULT_RRF_K_DENSE) == (60, 10)
    assert s.fusion_k(dense=True, visual=False) == 10 and s.fusion_k(dense=False, visual=False) == 60
    # beside a page model's ranking k stays rrf_k, with or without the dense channel
    assert s.fusion_k(dense=True, visual=True) == 60 == s.fusion_k(dense=False, visual=True)
    monkeypatch.setenv("RAGSPINE_RRF_K_DENSE", "25")
    monkeypatch.setenv("RAGSPINE_RRF_K", "40")
    assert Settings().fusion_k(dense=True, visual=False) == 25
    assert Settings().fusion_k(dense=False, visual=False) == 40
    monkeypatch.setenv("RAGSPINE_RRF_K_DENSE", "0")
    with pytest.raises(ValueError, match="rrf_k_dense"):
        Settings()


def test_beside_the_dense_channel_the_passage_channel_ranks_and_k_is_rrf_k_dense(data_dir: Path) -> None:
    eng = _engine(data_dir, dense=VocabDense())
    try:
        out = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "hybrid", "top_k": 10})
        assert any(h.scores["dense"] is not None for h in out.hits)
        s = eng.settings
        weights = {"bm25": 0.75, "bm25_page": 1.5, "dense": s.dense_weight}
        got = {h.doc_id: h.scores["fused"] for h in out.hits}
        assert got == pytest.approx(_expected_fused(out.hits, weights, 10), rel=1e-9)
        # the guard: the same ranks fused with k = 60 give other scores
        assert got != pytest.approx(_expected_fused(out.hits, weights, 60), rel=1e-6)
    finally:
        eng.close()


def test_with_the_dense_channel_weighted_0_bm25_ranks_alone_at_rrf_k(data_dir: Path) -> None:
    eng = _engine(data_dir, dense=VocabDense(), dense_weight=0.0)
    try:
        out = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "hybrid", "top_k": 10})
        assert all(h.scores.get("dense") is None for h in out.hits)
        got = {h.doc_id: h.scores["fused"] for h in out.hits}
        assert got == pytest.approx(_expected_fused(out.hits, {"bm25": 0.375, "bm25_page": 1.5}, 60), rel=1e-9)
    finally:
        eng.close()
