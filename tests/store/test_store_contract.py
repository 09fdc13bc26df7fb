"""One behavioural suite for every Store backend (Qdrant Edge and the Qdrant server API).

The same tests run against ``EdgeStore`` (embedded, on disk) and ``ServerStore`` over
``QdrantClient(":memory:")``; a backend that behaves differently fails here, not in production.
Expected values are worked out in the test from the data it wrote.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragspine.errors import LibraryNotFoundError, StoreError
from ragspine.scoring.bm25 import SparseVector
from ragspine.store.predicates import parse_predicate
from ragspine.store import Store
from ragspine.store.base import (
    KIND_CHUNK,
    KIND_DOC,
    SPARSE_CHUNK,
    SPARSE_PAGE,
    CollectionSpec,
    DenseField,
    Hit,
    PointData,
    Record,
    Where,
    bool_mirror,
)
from ragspine.store.edge import EdgeStore
from ragspine.store.server import ServerStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    # qdrant-client's local mode scans exactly and says so for every search_params it is given.
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

BACKENDS = ["edge", "server"]


def make_store(kind: str, root: Path) -> Store:
    if kind == "edge":
        return EdgeStore(root)
    return ServerStore.from_url(":memory:")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    try:
        yield s
    finally:
        s.close()


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def sv(pairs: dict[int, float]) -> SparseVector:
    idx = sorted(pairs)
    return SparseVector(idx, [pairs[i] for i in idx])


#: Every point of the predicate corpus carries this term, so a search for it returns all of
#: them and the filter alone decides what comes back.
COMMON = 7
REGIONS = ["north", "south", "east"]


def corpus_row(i: int) -> dict[str, Any]:
    meta = {
        "year": 2015 + i,  # int
        "region": REGIONS[i % 3],  # str
        "ratio": i * 0.5,  # float: 0.0, 0.5, ..., 3.5
        "audited": i % 2 == 0,  # bool, matched through the keyword mirror
    }
    return {"kind": KIND_CHUNK, "doc_id": f"d{i}", "page": i + 1, "meta": meta, "metab": bool_mirror(meta)}


N_CORPUS = 8


def fill_corpus(store: Store) -> Store:
    store.create_collection("lib", CollectionSpec())
    pts = [PointData(pid(i), corpus_row(i), {SPARSE_CHUNK: sv({COMMON: 1.0, 100 + i: 1.0})}) for i in range(N_CORPUS)]
    # Points without vectors (manifest entries) must never show up in a vector search.
    pts += [PointData(pid(1000 + i), {"kind": KIND_DOC, "doc_id": f"d{i}"}) for i in range(3)]
    store.upsert("lib", pts)
    return store


@pytest.fixture(scope="module", params=BACKENDS)
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The predicate corpus, built once per backend; tests using it only read."""
    s = make_store(request.param, tmp_path_factory.mktemp("corpus"))
    try:
        yield fill_corpus(s)
    finally:
        s.close()


# -- collections ----------------------------------------------------------------------------


def test_create_list_has_drop(store: Store) -> None:
    assert store.list_collections() == []
    assert not store.has_collection("alpha")
    store.create_collection("beta", CollectionSpec())
    store.create_collection("alpha", CollectionSpec())
    assert store.has_collection("alpha") and store.has_collection("beta")
    assert store.list_collections() == ["alpha", "beta"]
    with pytest.raises(StoreError):
        store.create_collection("alpha", CollectionSpec())
    store.drop_collection("alpha")
    assert not store.has_collection("alpha")
    assert store.list_collections() == ["beta"]
    with pytest.raises(LibraryNotFoundError):
        store.drop_collection("alpha")


def test_dropped_collection_is_empty_when_recreated(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert("lib", [PointData(pid(1), {"kind": KIND_DOC, "doc_id": "x"})])
    store.drop_collection("lib")
    store.create_collection("lib", CollectionSpec())
    assert store.count("lib", Where()) == 0
    assert store.retrieve("lib", [pid(1)]) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.upsert("nope", [PointData(pid(1), {"a": 1})]),
        lambda s: s.retrieve("nope", [pid(1)]),
        lambda s: s.scroll("nope", Where()),
        lambda s: s.count("nope", Where()),
        lambda s: s.search_sparse("nope", SPARSE_CHUNK, sv({1: 1.0}), Where(), 5),
        lambda s: s.set_payload("nope", Where(doc_id="x"), {"a": 1}),
        lambda s: s.delete("nope", Where(doc_id="x")),
        lambda s: s.update_sparse("nope", SPARSE_CHUNK, [(pid(1), sv({1: 1.0}))]),
        lambda s: s.drop_collection("nope"),
    ],
    ids=["upsert", "retrieve", "scroll", "count", "search", "set_payload", "delete", "update_sparse", "drop"],
)
def test_unknown_library_raises(store: Store, call: Callable[[Store], Any]) -> None:
    store.create_collection("other", CollectionSpec())
    with pytest.raises(LibraryNotFoundError):
        call(store)


# -- points ---------------------------------------------------------------------------------


