"""The in-memory BM25 index against the store it shadows, and against BM25 worked out here.

Parity: a library built through the Engine (text and PDF documents, str/int/bool/list metadata,
a RESTRICTED page, a replaced and a deleted document, identical passages that tie) is searched
through the index and through ``Store.search_sparse`` for many queries and filters on both BM25
fields: same ids, same order, scores equal to 1e-5. Independent: BM25 computed in the test from
token counts. Freshness: ingest, replace, delete, delete-and-ingest-again and re-weighting
between searches. The Engine's own wiring is what is tested: ``Engine.lexical`` (built from
``Settings.lexical_index`` / ``lexical_max_postings``) and ``engine.searcher``, whose fused page
ranking through ``rank_pages`` equals the one a ``Searcher(..., lexical=None)`` on the same
engine (``RAGSPINE_LEXICAL_INDEX=store``) builds from the store.

Qdrant keeps deleted points in its IDF statistics until a segment is vacuumed; the parity tests
call ``Store.optimize`` after writes so that the store counts what the index counts.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings as hsettings, strategies as st

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.catalog import LIBRARY_POINT
from ragspine.retrieval.lexical import masks, postings
from ragspine.scoring.bm25 import SparseVector, query_vector
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.store.predicates import Predicate, parse_predicate
from ragspine.retrieval.search import Searcher, SearchRequest
from ragspine.scoring.tokenizer import token_id, tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Hit, Record, Where

LIB = "lex"
RANK_FIELDS = ("doc_id", "version", "page", "sensitivity", "chunk_id")
FIELDS = ((SPARSE_CHUNK, KIND_CHUNK), (SPARSE_PAGE, KIND_PAGE))
K1, B = 1.5, 0.75


def para(*sentences: str) -> str:
    return " ".join(sentences)


ENERGY = "\n\n".join([
    para("The energy grid expanded in 2021 with new transmission lines.",
         "Grid operators reported record revenue and strong demand for energy storage."),
    para("Revenue growth came from renewable energy contracts in the northern region.",
         "The market for grid batteries grew faster than the energy market as a whole."),
    para("Capital spending on the grid rose; maintenance costs fell for the third year.",
         "Management expects revenue to grow again as the grid reaches more customers."),
    para("Risks: weather, regulation of energy prices, and supply of transformers for the grid.",
         "Hedging covers most of next year's energy purchases."),
])
FINANCE_V1 = "\n\n".join([
    para("Finance report 2019: revenue fell while costs rose in the market.",
         "The bank lowered its outlook for lending and deposits."),
    para("Interest margins narrowed; the finance team cut spending on branches."),
])
FINANCE_V2 = "\n\n".join([
    para("Finance report 2019, restated: revenue rose and costs fell in the market.",
         "The bank raised its outlook for lending, deposits and wealth management."),
    para("Interest margins widened; the finance team opened branches in the east."),
])
ZH = "\n\n".join([
    "能源集团二〇二二年营收增长，电网投资扩大，储能业务快速发展。",
    "公司预计明年营收继续增长，市场需求强劲，电网覆盖更多客户。",
])
DUP = para("Duplicate passage about the energy market and grid revenue, word for word the same.")
MISC = para("Miscellaneous notes on the market: prices, revenue and the weather in 2018.")
TEMP = para("Temporary document about energy revenue that is deleted again.")

TEXT_DOCS: dict[str, tuple[str, dict[str, Any]]] = {
    "energy-2021": (ENERGY, {"region": "EU", "year": 2021, "audited": True, "tags": ["energy", "grid"],
                             "score": 1.5}),
    "finance-2019": (FINANCE_V1, {"region": "US", "year": 2019, "audited": False, "tags": ["finance"]}),
    "zh-2022": (ZH, {"region": "CN", "year": 2022, "audited": True, "tags": ["营收", "energy"]}),
    "dup-a": (DUP, {"region": "EU", "year": 2020}),
    "dup-b": (DUP, {"region": "EU", "year": 2020}),
    "misc": (MISC, {"year": 2018}),  # no region: ne / nin pass it, eq / in do not
}
PDF_META = {"doc_id": "report-pdf", "region": "APAC", "year": 2023, "audited": True, "tags": ["grid"]}
PDF_PAGES = [
    Page(["Annual grid report: energy revenue and market share in 2023."]),
    Page(["zebracanary restricted figures on energy revenue"], header="RESTRICTED"),
    Page(["Outlook: the grid market and energy storage revenue for 2024."]),
]

QUERIES = [
    "energy grid revenue", "revenue growth", "the market", "grid", "finance report 2019",
    "grid grid energy", "zebracanary", "nonexistentword", "营收增长", "能源 电网", "储能 grid revenue",
    "Duplicate passage about the energy market", "outlook for lending", "weather prices 2018",
    "2023 annual report", "transformers regulation hedging",
]
FILTERS: list[list[dict[str, Any]]] = [
    [],
    [{"field": "region", "op": "eq", "value": "EU"}],
    [{"field": "region", "op": "ne", "value": "EU"}],
    [{"field": "region", "op": "in", "value": ["EU", "US"]}],
    [{"field": "region", "op": "nin", "value": ["CN"]}],
    [{"field": "year", "op": "gt", "value": 2019}],
    [{"field": "year", "op": "gte", "value": 2021}],
    [{"field": "year", "op": "lt", "value": 2021}],
    [{"field": "year", "op": "lte", "value": 2020}],
    [{"field": "year", "op": "between", "value": [2019, 2021]}],
    [{"field": "audited", "op": "eq", "value": True}],
    [{"field": "audited", "op": "eq", "value": False}],
    [{"field": "audited", "op": "ne", "value": True}],
    [{"field": "tags", "op": "eq", "value": "energy"}],
    [{"field": "tags", "op": "in", "value": ["finance", "grid"]}],
    [{"field": "tags", "op": "nin", "value": ["energy"]}],
    [{"field": "page", "op": "eq", "value": 1}],
    [{"field": "page", "op": "gte", "value": 2}],
    [{"field": "page", "op": "in", "value": [1, 3]}],
    [{"field": "doc_id", "op": "eq", "value": "zh-2022"}],
    [{"field": "doc_id", "op": "in", "value": ["dup-a", "report-pdf"]}],
    [{"field": "doc_id", "op": "ne", "value": "energy-2021"}],
    [{"field": "region", "op": "eq", "value": "EU"}, {"field": "year", "op": "gte", "value": 2021}],
]


def preds_of(raw: list[dict[str, Any]]) -> tuple[Predicate, ...]:
    return tuple(parse_predicate(r) for r in raw)


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    """The ``engine`` fixture's settings: the in-memory index, as by default, stated."""
    return Settings(data_dir=data_dir, lexical_index="memory")


