"""Search through the Engine: filters only narrow, the fallback is explicit, libraries fuse by
RRF, Chinese queries work, top_k is bounded, and a library built with other BM25 settings is
refused. Expected document sets are computed in the test from the metadata table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import FilterError, InvalidRequestError, LibraryNotFoundError, ModelMismatchError

ALPHA, BETA = "alpha", "beta"

#: doc_id -> metadata. Every document mentions "market", so an unfiltered search for it finds
#: them all and the filter alone decides what is left.
ALPHA_DOCS: dict[str, dict[str, Any]] = {
    "a2019": {"year": 2019, "region": "north", "score": 1.5, "audited": True, "entity": "Acme"},
    "a2020": {"year": 2020, "region": "south", "score": 2.5, "audited": False, "entity": "Acme"},
    "a2021": {"year": 2021, "region": "east", "score": 3.5, "audited": True, "entity": "Birch"},
    "a2022": {"year": 2022, "region": "north", "score": 4.5, "audited": False, "entity": "Birch"},
    "zh": {"year": 2021, "region": "east", "score": 2.0, "audited": True, "entity": "Cedar"},
}
ALPHA_TEXT = {
    "a2019": ["The market outlook for northern ports in 2019 was calm."],
    "a2020": ["Southern market volumes fell; the market recovered late."],
    "a2021": ["Eastern market growth was strong.", "Second page: market risks and hedging."],
    "a2022": ["Northern market prices rose sharply in the final market quarter of the market year."],
    "zh": [Page(["market notes in English"]), Page(["港口集装箱吞吐量创历史新高，制造业持续扩张。"])],
}
BETA_DOCS: dict[str, dict[str, Any]] = {
    "b1": {"year": 2018, "region": "west"},
    "b2": {"year": 2023, "region": "west"},
    "b3": {"year": 2020, "region": "south"},
}
BETA_TEXT = {
    "b1": ["Western market survey with market market detail."],
    "b2": ["A short market note."],
    "b3": ["Southern logistics market and the port market outlook."],
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """Two libraries, built once; the tests only search."""
    eng = Engine(Settings(data_dir=tmp_path_factory.mktemp("search")))
    for lib, docs, texts in ((ALPHA, ALPHA_DOCS, ALPHA_TEXT), (BETA, BETA_DOCS, BETA_TEXT)):
        eng.create_library(lib)
        for doc_id, meta in docs.items():
            eng.ingest(lib, pdfs.make_pdf(texts[doc_id]), {"doc_id": doc_id, **meta})
    try:
        yield eng
    finally:
        eng.close()


def search(engine: Engine, query: str = "market", libraries: list[str] | None = None, **kw: Any):
    return engine.search({"query": query, "libraries": libraries or [ALPHA], "top_k": 50, **kw})


def docs_of(resp: Any) -> set[str]:
    return {h.doc_id for h in resp.hits}


def keys(resp: Any) -> list[tuple[str, str, int]]:
    return [(h.library_id, h.doc_id, h.page) for h in resp.hits]


def test_unfiltered_search_finds_every_document(engine: Engine) -> None:
    assert docs_of(search(engine)) == set(ALPHA_DOCS)
    assert docs_of(search(engine, libraries=[BETA])) == set(BETA_DOCS)


# -- filters --------------------------------------------------------------------------------

FILTER_CASES: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    ({"field": "region", "op": "eq", "value": "north"}, lambda m: m["region"] == "north"),
    ({"field": "year", "op": "eq", "value": 2021}, lambda m: m["year"] == 2021),
    ({"field": "region", "op": "ne", "value": "north"}, lambda m: m["region"] != "north"),
    ({"field": "year", "op": "ne", "value": 2021}, lambda m: m["year"] != 2021),
    ({"field": "entity", "op": "in", "value": ["Acme", "Cedar"]}, lambda m: m["entity"] in ("Acme", "Cedar")),
    ({"field": "year", "op": "in", "value": [2019, 2022, 1990]}, lambda m: m["year"] in (2019, 2022)),
    ({"field": "region", "op": "nin", "value": ["east", "south"]}, lambda m: m["region"] not in ("east", "south")),
    ({"field": "year", "op": "nin", "value": [2021]}, lambda m: m["year"] != 2021),
    ({"field": "year", "op": "gt", "value": 2020}, lambda m: m["year"] > 2020),
    ({"field": "year", "op": "gte", "value": 2020}, lambda m: m["year"] >= 2020),
    ({"field": "year", "op": "lt", "value": 2021}, lambda m: m["year"] < 2021),
    ({"field": "year", "op": "lte", "value": 2021}, lambda m: m["year"] <= 2021),
    ({"field": "year", "op": "between", "value": [2020, 2021]}, lambda m: 2020 <= m["year"] <= 2021),
    ({"field": "score", "op": "gte", "value": 2.5}, lambda m: m["score"] >= 2.5),
    ({"field": "score", "op": "lt", "value": 2.5}, lambda m: m["score"] < 2.5),
    ({"field": "score", "op": "between", "value": [1.75, 3.5]}, lambda m: 1.75 <= m["score"] <= 3.5),
    ({"field": "audited", "op": "eq", "value": True}, lambda m: m["audited"] is True),
    ({"field": "audited", "op": "ne", "value": True}, lambda m: m["audited"] is not True),
    ({"field": "audited", "op": "in", "value": [False]}, lambda m: m["audited"] is False),
    ({"field": "doc_id", "op": "in", "value": ["a2019", "zh"]}, lambda m: m["_doc_id"] in ("a2019", "zh")),
]


def _expected_docs(match: Callable[[dict[str, Any]], bool]) -> set[str]:
    return {d for d, m in ALPHA_DOCS.items() if match({**m, "_doc_id": d})}


@pytest.mark.parametrize("flt,match", FILTER_CASES, ids=[f"{f['field']}-{f['op']}" for f, _ in FILTER_CASES])
def test_each_filter_operator_narrows(engine: Engine, flt: dict[str, Any], match: Callable[[dict[str, Any]], bool]) -> None:
    want = _expected_docs(match)
    assert want and want != set(ALPHA_DOCS)  # each case really narrows
    resp = search(engine, filters=[flt])
    assert docs_of(resp) == want
    assert not resp.filters_relaxed
    # Hits carry the metadata the filter was applied to.
    for h in resp.hits:
        assert h.metadata["year"] == ALPHA_DOCS[h.doc_id]["year"]


def test_page_filter(engine: Engine) -> None:
    resp = search(engine, filters=[{"field": "page", "op": "eq", "value": 2}])
    assert {(h.doc_id, h.page) for h in resp.hits} == {("a2021", 2)}  # zh page 2 has no "market"


def test_filters_combine_with_and(engine: Engine) -> None:
    flt = [{"field": "year", "op": "gte", "value": 2020}, {"field": "audited", "op": "eq", "value": True}]
    assert docs_of(search(engine, filters=flt)) == _expected_docs(lambda m: m["year"] >= 2020 and m["audited"])


BAD_FILTERS = [
    {"field": "year", "op": "approx", "value": 2020},
    {"field": "year", "op": "between", "value": [2022, 2019]},
    {"field": "year", "op": "between", "value": [2019]},
    {"field": "region", "op": "gt", "value": "m"},
    {"field": "region", "op": "gte", "value": 3},
    {"field": "year", "op": "eq", "value": "2020"},
    {"field": "year", "op": "eq", "value": 2020.5},
    {"field": "audited", "op": "eq", "value": "true"},
    {"field": "score", "op": "eq", "value": 2.5},
    {"field": "year", "op": "in", "value": []},
    {"field": "year", "op": "in", "value": 2020},
    {"field": "year", "op": "eq"},
    {"field": "year", "op": "eq", "value": {"$gt": 1}},
    {"field": "year; drop", "op": "eq", "value": 1},
    {"field": "year", "op": "eq", "value": 2020, "boost": 2},
    {"field": "page", "op": "eq", "value": "one"},
]


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("flt", BAD_FILTERS, ids=[str(i) for i in range(len(BAD_FILTERS))])
def test_bad_filter_is_an_error_never_a_wider_search(engine: Engine, flt: dict[str, Any], fallback: bool) -> None:
    with pytest.raises(FilterError):
        search(engine, filters=[flt], allow_unfiltered_fallback=fallback)
    # Also when it comes after a good filter.
    with pytest.raises(FilterError):
        search(engine, filters=[{"field": "year", "op": "gte", "value": 2019}, flt], allow_unfiltered_fallback=fallback)


def test_unknown_field_is_named(engine: Engine) -> None:
    with pytest.raises(FilterError, match="colour") as info:
        search(engine, filters=[{"field": "colour", "op": "eq", "value": "red"}])
    assert info.value.status == 422
    # A field known only in another library is unknown here...
    with pytest.raises(FilterError, match="entity"):
        search(engine, libraries=[BETA], filters=[{"field": "entity", "op": "eq", "value": "Acme"}])
    # ...and known when that library is searched too.
    resp = search(engine, libraries=[ALPHA, BETA], filters=[{"field": "entity", "op": "eq", "value": "Acme"}])
    assert {(h.library_id, h.doc_id) for h in resp.hits} == {(ALPHA, "a2019"), (ALPHA, "a2020")}


def test_unfiltered_fallback_only_when_allowed_and_said(engine: Engine) -> None:
    none_match = [{"field": "year", "op": "eq", "value": 1999}]
    strict = search(engine, filters=none_match)
    assert strict.hits == [] and not strict.filters_relaxed and not strict.degraded

    relaxed = search(engine, filters=none_match, allow_unfiltered_fallback=True)
    unfiltered = search(engine)
    assert relaxed.hits and keys(relaxed) == keys(unfiltered)
    assert relaxed.filters_relaxed and relaxed.degraded
    assert any(r.startswith("filters_relaxed") for r in relaxed.degraded_reasons)
    assert relaxed.to_json()["filters_relaxed"] is True

    # A filter that matches is applied even when the fallback is allowed.
    applied = search(engine, filters=[{"field": "year", "op": "eq", "value": 2020}], allow_unfiltered_fallback=True)
    assert docs_of(applied) == {"a2020"} and not applied.filters_relaxed and not applied.degraded


# -- libraries, languages, limits -----------------------------------------------------------


def test_two_libraries_fuse_by_rrf(engine: Engine) -> None:
    k = engine.settings.rrf_k
    per_lib = {lib: keys(search(engine, libraries=[lib])) for lib in (ALPHA, BETA)}
    resp = search(engine, libraries=[ALPHA, BETA])
    assert {h.library_id for h in resp.hits} == {ALPHA, BETA}
    for h in resp.hits:
        assert h.library_id in (ALPHA, BETA)
        assert h.doc_id in (ALPHA_DOCS if h.library_id == ALPHA else BETA_DOCS)
    # RRF worked out by hand: each page is in one library's ranking, at rank r -> 1/(k + r);
    # equal scores are ordered by (library, doc_id, page).
    fused: dict[tuple[str, str, int], float] = {}
    for ranking in per_lib.values():
        for r, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + r)
    want = sorted(fused, key=lambda key: (-fused[key], key))
    assert keys(resp) == want
    for h in resp.hits:
        assert h.scores["fused"] == pytest.approx(fused[(h.library_id, h.doc_id, h.page)])
    # Library order in the request does not change the answer.
    assert keys(search(engine, libraries=[BETA, ALPHA])) == want


def test_library_errors(engine: Engine) -> None:
    with pytest.raises(LibraryNotFoundError, match="nosuch"):
        search(engine, libraries=[ALPHA, "nosuch"])
    with pytest.raises(InvalidRequestError):
        search(engine, libraries=[ALPHA, ALPHA])


@pytest.mark.parametrize("query,text", [("吞吐量", "吞吐量"), ("制造业扩张", "制造业"), ("港口集装箱", "集装箱")])
def test_chinese_query_finds_the_chinese_page(engine: Engine, query: str, text: str) -> None:
    hits = search(engine, query=query).hits
    assert hits and (hits[0].doc_id, hits[0].page) == ("zh", 2)
    assert text in hits[0].text
    assert {(h.doc_id, h.page) for h in hits} == {("zh", 2)}


def test_full_width_query_matches_ascii_text(engine: Engine) -> None:
    assert docs_of(search(engine, query="ＭＡＲＫＥＴ")) == set(ALPHA_DOCS)


@pytest.mark.parametrize("top_k", [0, -1, 1001, 10**6])
def test_top_k_out_of_bounds(engine: Engine, top_k: int) -> None:
    with pytest.raises(InvalidRequestError, match="top_k"):
        search(engine, top_k=top_k)


def test_top_k_bounds_the_hits(engine: Engine) -> None:
    full = keys(search(engine, top_k=1000))
    assert len(full) == 6  # a2019, a2020, a2021 (2 pages), a2022, zh page 1
    for k in (1, 3, 6):
        assert keys(search(engine, top_k=k)) == full[:k]


def test_vector_mode_without_page_model_is_refused_and_hybrid_says_degraded(engine: Engine) -> None:
    with pytest.raises(InvalidRequestError, match="vector"):
        search(engine, mode="vector")
    hybrid = search(engine, mode="hybrid")
    assert hybrid.degraded and any("visual" in r for r in hybrid.degraded_reasons)
    assert keys(hybrid) == keys(search(engine, mode="bm25"))


# -- model mismatch -------------------------------------------------------------------------


@pytest.mark.parametrize("changed", [{"bm25_k1": 1.2}, {"bm25_b": 0.5}])
def test_other_bm25_settings_are_refused(tmp_path: Path, changed: dict[str, float]) -> None:
    data_dir = tmp_path / "data"
    built = Engine(Settings(data_dir=data_dir))
    built.create_library(ALPHA)
    built.ingest(ALPHA, pdfs.make_pdf(["market words"]), {"doc_id": "d"})
    before = keys(search(built))
    built.close()

    other = Engine(Settings(data_dir=data_dir, **changed))
    try:
        for call in (
            lambda: search(other),
            lambda: other.ingest(ALPHA, pdfs.make_pdf(["more words"]), {"doc_id": "e"}),
            lambda: other.documents(ALPHA),
            lambda: other.library(ALPHA),
        ):
            with pytest.raises(ModelMismatchError) as info:
                call()
            msg = str(info.value)
            assert ALPHA in msg and "k1=1.5" in msg and "b=0.75" in msg
            key, value = next(iter(changed.items()))
            assert f"{key[5:]}={value}" in msg  # what is configured now
            assert info.value.status == 409
    finally:
        other.close()

    # Refusing changed nothing: with the original settings the library answers as before.
    again = Engine(Settings(data_dir=data_dir))
    try:
        assert keys(search(again)) == before
        assert [d["doc_id"] for d in again.documents(ALPHA)] == ["d"]
    finally:
        again.close()