def test_upsert_retrieve_overwrite(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert(
        "lib",
        [
            PointData(pid(1), {"kind": KIND_DOC, "doc_id": "a", "nested": {"x": [1, 2]}, "title": "标题"}),
            PointData(pid(2), {"kind": KIND_CHUNK, "doc_id": "b"}, {SPARSE_CHUNK: sv({3: 0.5})}),
        ],
    )
    got = {r.id: r.payload for r in store.retrieve("lib", [pid(1), pid(2), pid(99)])}
    assert got == {
        pid(1): {"kind": KIND_DOC, "doc_id": "a", "nested": {"x": [1, 2]}, "title": "标题"},
        pid(2): {"kind": KIND_CHUNK, "doc_id": "b"},
    }
    # Upsert replaces the whole payload of an existing id.
    store.upsert("lib", [PointData(pid(1), {"kind": KIND_DOC, "doc_id": "a2"})])
    assert [r.payload for r in store.retrieve("lib", [pid(1)])] == [{"kind": KIND_DOC, "doc_id": "a2"}]
    assert store.count("lib", Where()) == 2
    store.upsert("lib", [])  # a no-op, not an error


def test_scroll_crosses_pages_and_count(store: Store) -> None:
    n = 2345  # more than two scroll pages of 1000
    store.create_collection("lib", CollectionSpec())
    pts = [
        PointData(pid(i), {"kind": KIND_CHUNK if i % 3 else KIND_DOC, "doc_id": f"d{i % 5}", "n": i})
        for i in range(n)
    ]
    for a in range(0, n, 500):
        store.upsert("lib", pts[a : a + 500])
    recs = store.scroll("lib", Where())
    assert len(recs) == n
    assert sorted(r.payload["n"] for r in recs) == list(range(n))
    assert {r.id for r in recs} == {pid(i) for i in range(n)}
    n_chunk = sum(1 for i in range(n) if i % 3)
    chunks = store.scroll("lib", Where(kind=KIND_CHUNK))
    assert len(chunks) == n_chunk and all(r.payload["kind"] == KIND_CHUNK for r in chunks)
    assert store.count("lib", Where()) == n
    assert store.count("lib", Where(kind=KIND_CHUNK)) == n_chunk
    assert store.count("lib", Where(kind=KIND_CHUNK, doc_id="d2")) == sum(
        1 for i in range(n) if i % 3 and i % 5 == 2
    )
    # A limit is honoured across pages too.
    limited = store.scroll("lib", Where(kind=KIND_CHUNK), limit=1234)
    assert len(limited) == 1234 and len({r.id for r in limited}) == 1234


def test_set_payload_by_where_merges(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert(
        "lib",
        [
            PointData(pid(i), {"kind": KIND_CHUNK, "doc_id": "a" if i < 3 else "b", "version": 1 + i % 2, "state": "staged", "keep": i})
            for i in range(6)
        ],
    )
    store.set_payload("lib", Where(doc_id="a", version=1), {"state": "live"})
    got = {r.payload["keep"]: r.payload for r in store.scroll("lib", Where())}
    for i, p in got.items():
        want_live = i < 3 and 1 + i % 2 == 1
        assert p["state"] == ("live" if want_live else "staged"), i
        assert p["keep"] == i and p["kind"] == KIND_CHUNK  # other keys untouched
    assert store.count("lib", Where(live=True)) == 2  # ids 0 and 2
    assert store.count("lib", Where(live=False)) == 4
    with pytest.raises(ValueError):
        store.set_payload("lib", Where(), {"state": "live"})


def test_delete_by_where_and_refuses_empty_filter(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert(
        "lib",
        [PointData(pid(i), {"kind": KIND_CHUNK, "doc_id": f"d{i % 2}", "version": i % 3}) for i in range(12)],
    )
    with pytest.raises(ValueError):
        store.delete("lib", Where())
    assert store.count("lib", Where()) == 12
    store.delete("lib", Where(doc_id="d0", version=1))
    left = store.scroll("lib", Where())
    assert sorted(int(uuid.UUID(r.id)) - 1 for r in left) == [i for i in range(12) if not (i % 2 == 0 and i % 3 == 1)]
    store.delete("lib", Where(doc_id="d1", not_version=2))
    left = store.scroll("lib", Where())
    assert sorted(int(uuid.UUID(r.id)) - 1 for r in left) == [
        i for i in range(12) if not (i % 2 == 0 and i % 3 == 1) and not (i % 2 == 1 and i % 3 != 2)
    ]
    store.delete("lib", Where(doc_id="nothing-matches"))  # no error
    assert store.count("lib", Where()) == len(left)


def test_update_sparse_keeps_payload_and_other_vector(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    payload = {"kind": KIND_CHUNK, "doc_id": "a", "text": "hello"}
    store.upsert(
        "lib",
        [
            PointData(pid(1), payload, {SPARSE_CHUNK: sv({10: 1.0}), SPARSE_PAGE: sv({20: 1.0})}),
            PointData(pid(2), {"kind": KIND_CHUNK, "doc_id": "b"}, {SPARSE_CHUNK: sv({10: 1.0, 11: 1.0})}),
        ],
    )
    store.update_sparse("lib", SPARSE_CHUNK, [(pid(1), sv({12: 2.0}))])
    assert [r.payload for r in store.retrieve("lib", [pid(1)])] == [payload]
    # The old term is gone from the updated point, the new one is there.
    assert [h.id for h in store.search_sparse("lib", SPARSE_CHUNK, sv({10: 1.0}), Where(), 10)] == [pid(2)]
    assert [h.id for h in store.search_sparse("lib", SPARSE_CHUNK, sv({12: 1.0}), Where(), 10)] == [pid(1)]
    # The other sparse vector of the point is untouched.
    assert [h.id for h in store.search_sparse("lib", SPARSE_PAGE, sv({20: 1.0}), Where(), 10)] == [pid(1)]
    store.update_sparse("lib", SPARSE_CHUNK, [])  # a no-op


def test_sparse_search_scores_use_idf_over_points_with_the_vector(store: Store) -> None:
    """score = sum_t q_t * d_t * ln(1 + (N - n_t + 0.5) / (n_t + 0.5)), N = points having the
    vector (manifest points without vectors do not count)."""
    store.create_collection("lib", CollectionSpec())
    store.upsert(
        "lib",
        [
            PointData(pid(0), {"kind": KIND_CHUNK}, {SPARSE_CHUNK: sv({1: 1.0, 2: 2.0})}),
            PointData(pid(1), {"kind": KIND_CHUNK}, {SPARSE_CHUNK: sv({1: 1.0, 3: 0.5})}),
            PointData(pid(2), {"kind": KIND_CHUNK}, {SPARSE_CHUNK: sv({1: 1.0, 3: 1.5})}),
            PointData(pid(3), {"kind": KIND_CHUNK}, {SPARSE_CHUNK: sv({1: 1.0})}),
            PointData(pid(4), {"kind": KIND_DOC}),
            PointData(pid(5), {"kind": KIND_DOC}),
        ],
    )
    n_docs = 4

    def idf(n: int) -> float:
        return math.log(1 + (n_docs - n + 0.5) / (n + 0.5))

    hits = store.search_sparse("lib", SPARSE_CHUNK, sv({2: 1.0, 3: 2.0}), Where(), 10)
    want = {pid(0): 2.0 * idf(1), pid(1): 2.0 * 0.5 * idf(2), pid(2): 2.0 * 1.5 * idf(2)}
    got = {h.id: h.score for h in hits}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-5)
    assert [h.id for h in hits] == sorted(want, key=lambda k: -want[k])  # best first
    assert hits[0].payload == {"kind": KIND_CHUNK}
    assert store.search_sparse("lib", SPARSE_CHUNK, SparseVector([], []), Where(), 10) == []
    assert len(store.search_sparse("lib", SPARSE_CHUNK, sv({1: 1.0}), Where(), 2)) == 2


# -- predicates -----------------------------------------------------------------------------

PREDICATE_CASES: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    ({"field": "region", "op": "eq", "value": "south"}, lambda m: m["region"] == "south"),
    ({"field": "year", "op": "eq", "value": 2018}, lambda m: m["year"] == 2018),
    ({"field": "region", "op": "ne", "value": "south"}, lambda m: m["region"] != "south"),
    ({"field": "year", "op": "ne", "value": 2018}, lambda m: m["year"] != 2018),
    ({"field": "region", "op": "in", "value": ["north", "east"]}, lambda m: m["region"] in ("north", "east")),
    ({"field": "year", "op": "in", "value": [2015, 2021, 1999]}, lambda m: m["year"] in (2015, 2021)),
    ({"field": "region", "op": "nin", "value": ["north", "east"]}, lambda m: m["region"] not in ("north", "east")),
    ({"field": "year", "op": "nin", "value": [2016, 2017]}, lambda m: m["year"] not in (2016, 2017)),
    ({"field": "year", "op": "gt", "value": 2019}, lambda m: m["year"] > 2019),
    ({"field": "year", "op": "gte", "value": 2019}, lambda m: m["year"] >= 2019),
    ({"field": "year", "op": "lt", "value": 2017}, lambda m: m["year"] < 2017),
    ({"field": "year", "op": "lte", "value": 2017}, lambda m: m["year"] <= 2017),
    ({"field": "year", "op": "between", "value": [2016, 2018]}, lambda m: 2016 <= m["year"] <= 2018),
    ({"field": "ratio", "op": "gt", "value": 2.0}, lambda m: m["ratio"] > 2.0),
    ({"field": "ratio", "op": "gte", "value": 2.0}, lambda m: m["ratio"] >= 2.0),
    ({"field": "ratio", "op": "lt", "value": 1.0}, lambda m: m["ratio"] < 1.0),
    ({"field": "ratio", "op": "lte", "value": 1.0}, lambda m: m["ratio"] <= 1.0),
    ({"field": "ratio", "op": "between", "value": [1.0, 2.5]}, lambda m: 1.0 <= m["ratio"] <= 2.5),
    ({"field": "ratio", "op": "between", "value": [0.6, 0.9]}, lambda m: False),
    ({"field": "audited", "op": "eq", "value": True}, lambda m: m["audited"] is True),
    ({"field": "audited", "op": "eq", "value": False}, lambda m: m["audited"] is False),
    ({"field": "audited", "op": "ne", "value": True}, lambda m: m["audited"] is not True),
    ({"field": "audited", "op": "in", "value": [False]}, lambda m: m["audited"] is False),
    ({"field": "audited", "op": "nin", "value": [False]}, lambda m: m["audited"] is not False),
    ({"field": "page", "op": "gte", "value": 6}, lambda m: m["_page"] >= 6),
    ({"field": "doc_id", "op": "in", "value": ["d1", "d4"]}, lambda m: m["_doc_id"] in ("d1", "d4")),
]


def _expected(match: Callable[[dict[str, Any]], bool]) -> set[str]:
    out = set()
    for i in range(N_CORPUS):
        row = corpus_row(i)
        m = {**row["meta"], "_page": row["page"], "_doc_id": row["doc_id"]}
        if match(m):
            out.add(pid(i))
    return out


@pytest.mark.parametrize(
    "raw,match", PREDICATE_CASES, ids=[f"{r['field']}-{r['op']}-{r['value']}" for r, _ in PREDICATE_CASES]
)
def test_search_sparse_predicates(corpus: Store, raw: dict[str, Any], match: Callable[[dict[str, Any]], bool]) -> None:
    where = Where(kind=KIND_CHUNK, predicates=(parse_predicate(raw),))
    want = _expected(match)
    hits = corpus.search_sparse("lib", SPARSE_CHUNK, sv({COMMON: 1.0}), where, 100)
    assert {h.id for h in hits} == want
    # Scroll and count compile the same filter.
    assert {r.id for r in corpus.scroll("lib", where)} == want
    assert corpus.count("lib", where) == len(want)


def test_search_sparse_predicates_combine_with_and(corpus: Store) -> None:
    preds = (
        parse_predicate({"field": "year", "op": "gte", "value": 2016}),
        parse_predicate({"field": "audited", "op": "eq", "value": True}),
        parse_predicate({"field": "region", "op": "ne", "value": "north"}),
    )
    want = _expected(lambda m: m["year"] >= 2016 and m["audited"] and m["region"] != "north")
    assert want  # the case is not vacuous
    hits = corpus.search_sparse("lib", SPARSE_CHUNK, sv({COMMON: 1.0}), Where(kind=KIND_CHUNK, predicates=preds), 100)
    assert {h.id for h in hits} == want


def test_search_sparse_system_fields(store: Store) -> None:
    corpus = fill_corpus(store)
    corpus.upsert(
        "lib",
        [PointData(pid(500 + v), {"kind": KIND_CHUNK, "doc_id": "dv", "version": v, "state": "live" if v == 2 else "staged"},
                   {SPARSE_CHUNK: sv({COMMON: 1.0})}) for v in (1, 2, 3)],
    )
    q = sv({COMMON: 1.0})
    assert [h.id for h in corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(live=True), 100)] == [pid(502)]
    assert {h.id for h in corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(doc_id="dv", live=False), 100)} == {pid(501), pid(503)}
    assert {h.id for h in corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(doc_id="dv", not_version=1), 100)} == {pid(502), pid(503)}
    assert {h.id for h in corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(doc_id="dv", version=3), 100)} == {pid(503)}
    assert corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(kind=KIND_DOC), 100) == []


