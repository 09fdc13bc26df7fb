"""MMR and lost-in-the-middle over hits: expected orders worked out by hand."""

from __future__ import annotations

import copy

import pytest

from ragspine.chain.postprocess import lost_in_middle, mmr, relevance
from ragspine.retrieval.search import SearchHit


def hit(doc: str, text: str, fused: float, rerank: float | None = None) -> SearchHit:
    return SearchHit(library_id="lib", doc_id=doc, title=doc, page=1, bbox=[1.0, 2.0, 3.0, 4.0],
                     chunk_id=f"{doc}/p1/c0", text=text, version=1,
                     scores={"fused": fused, "rerank": rerank})


def test_relevance_scales_fused_or_rerank() -> None:
    hs = [hit("a", "x", 0.04), hit("b", "y", 0.03), hit("c", "z", 0.02)]
    assert relevance(hs) == pytest.approx([1.0, 0.5, 0.0])
    hs = [hit("a", "x", 0.04, rerank=2.0), hit("b", "y", 0.03, rerank=6.0)]
    assert relevance(hs) == pytest.approx([0.0, 1.0])
    assert relevance([hit("a", "x", 0.01), hit("b", "y", 0.01)]) == [1.0, 1.0]


def test_mmr_drops_a_near_duplicate() -> None:
    # a and b are the same passage (cosine 1); c shares nothing with a.
    # Relevance: a 1, b 0.5, c 0 (fused 0.04, 0.03, 0.02).
    # Lambda 0.7: pick 1 is a (0.7); pick 2: b = 0.7*0.5 - 0.3*1 = 0.05 > c = 0.7*0 - 0.3*0 = 0 -> b.
    # Lambda 0.5: b = 0.25 - 0.5 = -0.25 < c = 0 -> c.
    hs = [hit("a", "revenue grew in asia", 0.04), hit("b", "revenue grew in asia", 0.03),
          hit("c", "costs fell in europe", 0.02)]
    assert [h.doc_id for h in mmr(hs, 2, 0.7)] == ["a", "b"]
    assert [h.doc_id for h in mmr(hs, 2, 0.5)] == ["a", "c"]
    assert [h.doc_id for h in mmr(hs, 3, 0.5)] == ["a", "c", "b"]
    assert [h.doc_id for h in mmr(hs, 3, 1.0)] == ["a", "b", "c"]  # relevance only: unchanged


def test_mmr_partial_overlap_by_cosine() -> None:
    # tokens: a {alpha, beta}, b {alpha, gamma}, c {delta}; cos(a, b) = 1/2.
    # relevance a 1, b 0.5, c 0 -> lambda 0.6: b = 0.3 - 0.4*0.5 = 0.1 > c = 0.
    # lambda 0.4: b = 0.2 - 0.6*0.5 = -0.1 < c = 0.
    hs = [hit("a", "alpha beta", 0.04), hit("b", "alpha gamma", 0.03), hit("c", "delta", 0.02)]
    assert [h.doc_id for h in mmr(hs, 2, 0.6)] == ["a", "b"]
    assert [h.doc_id for h in mmr(hs, 2, 0.4)] == ["a", "c"]


def test_lost_in_middle_puts_the_best_at_both_ends() -> None:
    hs = [hit(str(i), "t", 1.0 / i) for i in range(1, 8)]
    assert [h.doc_id for h in lost_in_middle(hs)] == ["1", "3", "5", "7", "6", "4", "2"]
    assert lost_in_middle([]) == []


def test_hits_are_moved_not_changed() -> None:
    hs = [hit("a", "revenue grew", 0.04), hit("b", "revenue grew", 0.03), hit("c", "costs fell", 0.02)]
    before = copy.deepcopy([h.to_json() for h in hs])
    out = lost_in_middle(mmr(hs, 3, 0.5))
    assert sorted((h.to_json() for h in out), key=lambda j: j["doc_id"]) == before
    assert all(any(o is h for h in hs) for o in out)


def test_bad_lambda() -> None:
    with pytest.raises(ValueError, match="lambda"):
        mmr([], 3, 1.5)
