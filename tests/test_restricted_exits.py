"""Every query-time RESTRICTED exit fires on a point's own page-level classification.

Indexing never writes a RESTRICTED point, so to see the exits work a test has to put one there
itself: these tests plant passage and page points classified RESTRICTED straight into the store
(as a bug, an older writer or a hand edit could), live and in the active version of a public
document, with BM25 vectors that match a canary query. None of them may come back from a search
(in-memory BM25 index or the store's sparse search), reach the reranker, be cited by the
relation graph, or be served as a thumbnail. (The similarity-map and page-vector exits are in
tests/models/test_visual_engine.py, which has a page model.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pdfs
from ragspine.catalog import point_id
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import NotFoundError
from ragspine.models.modelset import ModelSet
from ragspine.policy import CLASSIFICATION
from ragspine.retrieval.search import SearchHit
from ragspine.scoring import BM25Params, document_vector, tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, PointData, Where

LIB = "exits"
DOC = "harbour-2024"
CANARY = "zqxplantedcanary"
ENTITY = "Zqx Holdings"
PLANTED_TEXT = f"{ENTITY} tender {CANARY} figures for the harbour expansion"
PAGES = [
    "Harbour traffic grew strongly this year across every terminal.",
    "Harbour dredging finished early and the new quay opened in spring.",
]
RELATIONS = f"source,relation,target,provenance\n{ENTITY},subsidiary_of,Parent Corp,annual report\n"


class SpyReranker:
    """Scores by length and remembers every text it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.seen.extend(texts)
        return [float(len(t)) for t in texts]


def _plant(engine: Engine, page: int, level: str) -> None:
    """A passage point and a page point for ``page`` of DOC, classified ``level``, live in the
    active version, holding the canary. The page point replaces the real one (same id)."""
    version = engine.document(LIB, DOC)["version"]
    bm25 = BM25Params(engine.settings.bm25_k1, engine.settings.bm25_b)
    vec = document_vector(tokenize(PLANTED_TEXT), 8.0, bm25)
    base = {"doc_id": DOC, "title": "Harbour report", "meta": {}, "metab": {}, "version": version,
            "state": "live", "page": page, CLASSIFICATION: level}
    chunk_id = f"{DOC}/p{page}/c99"
    bbox = [0.0, 0.0, 100.0, 20.0]
    chunk = {**base, "kind": KIND_CHUNK, "chunk_id": chunk_id, "start": 0, "end": len(PLANTED_TEXT),
             "bbox": bbox, "text": PLANTED_TEXT}
    page_p = {**base, "kind": KIND_PAGE, "width": 595.0, "height": 842.0, "text": PLANTED_TEXT,
              "chunks": [{"chunk_id": chunk_id, "start": 0, "end": len(PLANTED_TEXT), "bbox": bbox}]}
    engine.store.upsert(LIB, [
        PointData(point_id(DOC, version, page, 99), chunk, {SPARSE_CHUNK: vec}),
        PointData(point_id(DOC, version, page, "page"), page_p, {SPARSE_PAGE: vec}),
    ])
    engine.store.optimize(LIB)


def _engine(data_dir: Path, lexical: str, reranker: SpyReranker | None = None) -> Engine:
    s = Settings(data_dir=data_dir, lexical_index=lexical, reranker="none")
    models = ModelSet(reranker_factory=(lambda: reranker)) if reranker is not None else None
    return Engine(s, models=models)


@pytest.fixture(params=["memory", "store"])
def planted(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[tuple[Engine, SpyReranker]]:
    spy = SpyReranker()
    eng = _engine(data_dir, request.param, spy)
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, pdfs.make_pdf(PAGES), {"doc_id": DOC, "title": "Harbour report"})
        eng.graph.upload_relations(LIB, RELATIONS.encode(), "relations.csv")
        _plant(eng, 2, " Restricted ")  # compared case-insensitively after trimming
        yield eng, spy
    finally:
        eng.close()


def _texts(out: Any) -> str:
    return " ".join(h.text for h in out.hits).lower()


@pytest.mark.parametrize("mode", ["bm25", "economy", "auto"])
def test_search_never_returns_a_planted_restricted_point(planted: tuple[Engine, SpyReranker], mode: str) -> None:
    eng, _ = planted
    out = eng.search({"query": f"{CANARY} tender", "libraries": [LIB], "mode": mode, "top_k": 10})
    assert CANARY not in _texts(out)
    assert all(h.page != 2 for h in out.hits)  # the planted page point replaced page 2
    # The public page still answers: the exit removed the planted points, nothing else.
    out = eng.search({"query": "traffic terminal", "libraries": [LIB], "mode": mode, "top_k": 10})
    assert [h.page for h in out.hits] == [1]