# -- payload selectors ----------------------------------------------------------------------

SEL_N = 12
SEL_D = 4
SEL_DENSE, SEL_MV = "sel_dense", "sel_mv"
#: Points whose payload has no ``page`` key: a selected key they lack is simply absent.
SEL_NO_PAGE = (3, 7)


def sel_payload(i: int) -> dict[str, Any]:
    p: dict[str, Any] = {
        "kind": KIND_CHUNK,
        "doc_id": f"d{i % 3}",
        "page": i + 1,
        "version": 1 + i % 2,
        "state": "live",
        "text": f"page {i} " + "lorem ipsum " * 250,  # ~3 KB, the weight selectors avoid
        "meta": {"year": 2000 + i, "tags": ["a", str(i)], "deep": {"x": i}},
    }
    if i in SEL_NO_PAGE:
        del p["page"]
    return p


def sel_vectors(i: int) -> tuple[list[float], list[list[float]]]:
    rng = np.random.default_rng(100 + i)
    return rng.normal(size=SEL_D).tolist(), rng.normal(size=(1 + i % 3, SEL_D)).tolist()


@pytest.fixture(scope="module", params=BACKENDS)
def sel_corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """Chunks with a big ``text`` and a nested ``meta``, all three vector kinds, plus a manifest
    point with no vectors; built once per backend, tests only read."""
    s = make_store(request.param, tmp_path_factory.mktemp("selectors"))
    spec = CollectionSpec(
        dense=(DenseField(SEL_DENSE, SEL_D), DenseField(SEL_MV, SEL_D, multivector=True, hnsw=False))
    )
    s.create_collection("lib", spec)
    pts = []
    for i in range(SEL_N):
        dense, mv = sel_vectors(i)
        # Distinct term weights, so that BM25 scores differ and the ranking is meaningful.
        sparse = sv({COMMON: 1.0, 100 + i % 4: 1.0 + i % 5})
        pts.append(PointData(pid(i), sel_payload(i), {SPARSE_CHUNK: sparse}, {SEL_DENSE: dense, SEL_MV: mv}))
    pts.append(PointData(pid(900), {"kind": KIND_DOC, "doc_id": "d0", "meta": {"title": "t"}}))
    s.upsert("lib", pts)
    try:
        yield s
    finally:
        s.close()


