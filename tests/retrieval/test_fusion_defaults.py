"""The BM25 channel weights chosen by leave-one-dataset-out (bench/fusion_loo.py): with BM25
ranking alone the passage channel ranks at a quarter of the page channel's weight (0.375
against 1.5) and its search picks each page's citation. Beside a dense channel the BM25 and dense
channels fuse by a convex combination of their min-max normalised scores (the default,
``dense_fusion=convex``), or by RRF at 0.75 : 1.5 : 0.75 with k at ``rrf_k_dense`` (10), not
``rrf_k`` (60).

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
    DEFAULT_CONVEX_WEIGHTS,
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


@pytest.mark.parametrize("name", ["convex_passage_weight", "convex_page_weight", "convex_dense_weight",
                                  "bm25_chunk_weight", "bm25_page_weight", "dense_weight", "visual_weight"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_a_fusion_weight_must_be_finite(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    # an infinite weight times a channel's 0 is NaN, and NaN scores cannot be sorted
    monkeypatch.setenv(f"RAGSPINE_{name.upper()}", value)
    with pytest.raises(ValueError, match=name):
        Settings()


def test_beside_the_dense_channel_the_passage_channel_ranks_and_k_is_rrf_k_dense(data_dir: Path) -> None:
    eng = _engine(data_dir, dense=VocabDense(), dense_fusion="rrf")
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


@pytest.mark.parametrize("fusion", [{"dense_fusion": "rrf", "dense_weight": 0.0},
                                    {"dense_fusion": "convex", "convex_dense_weight": 0.0}])
def test_with_the_dense_channel_weighted_0_bm25_ranks_alone_at_rrf_k(data_dir: Path, fusion: dict[str, Any]) -> None:
    eng = _engine(data_dir, dense=VocabDense(), **fusion)
    try:
        out = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "hybrid", "top_k": 10})
        assert all(h.scores.get("dense") is None for h in out.hits)
        got = {h.doc_id: h.scores["fused"] for h in out.hits}
        assert got == pytest.approx(_expected_fused(out.hits, {"bm25": 0.375, "bm25_page": 1.5}, 60), rel=1e-9)
    finally:
        eng.close()


#: One passage per document, so every passage score a channel returned is on a hit (its page's
#: best passage) and each channel's bounds, its best and its lowest score (fewer hits than
#: MIN_CANDIDATES), can be read off the hits.
ONE_PASSAGE = {
    "a": "Solar storage revenue.",
    "b": "Grid revenue and wind capacity.",
    "c": "Wind capacity of the museum.",
    "d": "The museum opened a new wing.",
}


def _expected_convex(hits: list[Any], weights: dict[str, float]) -> dict[str, float]:
    out = {h.doc_id: 0.0 for h in hits}
    for ch, w in weights.items():
        got = {h.doc_id: h.scores[ch] for h in hits if h.scores.get(ch) is not None}
        lo, hi = min(got.values()), max(got.values())
        for d, v in got.items():
            out[d] += w * ((v - lo) / (hi - lo) if hi > lo else 1.0)
    return out


def test_beside_the_dense_channel_bm25_and_dense_fuse_by_a_convex_combination(data_dir: Path) -> None:
    eng = Engine(Settings(data_dir=data_dir, reranker="none"), models=ModelSet(dense=VocabDense()))
    try:
        eng.create_library("lib")
        for doc_id, text in ONE_PASSAGE.items():
            eng.ingest_text("lib", doc_id, text)
        s = eng.settings
        assert s.dense_fusion == "convex"
        assert (s.convex_passage_weight, s.convex_page_weight, s.convex_dense_weight) == DEFAULT_CONVEX_WEIGHTS
        out = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "economy", "top_k": 10})
        assert out.mode == "economy" and len(out.hits) == 4
        assert all(h.scores["dense"] is not None for h in out.hits)  # d, the museum, only by meaning
        weights = dict(zip(("bm25", "bm25_page", "dense"), DEFAULT_CONVEX_WEIGHTS))
        want = _expected_convex(out.hits, weights)
        got = {h.doc_id: h.scores["fused"] for h in out.hits}
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert [h.doc_id for h in out.hits] == sorted(want, key=lambda d: (-want[d], d))
        # the guard: these are not the RRF scores of the same ranks
        assert got != pytest.approx(_expected_fused(out.hits, {"bm25": 0.75, "bm25_page": 1.5, "dense": 0.75}, 10),
                                    rel=1e-6)
        # top_k does not move the order of what it returns: bounds are the channels' first 100
        two = eng.search({"query": QUERY, "libraries": ["lib"], "mode": "economy", "top_k": 2}).hits
        assert [h.doc_id for h in two] == [h.doc_id for h in out.hits[:2]]
    finally:
        eng.close()


def test_a_query_bm25_finds_nothing_for_is_ranked_by_meaning_alone(data_dir: Path) -> None:
    # "zebra" is in no document: the BM25 channels return nothing (no bounds), the dense
    # channel returns every passage, and the convex fusion ranks by it alone. (The miss check,
    # tests/serving/test_api_misses.py, would call "zebra" a miss: it is off here.)
    eng = _engine(data_dir, dense=VocabDense(), miss_check=False)
    try:
        out = eng.search({"query": "zebra museum", "libraries": ["lib"], "mode": "economy", "top_k": 10})
        assert out.hits and out.hits[0].doc_id == "other"
        eng2 = _engine(data_dir / "q", dense=VocabDense(), miss_check=False)
        only = eng2.search({"query": "zebra", "libraries": ["lib"], "mode": "economy", "top_k": 10})
        eng2.close()
        assert only.hits and all(h.scores["bm25"] is None and h.scores["bm25_page"] is None for h in only.hits)
        fused = [h.scores["fused"] for h in only.hits]
        dense = [h.scores["dense"] for h in only.hits]
        assert fused == sorted(fused, reverse=True) and dense == sorted(dense, reverse=True)
    finally:
        eng.close()