@contextlib.contextmanager
def open_engine(data_dir: Path, **kw: Any) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=data_dir, **kw))
    try:
        yield eng
    finally:
        eng.close()


def lexical(engine: Engine) -> LexicalIndex:
    """The Engine's in-memory index (``lexical_index="memory"``)."""
    assert isinstance(engine.lexical, LexicalIndex) and engine.searcher.lexical is engine.lexical
    return engine.lexical


def another_index(engine: Engine, **kw: Any) -> LexicalIndex:
    """A second index over the engine's store, made as the Engine makes ``engine.lexical`` but
    for ``kw`` (options the Engine does not set: a helper thread, no payload cache), or to
    compare a fresh build with the Engine's patched one."""
    ix = lexical(engine)
    opts: dict[str, Any] = {"max_postings": ix.max_postings, "payload_cache": ix.payload_cache,
                            "background": ix.background}
    return LexicalIndex(engine.store, engine.libraries, ix.bm25, **{**opts, **kw})


def store_path(engine: Engine) -> Searcher:
    """The Searcher of ``RAGSPINE_LEXICAL_INDEX=store``, on the same engine (one Qdrant Edge
    shard cannot be opened twice): BM25 channels as the store's sparse searches."""
    return Searcher(engine.settings, engine.store, engine.libraries, engine.models, lexical=None)


def build_library(engine: Engine) -> None:
    engine.create_library(LIB)
    for doc_id, (text, meta) in TEXT_DOCS.items():
        engine.indexer.ingest_text(LIB, doc_id, text, meta)
    engine.ingest(LIB, pdfs.make_pdf(PDF_PAGES), PDF_META)
    engine.indexer.ingest_text(LIB, "temp", TEMP, {"year": 2024})
    engine.indexer.ingest_text(LIB, "finance-2019", FINANCE_V2, TEXT_DOCS["finance-2019"][1])  # version 2
    engine.delete_document(LIB, "temp")
    engine.store.optimize(LIB)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, LexicalIndex]]:
    """The parity library, built once; these tests only search it."""
    eng = Engine(Settings(data_dir=tmp_path_factory.mktemp("lexical"), lexical_index="memory"))
    try:
        build_library(eng)
        yield eng, lexical(eng)
    finally:
        eng.close()


def assert_same_hits(got: list[Hit], want: list[Hit], *, what: str = "") -> None:
    """Same ids in the same order, scores equal to 1e-5. The store orders exactly equal scores
    arbitrarily; the index by point id: within a run of equal scores the ids must be the same
    set, and the index's run ascending."""
    assert len(got) == len(want), f"{what}: {len(got)} hits, store {len(want)}"
    for g, w in zip(got, want):
        assert g.score == pytest.approx(w.score, rel=1e-5), f"{what}: {g} vs {w}"
    i = 0
    while i < len(want):
        j = i + 1
        while j < len(want) and math.isclose(want[j].score, want[i].score, rel_tol=1e-6):
            j += 1
        run_got, run_want = [h.id for h in got[i:j]], [h.id for h in want[i:j]]
        assert set(run_got) == set(run_want), f"{what}: ranks {i}-{j}: {run_got} vs {run_want}"
        assert run_got == sorted(run_got), f"{what}: ties not in id order: {run_got}"
        i = j
    assert [g.payload for g in got] == [next(w.payload for w in want if w.id == g.id) for g in got]


# -- parity with the store ----------------------------------------------------------------------


@pytest.mark.parametrize("raw", FILTERS, ids=lambda r: ",".join(f"{p['field']}-{p['op']}" for p in r) or "none")
def test_same_hits_as_the_store(built: tuple[Engine, LexicalIndex], raw: list[dict[str, Any]]) -> None:
    engine, ix = built
    preds = preds_of(raw)
    served = ix.served
    compared = 0
    for q in QUERIES:
        for counts in (True, False):
            qv = query_vector(q, counts=counts)
            for field, kind in FIELDS:
                where = Where(kind=kind, live=True, predicates=preds)
                want = engine.store.search_sparse(LIB, field, qv, where, 1000, fields=RANK_FIELDS)
                got = ix.search_sparse(LIB, field, qv, where, 1000, fields=RANK_FIELDS)
                assert_same_hits(got, want, what=f"{q!r} {field} {raw}")
                compared += len(want)
    assert ix.served - served == len(QUERIES) * 2 * len(FIELDS) - sum(
        2 * len(FIELDS) for q in QUERIES if not query_vector(q).indices
    )
    if not raw:
        assert compared > 100  # the corpus matches plenty


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_limit_cuts_like_the_store(built: tuple[Engine, LexicalIndex], limit: int) -> None:
    """A cut inside a run of tied scores takes the smallest ids; the store takes any of them,
    so only the scores are compared position by position."""
    engine, ix = built
    for q in QUERIES:
        qv = query_vector(q)
        for field, kind in FIELDS:
            where = Where(kind=kind, live=True)
            want = engine.store.search_sparse(LIB, field, qv, where, limit, fields=RANK_FIELDS)
            got = ix.search_sparse(LIB, field, qv, where, limit, fields=RANK_FIELDS)
            assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-5)
            full = ix.search_sparse(LIB, field, qv, where, 1000, fields=RANK_FIELDS)
            assert [h.id for h in got] == [h.id for h in full[:limit]]