def _full_payloads() -> dict[str, dict[str, Any]]:
    out = {pid(i): sel_payload(i) for i in range(SEL_N)}
    out[pid(900)] = {"kind": KIND_DOC, "doc_id": "d0", "meta": {"title": "t"}}
    return out


def _selected(payload: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    return dict(payload) if fields is None else {k: payload[k] for k in fields if k in payload}


SELECTORS: list[list[str] | None] = [
    None,
    ["doc_id", "page", "version"],
    ["meta"],  # nested values come whole
    ["doc_id", "no_such_key"],
    ["no_such_key"],
    [],
]

#: Every read that takes ``fields``, as (label, call); each returns a list of Hit or Record.
SELECTOR_READS: list[tuple[str, Callable[..., list[Any]]]] = [
    ("sparse", lambda s, **kw: s.search_sparse("lib", SPARSE_CHUNK, sv({COMMON: 1.0, 101: 1.0, 102: 0.5}), Where(kind=KIND_CHUNK), 100, **kw)),
    ("sparse-limit", lambda s, **kw: s.search_sparse("lib", SPARSE_CHUNK, sv({100: 1.0, 103: 2.0}), Where(), 4, **kw)),
    ("dense", lambda s, **kw: s.search_dense("lib", SEL_DENSE, [0.3, -1.0, 0.5, 2.0], Where(), 7, **kw)),
    ("dense-where", lambda s, **kw: s.search_dense("lib", SEL_DENSE, [1.0, 0.0, 0.0, 0.0], Where(doc_id="d1"), 10, **kw)),
    ("multivector", lambda s, **kw: s.search_multivector("lib", [[1.0, 0.5, -0.2, 0.0], [0.0, 0.0, 1.0, 1.0]], Where(), 6, full_field=SEL_MV, **kw)),
    ("retrieve", lambda s, **kw: s.retrieve("lib", [pid(5), pid(3), pid(900), pid(4242), pid(0)], **kw)),
    ("scroll", lambda s, **kw: s.scroll("lib", Where(), **kw)),
    ("scroll-limit", lambda s, **kw: s.scroll("lib", Where(doc_id="d0"), limit=3, **kw)),
]


def _key(x: Hit | Record) -> tuple[str, float | None]:
    return (x.id, x.score if isinstance(x, Hit) else None)


@pytest.mark.parametrize("fields", SELECTORS, ids=lambda f: "none" if f is None else "[" + ",".join(f) + "]")
@pytest.mark.parametrize("label,read", SELECTOR_READS, ids=[r[0] for r in SELECTOR_READS])
def test_payload_selector_returns_exactly_the_selected_keys(
    sel_corpus: Store, label: str, read: Callable[..., list[Any]], fields: list[str] | None
) -> None:
    full = _full_payloads()
    plain = read(sel_corpus)  # today's call, no fields argument
    assert plain, label  # the case is not vacuous
    got = read(sel_corpus, fields=fields)
    # Same points, same scores, same order: the selector only trims payloads.
    assert [_key(x) for x in got] == [_key(x) for x in plain]
    for x in plain:
        assert x.payload == full[x.id]
    for x in got:
        assert x.payload == _selected(full[x.id], fields), (label, x.id)
    if fields is not None:
        assert all(set(x.payload) <= set(fields) for x in got)
    if label in ("sparse", "scroll"):
        # Some points lack ``page``: with it selected they come back without it, not with None.
        assert {pid(i) for i in SEL_NO_PAGE} <= {x.id for x in got}
        if fields and "page" in fields:
            want_no_page = {x.id for x in got if "page" not in full[x.id]}
            assert {x.id for x in got if "page" not in x.payload} == want_no_page
            assert all(x.payload["page"] is not None for x in got if x.id not in want_no_page)


def test_payload_selector_accepts_any_sequence(sel_corpus: Store) -> None:
    q = sv({COMMON: 1.0})
    a = sel_corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(), 5, fields=("doc_id", "page"))
    b = sel_corpus.search_sparse("lib", SPARSE_CHUNK, q, Where(), 5, fields=["doc_id", "page"])
    assert a == b and all(set(h.payload) <= {"doc_id", "page"} for h in a)
    assert sel_corpus.search_sparse("lib", SPARSE_CHUNK, SparseVector([], []), Where(), 5, fields=["doc_id"]) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda s, f: s.search_sparse("lib", SPARSE_CHUNK, sv({COMMON: 1.0}), Where(), 5, fields=f),
        lambda s, f: s.search_dense("lib", SEL_DENSE, [1.0] * SEL_D, Where(), 5, fields=f),
        lambda s, f: s.search_multivector("lib", [[1.0] * SEL_D], Where(), 5, full_field=SEL_MV, fields=f),
        lambda s, f: s.retrieve("lib", [pid(1)], fields=f),
        lambda s, f: s.scroll("lib", Where(), fields=f),
    ],
    ids=["sparse", "dense", "multivector", "retrieve", "scroll"],
)
def test_payload_selector_rejects_a_bare_string_and_bad_keys(sel_corpus: Store, call: Callable[..., Any]) -> None:
    # A string is a Sequence[str] of one-letter keys: refused, not silently misread.
    with pytest.raises(TypeError, match="not a string"):
        call(sel_corpus, "doc_id")
    with pytest.raises(ValueError, match="non-empty strings"):
        call(sel_corpus, ["doc_id", ""])
    with pytest.raises(ValueError, match="non-empty strings"):
        call(sel_corpus, ["doc_id", 3])