def test_the_reranker_never_sees_a_planted_restricted_point(planted: tuple[Engine, SpyReranker]) -> None:
    eng, spy = planted
    out = eng.search({"query": f"harbour {CANARY}", "libraries": [LIB], "top_k": 10, "rerank": True})
    assert not out.degraded, out.degraded_reasons
    assert spy.seen, "the reranker ran"
    assert all(CANARY not in t.lower() for t in spy.seen)
    assert CANARY not in _texts(out)


def test_the_rerank_exit_itself_drops_a_restricted_hit(planted: tuple[Engine, SpyReranker]) -> None:
    # The hit list handed to the rerank step already went through the search exit; this calls the
    # rerank step with a RESTRICTED hit in it to show its own check fires.
    eng, spy = planted
    from ragspine.retrieval.search import Plan, SearchRequest

    def hit(page: int, text: str, level: str | None) -> SearchHit:
        return SearchHit(LIB, DOC, "t", page, [0, 0, 1, 1], f"{DOC}/p{page}/c0", text,
                         {"fused": 0.1}, 1, classification=level)

    hits = [hit(1, "public harbour passage", None), hit(2, f"secret {CANARY}", "RESTRICTED")]
    req = SearchRequest(query="harbour", libraries=[LIB], rerank=True)
    out = eng.searcher.reranking.apply(req, hits, Plan(mode="bm25", visual=False, dense=False), {})
    assert spy.seen == ["public harbour passage"]
    assert [h.page for h in out] == [1]


def test_the_graph_never_cites_a_planted_restricted_point(planted: tuple[Engine, SpyReranker]) -> None:
    eng, _ = planted
    eng.graph.rebuild(LIB)  # reads the passages back from the store
    snap = str(eng.graph.snapshot(LIB)).lower()
    assert CANARY not in snap
    assert f"{DOC}/p2/c99" not in snap
    out = eng.search({"query": f"{CANARY} tender", "libraries": [LIB], "top_k": 10,
                      "expand": {"entity": ENTITY, "relation": "subsidiary_of", "include_origin": True}})
    assert CANARY not in _texts(out)


def test_a_planted_restricted_page_has_no_thumbnail(planted: tuple[Engine, SpyReranker]) -> None:
    eng, _ = planted
    assert eng.thumbnail(LIB, DOC, 1).is_file()
    with pytest.raises(NotFoundError, match="no page 2"):
        eng.thumbnail(LIB, DOC, 2)  # its PNG is on disk; the page point says RESTRICTED


def test_a_planted_point_of_another_class_is_served(data_dir: Path) -> None:
    # The control: the same planting with a non-RESTRICTED class comes back, so the tests above
    # fail for the classification and nothing else.
    eng = _engine(data_dir, "memory")
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, pdfs.make_pdf(PAGES), {"doc_id": DOC})
        _plant(eng, 2, "CONFIDENTIAL")
        out = eng.search({"query": f"{CANARY} tender", "libraries": [LIB], "mode": "bm25", "top_k": 10})
        assert [h.page for h in out.hits][:1] == [2]
        assert CANARY in _texts(out)
        assert eng.thumbnail(LIB, DOC, 2).is_file()
    finally:
        eng.close()


def test_ingest_writes_each_points_own_classification(engine: Engine) -> None:
    engine.create_library(LIB)
    meta = {"doc_id": DOC, "sensitivity": "internal", "page_sensitivity": {"2": " confidential "}}
    res = engine.ingest(LIB, pdfs.make_pdf(PAGES), meta)
    for page, want in ((1, "INTERNAL"), (2, "CONFIDENTIAL")):
        pts = engine.store.scroll(LIB, Where(doc_id=DOC, version=res.version))
        got = {r.payload.get(CLASSIFICATION) for r in pts if r.payload.get("page") == page}
        assert got == {want}


class SpyDense:
    """A dense encoder that remembers every text it was given (a vector per text from its length)."""

    model_id, revision, dim = "spy-dense", "1", 4

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts: list[str], kind: str = "query") -> np.ndarray:
        self.seen.extend(texts)
        return np.array([[1.0, len(t) % 7 + 1.0, 0.5, 0.25] for t in texts], dtype=np.float32)


def test_adding_dense_vectors_never_feeds_a_planted_restricted_point_to_the_encoder(
        planted: tuple[Engine, SpyReranker]) -> None:
    eng, _ = planted
    spy = SpyDense()
    eng.indexer.models.dense = spy  # the models the backfill encodes with
    r = eng.add_dense(LIB)
    assert r.passages > 0 and spy.seen
    assert not any(CANARY.lower() in t.lower() for t in spy.seen)