def test_identical_passages_tie_and_break_by_id(built: tuple[Engine, LexicalIndex]) -> None:
    engine, ix = built
    hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("Duplicate passage word for word"),
                            Where(kind=KIND_CHUNK, live=True), 10, fields=RANK_FIELDS)
    dups = [h for h in hits if h.payload["doc_id"] in ("dup-a", "dup-b")]
    assert len(dups) == 2 and dups[0].score == dups[1].score
    assert hits[:2] == dups and dups[0].id < dups[1].id


def test_payload_selection(built: tuple[Engine, LexicalIndex]) -> None:
    """Keys the index holds come from it; any other key (or the whole payload) from the store."""
    engine, ix = built
    qv = query_vector("energy grid revenue")
    where = Where(kind=KIND_CHUNK, live=True)
    for fields in (None, ["text", "doc_id"], ["meta", "title", "kind"], [], ["page"], ["meta.region", "page"]):
        want = engine.store.search_sparse(LIB, SPARSE_CHUNK, qv, where, 50, fields=fields)
        got = ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 50, fields=fields)
        assert [h.id for h in got] == [h.id for h in want] or {h.id for h in got} == {h.id for h in want}
        by_id = {h.id: h.payload for h in want}
        assert all(h.payload == by_id[h.id] for h in got), fields
    with pytest.raises(TypeError):
        ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 5, fields="text")


def test_where_doc_id(built: tuple[Engine, LexicalIndex]) -> None:
    engine, ix = built
    for field, kind in FIELDS:
        where = Where(kind=kind, live=True, doc_id="energy-2021")
        want = engine.store.search_sparse(LIB, field, query_vector("grid revenue"), where, 50, fields=RANK_FIELDS)
        got = ix.search_sparse(LIB, field, query_vector("grid revenue"), where, 50, fields=RANK_FIELDS)
        assert want and {h.payload["doc_id"] for h in want} == {"energy-2021"}
        assert_same_hits(got, want)


def test_kind_mismatch_and_empty_query(built: tuple[Engine, LexicalIndex]) -> None:
    engine, ix = built
    qv = query_vector("energy")
    assert ix.search_sparse(LIB, SPARSE_CHUNK, qv, Where(kind=KIND_PAGE, live=True), 10) == []
    assert ix.search_sparse(LIB, SPARSE_CHUNK, SparseVector([], []), Where(kind=KIND_CHUNK, live=True), 10) == []
    assert ix.search_sparse(LIB, SPARSE_CHUNK, qv, Where(kind=KIND_CHUNK, live=True), 0) == []


def test_restricted_page_is_not_indexed(built: tuple[Engine, LexicalIndex]) -> None:
    engine, ix = built
    view = ix.refresh(LIB)
    assert view is not None
    code = view.doc_code["report-pdf"]
    for fi in view.fields.values():
        pages = set(fi.page[fi.doc == code].tolist())
        assert 2 not in pages and pages == {1, 3}
    for field, kind in FIELDS:
        assert ix.search_sparse(LIB, field, query_vector("zebracanary"), Where(kind=kind, live=True), 10) == []


def test_index_holds_exactly_the_live_current_points(built: tuple[Engine, LexicalIndex]) -> None:
    engine, ix = built
    view = ix.refresh(LIB)
    assert view is not None
    active = engine.libraries.active_versions(LIB)
    assert set(view.sigs) == set(active) and "temp" not in active
    assert active["finance-2019"] == 2
    for field, kind in FIELDS:
        recs = engine.store.scroll(LIB, Where(kind=kind, live=True), fields=["doc_id", "version", "text"])
        want = {r.id for r in recs if tokenize(r.payload["text"])}
        fi = view.fields[field]
        assert set(fi.ids) == want and fi.n_rows == len(want)
    info = ix.info(LIB)
    assert info["ready"] and info["rows"][SPARSE_CHUNK] == view.fields[SPARSE_CHUNK].n_rows
    assert info["bytes"] > 0


def test_unsupported_filter_is_answered_by_the_store(built: tuple[Engine, LexicalIndex]) -> None:
    """A filter the index cannot evaluate exactly (float equality; ``check_types`` refuses it
    before any search) goes to the store, which answers, or refuses, as without the index."""
    engine, ix = built
    where = Where(kind=KIND_CHUNK, live=True, predicates=(Predicate("score", "eq", 1.5),))
    qv = query_vector("energy grid")
    before = ix.fallbacks
    with pytest.raises(TypeError):
        engine.store.search_sparse(LIB, SPARSE_CHUNK, qv, where, 50, fields=RANK_FIELDS)
    with pytest.raises(TypeError):
        ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 50, fields=RANK_FIELDS)
    assert ix.fallbacks == before + 1
    # staged points, points of any state, or of a given version are not indexed either
    for w in (Where(kind=KIND_CHUNK, live=False), Where(kind=KIND_CHUNK), Where(kind=KIND_CHUNK, live=True, version=1),
              Where(kind=KIND_CHUNK, live=True, not_version=1)):
        want = engine.store.search_sparse(LIB, SPARSE_CHUNK, qv, w, 50, fields=RANK_FIELDS)
        assert [h.id for h in ix.search_sparse(LIB, SPARSE_CHUNK, qv, w, 50, fields=RANK_FIELDS)] == [h.id for h in want]
    assert ix.fallbacks == before + 5