# -- persistence (embedded store only) ------------------------------------------------------


def test_edge_store_survives_close_and_reopen(tmp_path: Path) -> None:
    s = EdgeStore(tmp_path)
    s.create_collection("lib", CollectionSpec())
    s.create_collection("other", CollectionSpec())
    pts = [PointData(pid(i), corpus_row(i), {SPARSE_CHUNK: sv({COMMON: 1.0, 100 + i: 1.0})}) for i in range(N_CORPUS)]
    s.upsert("lib", pts)
    s.set_payload("lib", Where(doc_id="d3"), {"state": "live"})
    s.delete("lib", Where(doc_id="d0"))
    s.update_sparse("lib", SPARSE_CHUNK, [(pid(5), sv({999: 1.0}))])
    before = {r.id: r.payload for r in s.scroll("lib", Where())}
    s.close()

    s2 = EdgeStore(tmp_path)
    try:
        assert s2.list_collections() == ["lib", "other"]
        assert {r.id: r.payload for r in s2.scroll("lib", Where())} == before
        assert s2.count("lib", Where()) == N_CORPUS - 1
        assert s2.retrieve("lib", [pid(3)])[0].payload["state"] == "live"
        assert [h.id for h in s2.search_sparse("lib", SPARSE_CHUNK, sv({999: 1.0}), Where(), 10)] == [pid(5)]
        assert {h.id for h in s2.search_sparse("lib", SPARSE_CHUNK, sv({COMMON: 1.0}), Where(), 10)} == {
            pid(i) for i in range(1, N_CORPUS) if i != 5
        }
        # Writable after reopening.
        s2.upsert("lib", [PointData(pid(77), {"kind": KIND_DOC})])
        assert s2.count("lib", Where(kind=KIND_DOC)) == 1
    finally:
        s2.close()


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_idf_forgets_deleted_points_after_optimize(backend: str, tmp_path: Path) -> None:
    store = make_store(backend, tmp_path)
    try:
        store.create_collection("lib", CollectionSpec())
        store.upsert(
            "lib",
            [PointData(pid(i), {"kind": KIND_CHUNK, "doc_id": f"d{i}"}, {SPARSE_CHUNK: sv({1: 1.0})}) for i in range(4)]
            + [PointData(pid(9), {"kind": KIND_CHUNK, "doc_id": "gone"}, {SPARSE_CHUNK: sv({1: 1.0, 2: 1.0})})],
        )
        store.delete("lib", Where(doc_id="gone"))
        store.optimize("lib")
        # Four points left, all holding term 1: idf = ln(1 + 0.5 / 4.5).
        hits = store.search_sparse("lib", SPARSE_CHUNK, sv({1: 1.0}), Where(), 10)
        assert len(hits) == 4
        assert hits[0].score == pytest.approx(math.log(1 + 0.5 / 4.5), rel=1e-5)
    finally:
        store.close()