def test_filters_evaluate_like_qdrant(tmp_path: Any) -> None:
    """Every operator against stored strings, integers, floats, booleans, lists and a missing
    field, evaluated by the store and by the index's predicate code."""
    import uuid

    from ragspine.store.base import CollectionSpec, PointData, bool_mirror
    from ragspine.store.edge import EdgeStore

    store = EdgeStore(tmp_path)
    store.create_collection("x", CollectionSpec())
    values: list[Any] = ["2021", 2021, 2021.0, 2021.5, True, False, [2020, 2021], ["a", "b"], [True, False],
                         [True], "a", None, [], [1.5, 2021], ["2021", 2021]]
    points = []
    for i, v in enumerate(values):
        meta = {} if v is None else {"f": v}
        points.append(PointData(str(uuid.UUID(int=i + 1)),
                                {"kind": "chunk", "state": "live", "i": i, "meta": meta, "metab": bool_mirror(meta)}))
    store.upsert("x", points)
    preds = [Predicate("f", op, v) for op in ("eq", "ne") for v in ("2021", 2021, True, False, "a")]
    preds += [Predicate("f", op, v) for op in ("in", "nin") for v in (("2021", "a"), (2021, 2020), (True,), (False,))]
    preds += [Predicate("f", op, v) for op, v in (("gt", 2020), ("gte", 2021), ("lt", 2021), ("lte", 2021.0),
                                                  ("between", (2021, 2021)), ("gt", 2021.2))]
    try:
        for p in preds:
            where = Where(kind="chunk", live=True, predicates=(p,))
            want = {r.payload["i"] for r in store.scroll("x", where)}
            got = {pt.payload["i"] for pt in points if masks.doc_matches(where, p, pt.payload)}
            assert got == want, p
    finally:
        store.close()


# -- BM25 worked out here -----------------------------------------------------------------------


def plain_bm25(docs: dict[str, list[str]], query: list[str], avgdl: float) -> dict[str, float]:
    """Okapi BM25 with Lucene's IDF over token lists, query terms counted."""
    n = len(docs)
    df = Counter(t for toks in docs.values() for t in set(toks))
    q = Counter(query)
    out = {}
    for d, toks in docs.items():
        tf, dl = Counter(toks), len(toks)
        s = sum(
            c * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] * (K1 + 1) / (tf[t] + K1 * (1 - B + B * dl / avgdl))
            for t, c in q.items() if tf[t]
        )
        if s:
            out[d] = s
    return out


SMALL = {
    "s1": "apple banana",
    "s2": "apple apple cherry",
    "s3": "banana date",
    "s4": "cherry cherry cherry date elderberry",
    "s5": "苹果 香蕉 苹果",
}


def test_worked_example(engine: Engine) -> None:
    engine.create_library(LIB)
    for d, text in list(SMALL.items())[:3]:
        engine.indexer.ingest_text(LIB, d, text)
    engine.indexer.reweight(LIB)  # basis = the current average length, (2 + 3 + 2) / 3
    ix = lexical(engine)
    hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("cherry"), Where(kind=KIND_CHUNK, live=True), 10)
    # N = 3 passages, "cherry" in 1: idf = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(8/3) = 0.98083.
    # s2 "apple apple cherry": tf 1, dl 3, avgdl 7/3 -> norm = 1.5 * (0.25 + 0.75 * 9/7) = 1.82143,
    # weight = 1 * 2.5 / (1 + 1.82143) = 0.88608; score = 0.98083 * 0.88608 = 0.86909.
    expected = math.log(8 / 3) * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 9 / 7))
    assert expected == pytest.approx(0.86909, abs=1e-5)
    assert len(hits) == 1 and hits[0].payload["doc_id"] == "s2"
    assert hits[0].score == pytest.approx(expected, rel=1e-6)


def test_scores_equal_plain_bm25(engine: Engine) -> None:
    """One short paragraph per document: passage text == page text, so both fields hold the
    same corpus; after re-weighting, the basis is the corpus's average length."""
    engine.create_library(LIB)
    for d, text in SMALL.items():
        engine.indexer.ingest_text(LIB, d, text)
    engine.indexer.reweight(LIB)
    engine.store.optimize(LIB)
    toks = {d: tokenize(t) for d, t in SMALL.items()}
    avgdl = sum(len(t) for t in toks.values()) / len(toks)
    rec = engine.libraries.get(LIB)
    assert rec.stats[SPARSE_CHUNK].basis == pytest.approx(avgdl)
    ix = lexical(engine)
    for q in ["apple", "cherry date", "apple apple banana", "elderberry cherry", "苹果", "香蕉 date", "fig"]:
        want = plain_bm25(toks, tokenize(q), avgdl)
        for field, kind in FIELDS:
            hits = ix.search_sparse(LIB, field, query_vector(q), Where(kind=kind, live=True), 10, fields=["doc_id"])
            got = {h.payload["doc_id"]: h.score for h in hits}
            assert got == pytest.approx(want, rel=1e-6), (q, field)
            assert [h.score for h in hits] == sorted(got.values(), reverse=True)


# -- freshness ----------------------------------------------------------------------------------


def chunk_ids_for(ix: LexicalIndex, q: str, preds: tuple[Predicate, ...] = ()) -> set[str]:
    hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector(q), Where(kind=KIND_CHUNK, live=True, predicates=preds),
                            100, fields=["doc_id"])
    return {h.payload["doc_id"] for h in hits}


def check_parity(engine: Engine, ix: LexicalIndex, queries: list[str]) -> None:
    engine.store.optimize(LIB)
    for q in queries:
        for field, kind in FIELDS:
            where = Where(kind=kind, live=True)
            want = engine.store.search_sparse(LIB, field, query_vector(q), where, 100, fields=RANK_FIELDS)
            got = ix.search_sparse(LIB, field, query_vector(q), where, 100, fields=RANK_FIELDS)
            assert_same_hits(got, want, what=q)


def test_index_follows_ingest_replace_delete(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "d1", "alpha bravo charlie", {"region": "EU"})
    engine.indexer.ingest_text(LIB, "d2", "bravo delta echo", {"region": "US"})
    ix = lexical(engine)
    assert chunk_ids_for(ix, "alpha") == {"d1"}
    first = ix.refresh(LIB)

    engine.indexer.ingest_text(LIB, "d3", "alpha foxtrot", {"region": "US"})  # new document
    assert chunk_ids_for(ix, "alpha") == {"d1", "d3"}
    assert chunk_ids_for(ix, "alpha", (Predicate("region", "eq", "US"),)) == {"d3"}
    check_parity(engine, ix, ["alpha", "bravo", "foxtrot echo"])

    engine.indexer.ingest_text(LIB, "d1", "golf hotel", {"region": "EU"})  # replaced: version 2
    assert chunk_ids_for(ix, "alpha") == {"d3"} and chunk_ids_for(ix, "golf") == {"d1"}
    check_parity(engine, ix, ["alpha", "golf", "bravo"])

    engine.delete_document(LIB, "d3")
    assert chunk_ids_for(ix, "alpha") == set() and chunk_ids_for(ix, "foxtrot") == set()
    check_parity(engine, ix, ["alpha", "bravo", "golf hotel"])

    # Deleted and ingested again: the same version number, other text and metadata.
    engine.delete_document(LIB, "d2")
    engine.indexer.ingest_text(LIB, "d2", "india juliett", {"region": "EU"})
    assert engine.libraries.active_versions(LIB)["d2"] == 1
    assert chunk_ids_for(ix, "delta") == set() and chunk_ids_for(ix, "india") == {"d2"}
    assert chunk_ids_for(ix, "india", (Predicate("region", "eq", "US"),)) == set()
    check_parity(engine, ix, ["india", "bravo delta", "golf"])
    assert first is not None and ix.refresh(LIB) is not first


def test_patched_index_equals_a_fresh_build(engine: Engine) -> None:
    engine.create_library(LIB)
    rnd = random.Random(7)
    vocab = [f"w{i}" for i in range(40)] + ["营收", "电网", "the", "of"]
    ix = lexical(engine)
    for step in range(12):
        doc = f"d{rnd.randrange(6)}"
        if rnd.random() < 0.25 and doc in engine.libraries.active_versions(LIB):
            engine.delete_document(LIB, doc)
        else:
            text = "\n\n".join(" ".join(rnd.choice(vocab) for _ in range(rnd.randint(3, 30))) for _ in range(3))
            engine.indexer.ingest_text(LIB, doc, text, {"n": step})
        ix.refresh(LIB)  # patched (or rebuilt when the basis moved)
        fresh = another_index(engine)
        for q in ("w1 w2 the", "营收 of", "w39", "the of w7 w7"):
            for field, kind in FIELDS:
                where = Where(kind=kind, live=True, predicates=(Predicate("n", "gte", 3),))
                a = ix.search_sparse(LIB, field, query_vector(q), where, 20, fields=RANK_FIELDS)
                b = fresh.search_sparse(LIB, field, query_vector(q), where, 20, fields=RANK_FIELDS)
                assert a == b, (step, q, field)


def test_reweight_rebuilds_the_index(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "short", "kilo lima")
    ix = lexical(engine)
    before = ix.refresh(LIB)
    assert before is not None
    for i in range(3):  # much longer documents: the average length drifts and vectors re-weight
        engine.indexer.ingest_text(LIB, f"long{i}", " ".join(f"mike{j} kilo" for j in range(60)))
    engine.indexer.reweight(LIB)
    after = ix.refresh(LIB)
    assert after is not None and after.basis != before.basis
    assert after.basis[SPARSE_CHUNK] == pytest.approx(engine.libraries.get(LIB).stats[SPARSE_CHUNK].basis)
    check_parity(engine, ix, ["kilo", "lima kilo", "mike3"])


def test_background_updates_answer_from_the_store_meanwhile(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "d1", "november oscar papa")
    ix = another_index(engine, background=True)  # the Engine's updates run on the searching thread
    qv, where = query_vector("oscar"), Where(kind=KIND_CHUNK, live=True)
    try:
        first = ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 10, fields=RANK_FIELDS)
        assert ix.fallbacks == 1 and [h.payload["doc_id"] for h in first] == ["d1"]
        deadline = time.monotonic() + 30
        while not ix.info(LIB)["ready"]:
            assert time.monotonic() < deadline, "background build did not finish"
            time.sleep(0.01)
        again = ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 10, fields=RANK_FIELDS)
        assert ix.served == 1 and [(h.id, h.payload) for h in again] == [(h.id, h.payload) for h in first]
        engine.indexer.ingest_text(LIB, "d2", "oscar quebec")
        mid = ix.search_sparse(LIB, SPARSE_CHUNK, qv, where, 10, fields=["doc_id"])
        assert {h.payload["doc_id"] for h in mid} == {"d1", "d2"}  # store or index: never stale
    finally:
        ix.close()