def test_edge_idf_is_exact_after_reopen(tmp_path: Path) -> None:
    """Even without optimize(), a reload gives exact statistics."""
    s = EdgeStore(tmp_path)
    s.create_collection("lib", CollectionSpec())
    s.upsert("lib", [PointData(pid(i), {"doc_id": f"d{i}"}, {SPARSE_CHUNK: sv({1: 1.0})}) for i in range(5)])
    s.delete("lib", Where(doc_id="d0"))
    s.close()
    s = EdgeStore(tmp_path)
    try:
        hits = s.search_sparse("lib", SPARSE_CHUNK, sv({1: 1.0}), Where(), 10)
        assert len(hits) == 4 and hits[0].score == pytest.approx(math.log(1 + 0.5 / 4.5), rel=1e-5)
    finally:
        s.close()


# -- conditional writes (writer leases, fenced commits) ----------------------------------------


def test_put_if_inserts_only_when_absent(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    first = PointData(pid(1), {"kind": "lease", "holder": "a", "epoch": 1})
    assert store.put_if("lib", first, None) is True
    assert store.put_if("lib", PointData(pid(1), {"kind": "lease", "holder": "b", "epoch": 1}), None) is False
    assert store.retrieve("lib", [pid(1)])[0].payload == first.payload


def test_put_if_updates_only_on_a_match(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert("lib", [PointData(pid(1), {"kind": "lease", "holder": "a", "epoch": 3})])
    stale = PointData(pid(1), {"kind": "lease", "holder": "b", "epoch": 4})
    assert store.put_if("lib", stale, {"holder": "a", "epoch": 2}) is False  # epoch moved on
    assert store.retrieve("lib", [pid(1)])[0].payload["holder"] == "a"
    won = PointData(pid(1), {"kind": "lease", "holder": "b", "epoch": 4})
    assert store.put_if("lib", won, {"holder": "a", "epoch": 3}) is True
    assert store.retrieve("lib", [pid(1)])[0].payload == won.payload
    # a conditional update never creates the point
    assert store.put_if("lib", PointData(pid(2), {"kind": "lease", "epoch": 1}), {"epoch": 0}) is False
    assert store.retrieve("lib", [pid(2)]) == []
    with pytest.raises(LibraryNotFoundError):
        store.put_if("nope", won, None)


def test_put_if_has_one_winner_among_threads(store: Store) -> None:
    import threading
    store.create_collection("lib", CollectionSpec())
    store.upsert("lib", [PointData(pid(1), {"kind": "lease", "holder": "none", "epoch": 0})])
    wins: list[str] = []
    start = threading.Barrier(6)

    def contend(name: str) -> None:
        start.wait()
        if store.put_if("lib", PointData(pid(1), {"kind": "lease", "holder": name, "epoch": 1}),
                        {"holder": "none", "epoch": 0}):
            wins.append(name)

    threads = [threading.Thread(target=contend, args=(f"r{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.retrieve("lib", [pid(1)])[0].payload["holder"] == wins[0]


def test_server_store_asks_for_a_collection_once_and_sees_a_drop_elsewhere() -> None:
    """No ``collection_exists`` before every call; a collection another replica dropped is a
    LibraryNotFoundError on the next call, not a raw client error."""
    from qdrant_client import QdrantClient
    client = QdrantClient(":memory:")
    a, b = ServerStore(client), ServerStore(client)  # two replicas, one Qdrant
    try:
        a.create_collection("lib", CollectionSpec())
        checks = a.existence_checks
        for i in range(20):
            a.upsert("lib", [PointData(pid(i), {"kind": KIND_DOC, "doc_id": f"d{i}"})])
            a.retrieve("lib", [pid(i)])
        assert a.existence_checks - checks == 1  # the first call only
        b.drop_collection("lib")
        with pytest.raises(LibraryNotFoundError, match="unknown library 'lib'"):
            a.retrieve("lib", [pid(1)])
        with pytest.raises(LibraryNotFoundError):
            a.upsert("lib", [PointData(pid(1), {"kind": KIND_DOC})])
        assert a.has_collection("lib") is False
    finally:
        a.close()


def test_server_store_refuses_conditional_writes_on_a_server_without_them() -> None:
    """Qdrant before 1.17 ignores update_filter/update_mode: a conditional write there would
    always land (two replicas would both hold a lease), so it is refused with the reason."""
    from types import SimpleNamespace

    from qdrant_client import QdrantClient

    client = QdrantClient(":memory:")
    store = ServerStore(client)
    store.create_collection("lib", CollectionSpec())
    client.info = lambda: SimpleNamespace(version="1.15.3")  # type: ignore[method-assign]
    with pytest.raises(StoreError, match=r"version 1\.15\.3.*from 1\.17 on.*RAGSPINE_WRITER_LEASES=off"):
        store.put_if("lib", PointData(pid(1), {"kind": "lease"}), None)
    assert store.retrieve("lib", [pid(1)]) == []
    client.info = lambda: SimpleNamespace(version="1.17.0")  # type: ignore[method-assign]
    assert store.put_if("lib", PointData(pid(1), {"kind": "lease"}), None) is True


def test_server_store_turns_a_lost_create_race_and_a_dead_server_into_store_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas create one collection at once: the loser gets a StoreError (not a raw
    client error). A server gone after a collection was seen: calls say unreachable."""
    store = ServerStore.from_url(":memory:")
    store.create_collection("lib", CollectionSpec())
    monkeypatch.setattr(store, "_exists", lambda c: False)  # the other replica's create not yet seen
    with pytest.raises(StoreError, match="already exists"):
        store.create_collection("lib", CollectionSpec())
    store.close()

    dead = ServerStore.from_url("http://127.0.0.1:9")  # nothing listens on the discard port
    dead._known.add("ragspine__lib")  # seen before the server went away: no existence check
    with pytest.raises(StoreError, match="unreachable"):
        dead.retrieve("lib", [pid(1)])
    dead.close()


def test_a_dense_field_joins_an_existing_collection_and_keeps_what_was_there(store: Store) -> None:
    store.create_collection("lib", CollectionSpec())
    payload = {"kind": KIND_CHUNK, "doc_id": "a", "text": "hello"}
    store.upsert("lib", [PointData(pid(1), payload, {SPARSE_CHUNK: sv({10: 1.0})}),
                         PointData(pid(2), {"kind": KIND_CHUNK, "doc_id": "b"}, {SPARSE_CHUNK: sv({11: 1.0})})])
    with pytest.raises(ValueError, match="library 'lib' has no dense vector field 'dense_new'"):
        store.retrieve_vectors("lib", [pid(1)], "dense_new")
    store.add_dense_field("lib", DenseField("dense_new", 3))
    store.update_dense("lib", "dense_new", [(pid(1), np.array([1.0, 0.0, 0.0])), (pid(2), np.array([0.0, 1.0, 0.0]))])
    store.add_dense_field("lib", DenseField("dense_new", 3))  # already there: nothing changes
    got = store.retrieve_vectors("lib", [pid(1), pid(2)], "dense_new")
    np.testing.assert_allclose(got[pid(1)], [1.0, 0.0, 0.0], atol=1e-6)
    hits = store.search_dense("lib", "dense_new", [0.9, 0.1, 0.0], Where(), 2)
    assert [h.id for h in hits] == [pid(1), pid(2)]
    assert [r.payload for r in store.retrieve("lib", [pid(1)])] == [payload]  # payload and sparse kept
    assert [h.id for h in store.search_sparse("lib", SPARSE_CHUNK, sv({10: 1.0}), Where(), 10)] == [pid(1)]
    store.update_dense("lib", "dense_new", [])  # a no-op


@pytest.mark.parametrize("field", [
    DenseField("mv", 3, multivector=True),
    DenseField("q", 3, quantization="scalar"),
    DenseField("half", 3, datatype="float16"),
    DenseField("dot", 3, distance="dot"),
])
def test_only_a_plain_single_vector_can_join_later(store: Store, field: DenseField) -> None:
    store.create_collection("lib", CollectionSpec())
    store.upsert("lib", [PointData(pid(1), {"kind": KIND_CHUNK}, {SPARSE_CHUNK: sv({10: 1.0})})])
    with pytest.raises(ValueError, match="only a float32 cosine single vector"):
        store.add_dense_field("lib", field)
    with pytest.raises(ValueError, match=f"no dense vector field '{field.name}'"):
        store.update_dense("lib", field.name, [(pid(1), np.ones(3))])
    with pytest.raises(ValueError, match="no dense vector field 'mv'"):
        store.retrieve_vectors("lib", [pid(1)], "mv")  # nothing was added


def test_a_collection_of_records_only(store: Store) -> None:
    """A collection with no vector field at all (the job records of ragspine.serving.jobs) holds
    and returns payloads on both backends (Qdrant Edge needs a field it is given one)."""
    store.create_collection("_records", CollectionSpec(sparse_idf=()))
    store.upsert("_records", [PointData(pid(i), {"kind": "job", "n": i}) for i in range(3)])
    assert {r.payload["n"] for r in store.scroll("_records", Where(kind="job"))} == {0, 1, 2}
    assert [r.payload for r in store.retrieve("_records", [pid(1)])] == [{"kind": "job", "n": 1}]


def test_scroll_points_reads_every_point_with_every_vector_as_stored(store: Store, tmp_path: Path) -> None:
    """What a backup reads: payloads whole, sparse vectors exact, dense vectors as stored (a
    cosine field normalised, a float16 field's values, a multivector's rows), across pages, and
    a filter applied. On the embedded store an int8 multivector too (its dequantized values)."""
    int8 = store.backend == "embedded"
    fields = (DenseField("one", 3), DenseField("multi", 2, multivector=True, hnsw=False, datatype="float16"))
    if int8:
        fields += (DenseField("codes", 2, multivector=True, hnsw=False, datatype="int8"),)
    store.create_collection("lib", CollectionSpec(dense=fields))
    rng = np.random.default_rng(3)
    wrote: dict[str, PointData] = {}
    for i in range(7):
        dense: dict[str, Any] = {"one": np.array([3.0, 4.0, float(i)], np.float32),
                                 "multi": rng.standard_normal((i + 1, 2)).astype(np.float32)}
        if int8:
            dense["codes"] = rng.standard_normal((2, 2)).astype(np.float32)
        p = PointData(pid(i), {"kind": KIND_CHUNK if i % 2 else KIND_DOC, "n": i, "meta": {"a": [i, "x"]}},
                      {SPARSE_CHUNK: sv({i + 1: 0.5 * i, 40: 1.25})}, dense if i != 6 else {})
        wrote[p.id] = p
    store.upsert("lib", list(wrote.values()))
    got: dict[str, PointData] = {}
    offset = None
    pages = 0
    while True:
        batch, offset = store.scroll_points("lib", Where(), offset=offset, limit=3)
        pages += 1
        got.update({p.id: p for p in batch})
        if offset is None:
            break
    assert pages == 3 and sorted(got) == sorted(wrote)
    for k, w in wrote.items():
        g = got[k]
        assert g.payload == w.payload
        assert g.sparse == w.sparse
        assert sorted(g.dense) == sorted(w.dense)
        if "one" in w.dense:
            v = w.dense["one"]
            np.testing.assert_allclose(g.dense["one"], v / np.linalg.norm(v), rtol=1e-6)
            # Qdrant keeps float16; qdrant-client's in-memory double keeps what it was given
            half = w.dense["multi"].astype(np.float16).astype(np.float32)
            assert np.array_equal(g.dense["multi"], half) or (
                store.backend == "server" and np.array_equal(g.dense["multi"], w.dense["multi"]))
            assert g.dense["multi"].dtype == np.float32 and g.dense["multi"].shape == w.dense["multi"].shape
        if int8 and "codes" in w.dense:
            # one code step of the row's largest component at most
            step = np.abs(w.dense["codes"]).max(axis=1, keepdims=True) / 127
            assert np.all(np.abs(g.dense["codes"] - w.dense["codes"]) <= step / 2 + 1e-7)
    only_chunks, _ = store.scroll_points("lib", Where(kind=KIND_CHUNK), limit=100)
    assert sorted(p.id for p in only_chunks) == sorted(k for k, w in wrote.items() if w.payload["kind"] == KIND_CHUNK)


def test_search_dense_exact_scans_every_vector(store: Store) -> None:
    """``exact=True`` ranks by brute-force cosine over every vector (what the dense channel uses
    for libraries up to RAGSPINE_DENSE_EXACT_MAX_PASSAGES), on both backends."""
    store.create_collection("lib", CollectionSpec(dense=(DenseField("d", 8),), indexing_threshold_kb=1))
    rng = np.random.default_rng(9)
    vecs = rng.standard_normal((300, 8)).astype(np.float32)
    store.upsert("lib", [PointData(pid(i), {"kind": KIND_CHUNK}, {}, {"d": v}) for i, v in enumerate(vecs)])
    store.optimize("lib")  # an HNSW graph now exists; exact must not use it
    q = rng.standard_normal(8).astype(np.float32)
    cos = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    want = [pid(i) for i in np.argsort(-cos, kind="stable")[:20]]
    got = store.search_dense("lib", "d", q.tolist(), Where(kind=KIND_CHUNK), 20, exact=True)
    assert [h.id for h in got] == want
    np.testing.assert_allclose([h.score for h in got], np.sort(cos)[::-1][:20], rtol=1e-5)