def test_concurrent_searches_during_ingest(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "base", "romeo sierra tango")
    ix = lexical(engine)
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher() -> None:
        try:
            while not stop.is_set():
                hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("romeo sierra"),
                                        Where(kind=KIND_CHUNK, live=True), 50, fields=["doc_id"])
                assert "base" in {h.payload["doc_id"] for h in hits}
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def engine_searcher() -> None:  # the whole path: engine.searcher -> rank_pages -> payloads
        try:
            while not stop.is_set():
                resp = engine.search({"query": "romeo sierra", "libraries": [LIB], "mode": "bm25", "top_k": 50})
                assert "base" in {h.doc_id for h in resp.hits}
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(3)] + [threading.Thread(target=engine_searcher)
                                                                       for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(6):
            engine.indexer.ingest_text(LIB, f"d{i}", f"romeo uniform{i} victor")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert chunk_ids_for(ix, "romeo") == {"base"} | {f"d{i}" for i in range(6)}
    resp = engine.search({"query": "romeo", "libraries": [LIB], "mode": "bm25", "top_k": 50})
    assert {h.doc_id for h in resp.hits} == {"base"} | {f"d{i}" for i in range(6)}


def test_over_the_postings_bound_the_store_answers(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_engine(data_dir, lexical_index="memory", lexical_max_postings=3) as engine:
        engine.create_library(LIB)
        engine.indexer.ingest_text(LIB, "d1", "whiskey xray yankee zulu")
        ix = lexical(engine)
        assert ix.max_postings == 3
        with caplog.at_level(logging.WARNING, logger="ragspine.retrieval.lexical.index"):
            hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("xray"), Where(kind=KIND_CHUNK, live=True), 5)
            ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("xray"), Where(kind=KIND_CHUNK, live=True), 5)
        assert [h.payload["doc_id"] for h in hits] == ["d1"]
        assert ix.fallbacks == 2 and ix.served == 0 and not ix.info(LIB)["ready"]
        assert sum("max_postings" in r.getMessage() for r in caplog.records) == 1
        # engine.searcher: rank_pages declines, and both channels of the store path go to the store
        resp = engine.search({"query": "xray", "libraries": [LIB], "mode": "bm25", "top_k": 5})
        assert [h.doc_id for h in resp.hits] == ["d1"] and ix.fallbacks == 2 + 1 + 2 and ix.served == 0
        # ...and the answer says so: 4 words, counted in both BM25 fields (passages and pages).
        assert resp.notes == [f"lexical_index_skipped: library '{LIB}' has 8 BM25 tokens, over "
                              "RAGSPINE_LEXICAL_MAX_POSTINGS (3); its BM25 channels ran in the store (same ranking)"]
        # A key with a filter on the library is not told its size: the count covers what it cannot see.
        req = SearchRequest(query="xray", libraries=[LIB], mode="bm25", top_k=5)
        scoped = engine.search(req.scoped({LIB: [{"field": "doc_id", "op": "eq", "value": "d1"}]}))
        assert scoped.notes == [f"lexical_index_skipped: library '{LIB}' is over RAGSPINE_LEXICAL_MAX_POSTINGS "
                                "(3); its BM25 channels ran in the store (same ranking)"]
        # Back under the bound (the document deleted, a smaller one in), it is indexed again and
        # the note goes.
        engine.delete_document(LIB, "d1")
        engine.indexer.ingest_text(LIB, "d2", "xray")
        resp = engine.search({"query": "xray", "libraries": [LIB], "mode": "bm25", "top_k": 5})
        assert [h.doc_id for h in resp.hits] == ["d2"] and resp.notes == []


def test_drop_and_invalidate(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "d1", "alpha")
    ix = lexical(engine)
    assert ix.refresh(LIB) is not None
    ix.invalidate(LIB)
    assert not ix.info(LIB)["ready"]
    assert chunk_ids_for(ix, "alpha") == {"d1"} and ix.info(LIB)["ready"]
    ix.drop(LIB)
    assert not ix.info(LIB)["ready"]
    assert chunk_ids_for(ix, "alpha") == {"d1"} and ix.info(LIB)["ready"]
    engine.delete_library(LIB)  # the Engine drops the library's index with it
    assert not ix.info(LIB)["ready"]


# -- payload cache ------------------------------------------------------------------------------


def count_retrieves(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """From now on, the ids of every ``engine.store.retrieve`` call, in order."""
    calls: list[list[str]] = []
    real = engine.store.retrieve

    def counting(name: str, ids: Any, **kw: Any) -> list[Record]:
        calls.append(list(ids))
        return real(name, ids, **kw)

    monkeypatch.setattr(engine.store, "retrieve", counting)
    return calls


def test_payloads_are_cached_and_never_stale(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.create_library(LIB)
    engine.indexer.ingest_text(LIB, "d1", "alpha bravo\n\ncharlie delta")
    ix = lexical(engine)
    hits = ix.search_sparse(LIB, SPARSE_CHUNK, query_vector("alpha charlie"), Where(kind=KIND_CHUNK, live=True), 10)
    ids = [h.id for h in hits] + ["00000000-0000-0000-0000-000000000000"]
    want = {r.id: r.payload for r in engine.store.retrieve(LIB, ids)}
    assert ix.payloads(LIB, ids) == want
    calls = count_retrieves(engine, monkeypatch)
    assert ix.payloads(LIB, ids[:-1]) == {i: want[i] for i in ids[:-1]}
    assert calls == []  # all from the cache
    # Deleted and ingested again: same point ids (same version), other text.
    engine.delete_document(LIB, "d1")
    engine.indexer.ingest_text(LIB, "d1", "alpha echo\n\ncharlie foxtrot")
    ix.refresh(LIB)
    fresh = ix.payloads(LIB, ids[:-1])
    assert {p["text"] for p in fresh.values()} <= {"alpha echo\n\ncharlie foxtrot", "alpha echo", "charlie foxtrot"}
    assert calls and all("bravo" not in p["text"] for p in fresh.values())


def test_payloads_of_indexed_points_are_cached_when_indexing(built: tuple[Engine, LexicalIndex],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Building reads whole payloads and keeps them (the cache is large enough here): citing
    a hit needs no store read, and what is cached is exactly what the store returns."""
    engine, ix = built
    ix.refresh(LIB)
    recs = engine.store.scroll(LIB, Where(live=True))
    want = {r.id: r.payload for r in recs if r.payload.get("kind") in (KIND_CHUNK, KIND_PAGE)
            and tokenize(r.payload.get("text", ""))}
    monkeypatch.setattr(engine.store, "retrieve", lambda *a, **kw: pytest.fail("read from the store"))
    assert ix.payloads(LIB, list(want)) == want


def test_without_payload_cache(built: tuple[Engine, LexicalIndex]) -> None:
    engine, _ = built
    ix = another_index(engine, payload_cache=0)
    for q in QUERIES[:6]:
        for field, kind in FIELDS:
            where = Where(kind=kind, live=True, predicates=preds_of(FILTERS[1]))
            want = engine.store.search_sparse(LIB, field, query_vector(q), where, 100, fields=RANK_FIELDS)
            assert_same_hits(ix.search_sparse(LIB, field, query_vector(q), where, 100, fields=RANK_FIELDS), want)
    ids = [r.id for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK, live=True), 5)]
    assert ix.payloads(LIB, ids) == {r.id: r.payload for r in engine.store.retrieve(LIB, ids)}


# -- engine.searcher through rank_pages ---------------------------------------------------------


def hit_rows(resp: Any) -> list[tuple[Any, ...]]:
    return [(h.library_id, h.doc_id, h.page, h.chunk_id, h.text, h.version) for h in resp.hits]


def assert_same_response(got: Any, want: Any, *, what: Any = "") -> None:
    """Same hits in the same order; the same scores set (None alike), equal to 1e-5."""
    assert hit_rows(got) == hit_rows(want), what
    for g, w in zip(got.hits, want.hits):
        assert [k for k, v in g.scores.items() if v is None] == [k for k, v in w.scores.items() if v is None]
        assert {k: v for k, v in g.scores.items() if v is not None} == pytest.approx(
            {k: v for k, v in w.scores.items() if v is not None}, rel=1e-5)


@pytest.mark.parametrize("raw", FILTERS[:12], ids=lambda r: ",".join(f"{p['field']}-{p['op']}" for p in r) or "none")
def test_searcher_ranks_pages_like_the_store_path(built: tuple[Engine, LexicalIndex], raw: list[dict[str, Any]]) -> None:
    engine, ix = built
    slow = store_path(engine)
    served, fallbacks = ix.served, ix.fallbacks
    for q in QUERIES:
        for top_k in (3, 10, 50):
            req = SearchRequest.model_validate({"query": q, "libraries": [LIB], "mode": "bm25", "top_k": top_k,
                                                "filters": raw})
            assert_same_response(engine.search(req), slow.search(req), what=(q, top_k, raw))
    # every search above was ranked by the index (rank_pages), none handed to the store
    assert ix.fallbacks == fallbacks
    assert ix.served - served == 3 * sum(1 for q in QUERIES if query_vector(q).indices)


def test_searcher_over_two_libraries(built: tuple[Engine, LexicalIndex]) -> None:
    """Two libraries fuse by RRF over their page rankings, cut at depth, as the store path does."""
    eng, ix = built
    other = "lex2"
    if other not in eng.list_libraries():
        eng.create_library(other)
        eng.indexer.ingest_text(other, "o1", "energy revenue outlook for the grid in 2025")
        eng.indexer.ingest_text(other, "o2", "the market for grid revenue and energy")
    served, fallbacks = ix.served, ix.fallbacks
    for q in ("energy grid revenue", "the market", "营收增长"):
        req = SearchRequest.model_validate({"query": q, "libraries": [LIB, other], "mode": "bm25", "top_k": 10})
        assert_same_response(eng.search(req), store_path(eng).search(req), what=q)
    assert ix.served - served == 3 * 2 and ix.fallbacks == fallbacks  # both libraries, each query


def test_searcher_cites_from_the_payload_cache(built: tuple[Engine, LexicalIndex],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.searcher cites the ranked pages from the index's payload cache; the store path
    reads them from the store. (The library record may be re-read: ``Libraries.get`` caches
    it for ``active_ttl`` only.)"""
    engine, ix = built
    req = SearchRequest.model_validate({"query": "energy grid revenue", "libraries": [LIB], "mode": "bm25",
                                        "top_k": 10})
    want = engine.search(req)  # warm: the index is built and its payloads cached
    calls = count_retrieves(engine, monkeypatch)
    got = engine.search(req)
    assert hit_rows(got) == hit_rows(want) and got.hits
    assert all(ids == [LIBRARY_POINT] for ids in calls), calls
    assert hit_rows(store_path(engine).search(req)) == hit_rows(want)
    assert any(ids != [LIBRARY_POINT] for ids in calls)  # the store path read the cited points


def test_store_setting_searches_without_the_index(data_dir: Path) -> None:
    """``lexical_index="store"``: no in-memory index, the store's sparse searches; the same
    library answers the same hits and scores either way."""
    reqs = [{"query": q, "libraries": [LIB], "mode": "bm25", "top_k": 10} for q in QUERIES]
    with open_engine(data_dir, lexical_index="memory") as eng:
        build_library(eng)
        ix = lexical(eng)
        want = [eng.search(r) for r in reqs]
        assert ix.served > 0 and ix.fallbacks == 0
    with open_engine(data_dir, lexical_index="store") as eng:
        assert eng.lexical is None and eng.searcher.lexical is None
        got = [eng.search(r) for r in reqs]
    for g, w, r in zip(got, want, reqs):
        assert_same_response(g, w, what=r["query"])


# -- the kernels, against brute force -----------------------------------------------------------


def _field(rows: list[dict[int, float]], ids: list[str]) -> postings.FieldIndex:
    r = postings.Rows()
    for i, (vec, pid) in enumerate(zip(rows, ids)):
        idx = sorted(vec)
        r.ids.append(pid)
        r.doc.append(i % 3)
        r.page.append(1 + i)
        r.chunk_ids.append(f"c{i}")
        r.classes.append(None)
        r.terms.append(np.asarray(idx, dtype=np.uint32))
        r.vals.append(np.asarray([vec[t] for t in idx], dtype=np.float32))
    return postings.field_from_rows(KIND_CHUNK, r)


vectors = st.lists(
    st.dictionaries(st.integers(0, 12), st.sampled_from([0.5, 1.0, 1.25, 2.0]), min_size=1, max_size=6),
    min_size=1, max_size=60,
)


@hsettings(max_examples=60, deadline=None)
@given(vectors, st.dictionaries(st.integers(0, 14), st.sampled_from([1.0, 2.0]), min_size=1, max_size=5),
       st.integers(1, 20), st.integers(0, 2**32 - 1))
# Rows 4 and 7 tie (3 idf: every term has df 3) but their sums differ in the last bit: the tie
# still goes to the smaller id.
@example(rows=[{0: 0.5}, {1: 0.5}, {1: 0.5, 11: 0.5}, {11: 1.0, 2: 2.0}, {0: 0.5, 2: 0.5}, {1: 0.5, 11: 0.5},
               {2: 0.5, 0: 1.25}], q={2: 1.0, 11: 1.0, 0: 2.0}, limit=1, seed=0)
def test_score_and_top_against_brute_force(rows: list[dict[int, float]], q: dict[int, float], limit: int,
                                          seed: int) -> None:
    import uuid

    rnd = random.Random(seed)
    ids = sorted({str(uuid.UUID(int=rnd.getrandbits(128))) for _ in rows})
    rnd.shuffle(ids)
    rows = rows[: len(ids)]
    fi = _field(rows, ids)
    qv = SparseVector(sorted(q), [q[t] for t in sorted(q)])
    n = len(rows)
    df = Counter(t for vec in rows for t in vec)
    want = {}
    for vec, pid in zip(rows, ids):
        s = sum(c * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * float(np.float32(vec[t]))
                for t, c in q.items() if t in vec)
        if any(t in vec for t in q):
            want[pid] = s
    got_rows, got_scores = postings.top(fi, postings.score(fi, qv, None), limit)
    got = [(fi.ids[r], s) for r, s in zip(got_rows.tolist(), got_scores.tolist())]
    expect = sorted(want.items(), key=lambda kv: (-round(kv[1], 9), kv[0]))[:limit]
    assert [s for _, s in got] == pytest.approx([s for _, s in expect], rel=1e-9)
    assert [i for i, _ in got] == [i for i, _ in expect]
    # Patched = rebuilt: drop the rows of document 1, add them back.
    back = [i for i in range(n) if i % 3 == 1]
    r = postings.Rows()
    for i in back:
        idx = sorted(rows[i])
        r.ids.append(ids[i])
        r.doc.append(1)
        r.page.append(1 + i)
        r.chunk_ids.append(f"c{i}")
        r.classes.append(None)
        r.terms.append(np.asarray(idx, dtype=np.uint32))
        r.vals.append(np.asarray([rows[i][t] for t in idx], dtype=np.float32))
    empty = postings.field_from_rows(KIND_CHUNK, postings.Rows())
    patched = postings.patched(postings.patched(fi, np.asarray([1], dtype=np.int32), empty),
                          np.asarray([], dtype=np.int32), postings.field_from_rows(KIND_CHUNK, r))
    assert patched.n_rows == n and patched.n_postings == fi.n_postings
    a = postings.top(patched, postings.score(patched, qv, None), limit)
    b = postings.top(fi, postings.score(fi, qv, None), limit)
    assert [patched.ids[i] for i in a[0].tolist()] == [fi.ids[i] for i in b[0].tolist()]
    assert a[1].tolist() == pytest.approx(b[1].tolist(), rel=1e-12)


def test_dense_and_sparse_terms_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense rows of frequent terms and the scattered postings give the same scores."""
    rnd = random.Random(3)
    import uuid

    rows = [{t: rnd.choice([0.5, 1.0, 1.7]) for t in rnd.sample(range(20), 5)} for _ in range(200)]
    ids = [str(uuid.UUID(int=i + 1)) for i in range(200)]
    qv = SparseVector(list(range(0, 20, 3)), [1.0, 2.0, 1.0, 1.0, 1.0, 2.0, 1.0])
    monkeypatch.setattr(postings, "DENSE_FRACTION", 2.0)  # no dense rows
    sparse = _field(rows, ids)
    monkeypatch.setattr(postings, "DENSE_FRACTION", 0.0)  # every term dense
    dense = _field(rows, ids)
    assert sparse.dense.shape[0] == 0 and dense.dense.shape[0] == len(dense.uterms)
    a, b = postings.score(sparse, qv, None), postings.score(dense, qv, None)
    assert a == pytest.approx(b, rel=1e-12)
    ra, rb = postings.top(sparse, a, 25), postings.top(dense, b, 25)
    assert ra[0].tolist() == rb[0].tolist()


def test_token_ids_are_the_query_ids() -> None:
    """The index is keyed by the same CRC-32 token ids the store's vectors use."""
    qv = query_vector("grid 营收")
    assert sorted(qv.indices) == sorted({token_id(t) for t in tokenize("grid 营收")})
