"""BM25 as sparse vectors: the document/query weights against the formula, and end to end
through both real stores against a plain Okapi BM25 written here."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.scoring.bm25 import BM25Params, SparseVector, document_vector, query_vector
from ragspine.scoring.tokenizer import token_id, tokenize
from ragspine.store.base import CollectionSpec, PointData, Where

K1, B = 1.5, 0.75


# -- parameters and vectors -----------------------------------------------------------------


def test_default_params() -> None:
    p = BM25Params()
    assert (p.k1, p.b) == (1.5, 0.75)
    assert "k1=1.5" in p.revision and "b=0.75" in p.revision


@pytest.mark.parametrize(("k1", "b"), [(0.0, 0.75), (-1.0, 0.75), (1.5, -0.01), (1.5, 1.01)])
def test_bad_params_are_refused(k1: float, b: float) -> None:
    with pytest.raises(ValueError, match="k1"):
        BM25Params(k1=k1, b=b)


@pytest.mark.parametrize(("k1", "b"), [(0.01, 0.0), (1.2, 1.0), (2.0, 0.5)])
def test_boundary_params_are_accepted(k1: float, b: float) -> None:
    BM25Params(k1=k1, b=b)


def test_params_revision_changes_with_params() -> None:
    assert BM25Params().revision != BM25Params(k1=1.2).revision
    assert BM25Params().revision != BM25Params(b=0.5).revision


def test_sparse_vector_length_mismatch() -> None:
    with pytest.raises(ValueError):
        SparseVector([1, 2], [1.0])


def test_document_vector_hand_computed() -> None:
    # tokens a, b, a: dl = 3, avgdl = 2
    # norm = 1.5 * (1 - 0.75 + 0.75 * 3 / 2) = 1.5 * 1.375 = 2.0625
    # a: tf 2 -> 2 * 2.5 / (2 + 2.0625) = 5 / 4.0625
    # b: tf 1 -> 1 * 2.5 / (1 + 2.0625) = 2.5 / 3.0625
    v = document_vector(["a", "b", "a"], avgdl=2.0, params=BM25Params())
    expected = {token_id("a"): 5 / 4.0625, token_id("b"): 2.5 / 3.0625}
    assert v.indices == sorted(expected)
    assert dict(zip(v.indices, v.values)) == pytest.approx(expected, rel=1e-12)


def test_document_vector_average_length_document() -> None:
    # dl == avgdl -> norm = k1, weight = tf * (k1 + 1) / (tf + k1)
    v = document_vector(["x", "x", "y", "z"], avgdl=4.0, params=BM25Params(k1=1.2, b=0.75))
    got = dict(zip(v.indices, v.values))
    assert got[token_id("x")] == pytest.approx(2 * 2.2 / (2 + 1.2))
    assert got[token_id("y")] == pytest.approx(1 * 2.2 / (1 + 1.2))
    assert got[token_id("z")] == pytest.approx(1.0)


def test_document_vector_b_zero_ignores_length() -> None:
    short = document_vector(["t"], avgdl=10.0, params=BM25Params(b=0.0))
    long = document_vector(["t"] + ["u"] * 50, avgdl=10.0, params=BM25Params(b=0.0))
    w = 1 * 2.5 / (1 + 1.5)
    assert short.values == pytest.approx([w])
    assert dict(zip(long.indices, long.values))[token_id("t")] == pytest.approx(w)


def test_document_vector_b_one_fully_normalises() -> None:
    # b = 1: norm = k1 * dl / avgdl = 1.5 * 6 / 3 = 3 -> weight of tf 1 = 2.5 / 4
    v = document_vector(["t", "u", "u", "u", "u", "u"], avgdl=3.0, params=BM25Params(b=1.0))
    assert dict(zip(v.indices, v.values))[token_id("t")] == pytest.approx(2.5 / 4)


def test_document_vector_weights_saturate_below_k1_plus_1() -> None:
    v = document_vector(["t"] * 1000, avgdl=1000.0, params=BM25Params())
    assert v.values[0] < 2.5
    assert v.values[0] == pytest.approx(1000 * 2.5 / (1000 + 1.5))


def test_document_vector_longer_document_weighs_less() -> None:
    short = document_vector(["t", "u"], avgdl=5.0, params=BM25Params())
    long = document_vector(["t"] + ["u"] * 20, avgdl=5.0, params=BM25Params())
    ws = dict(zip(short.indices, short.values))[token_id("t")]
    wl = dict(zip(long.indices, long.values))[token_id("t")]
    assert wl < ws


def test_document_vector_chinese_tokens() -> None:
    toks = tokenize("营收增长营收")  # 6 unigrams + 5 bigrams = 11 tokens
    assert len(toks) == 11
    v = document_vector(toks, avgdl=11.0, params=BM25Params())
    got = dict(zip(v.indices, v.values))
    # 营, 收 and 营收 occur twice; every other token once. dl == avgdl -> norm = 1.5
    assert got[token_id("营收")] == pytest.approx(2 * 2.5 / 3.5)
    assert got[token_id("营")] == pytest.approx(2 * 2.5 / 3.5)
    assert got[token_id("增长")] == pytest.approx(2.5 / 2.5)
    assert len(got) == len(set(toks))


def test_document_vector_empty_document() -> None:
    v = document_vector([], avgdl=3.0, params=BM25Params())
    assert v.indices == [] and v.values == []


@pytest.mark.parametrize("avgdl", [0.0, -1.0])
def test_document_vector_refuses_non_positive_avgdl(avgdl: float) -> None:
    with pytest.raises(ValueError, match="avgdl"):
        document_vector(["a"], avgdl=avgdl, params=BM25Params())


def test_colliding_tokens_add_up() -> None:
    # "plumless" and "buckeroo" share a CRC-32 (a well-known collision).
    assert token_id("plumless") == token_id("buckeroo")
    v = document_vector(["plumless", "buckeroo"], avgdl=2.0, params=BM25Params())
    assert v.indices == [token_id("plumless")]
    assert v.values == pytest.approx([2 * 2.5 / (2 + 1.5)])
    q = query_vector("plumless buckeroo")
    assert q.indices == [token_id("plumless")] and q.values == [2.0]


def test_query_vector_holds_term_counts() -> None:
    q = query_vector("Revenue growth revenue 营收")
    expected = {
        token_id("revenue"): 2.0,
        token_id("growth"): 1.0,
        token_id("营"): 1.0,
        token_id("收"): 1.0,
        token_id("营收"): 1.0,
    }
    assert q.indices == sorted(expected)
    assert dict(zip(q.indices, q.values)) == expected


def test_query_vector_empty() -> None:
    q = query_vector("  ,,, ")
    assert q.indices == [] and q.values == []


def test_vectors_have_sorted_unique_indices() -> None:
    v = document_vector(tokenize("b a c a 营收 营 收"), avgdl=5.0, params=BM25Params())
    assert v.indices == sorted(set(v.indices))
    q = query_vector("b a c a 营收 营 收")
    assert q.indices == sorted(set(q.indices))


# -- end to end through the stores ----------------------------------------------------------

CORPUS = [
    "Revenue grew 12% in 2021, driven by strong revenue from cloud services.",
    "Operating costs fell while revenue stayed flat; margins improved.",
    "The board approved a dividend. Revenue guidance for 2022 is unchanged.",
    "2021年公司营收增长12%，主要来自云服务。",
    "营收增长放缓，成本上升，利润下降。",
    "公司董事会批准派发股息，2022年营收指引不变。",
    "Cloud services 云服务 revenue 营收 both grew in 2021年.",
    "Weather was mild; nothing about money here at all.",
]

QUERIES = [
    "revenue",
    "revenue growth 2021",
    "revenue revenue cloud",
    "营收增长",
    "云服务 营收",
    "2022年营收指引",
    "dividend 股息",
    "cloud 2021年",
    "margins",
]


def _plain_bm25(corpus_tokens: list[list[str]], query: str) -> dict[int, float]:
    """Textbook Okapi BM25 with Lucene's IDF and query term counts; only positive scores."""
    n_docs = len(corpus_tokens)
    avgdl = sum(len(t) for t in corpus_tokens) / n_docs
    tfs = [Counter(t) for t in corpus_tokens]
    qtf = Counter(tokenize(query))
    scores: dict[int, float] = {}
    for i, (toks, tf) in enumerate(zip(corpus_tokens, tfs)):
        s = 0.0
        for term, qc in qtf.items():
            f = tf.get(term, 0)
            if not f:
                continue
            n = sum(1 for c in tfs if term in c)
            idf = math.log(1 + (n_docs - n + 0.5) / (n + 0.5))
            s += qc * idf * f * (K1 + 1) / (f + K1 * (1 - B + B * len(toks) / avgdl))
        if s > 0:
            scores[i] = s
    return scores


def _open(kind: str, path: Path) -> Any:
    if kind == "edge":
        from ragspine.store.edge import EdgeStore

        return EdgeStore(path)
    from ragspine.store.server import ServerStore

    return ServerStore.from_url(":memory:")


@pytest.fixture(params=["edge", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    s = _open(request.param, tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module", params=["edge", "server"])
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, list[str], list[list[str]]]]:
    """One store per backend holding CORPUS, shared by the read-only tests."""
    s = _open(request.param, tmp_path_factory.mktemp(request.param))
    try:
        ids, corpus_tokens = _load(s, "lib", CORPUS)
        yield s, ids, corpus_tokens
    finally:
        s.close()


def _load(store: Any, name: str, docs: list[str]) -> tuple[list[str], list[list[str]]]:
    corpus_tokens = [tokenize(d) for d in docs]
    avgdl = sum(len(t) for t in corpus_tokens) / len(corpus_tokens)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(len(docs))]
    store.create_collection(name, CollectionSpec())
    store.upsert(
        name,
        [
            PointData(
                id=pid,
                payload={"kind": "chunk", "state": "live", "n": i},
                sparse={"bm25_chunk": document_vector(toks, avgdl, BM25Params())},
            )
            for i, (pid, toks) in enumerate(zip(ids, corpus_tokens))
        ],
    )
    return ids, corpus_tokens


def test_corpus_queries_have_distinct_scores() -> None:
    # Guards the ranking-order check below against ties whose engine order is arbitrary.
    corpus_tokens = [tokenize(d) for d in CORPUS]
    for q in QUERIES:
        scores = sorted(_plain_bm25(corpus_tokens, q).values())
        assert scores, q
        assert all(b - a > 1e-6 * b for a, b in zip(scores, scores[1:])), q


@pytest.mark.parametrize("query", QUERIES)
def test_store_bm25_matches_plain_okapi_bm25(loaded: Any, query: str) -> None:
    store, ids, corpus_tokens = loaded
    expected = _plain_bm25(corpus_tokens, query)
    hits = store.search_sparse("lib", "bm25_chunk", query_vector(query), Where(kind="chunk"), 20)

    got = {h.id: h.score for h in hits}
    assert set(got) == {ids[i] for i in expected}
    for i, score in expected.items():
        assert got[ids[i]] == pytest.approx(score, rel=1e-4), (query, CORPUS[i])
    expected_order = [ids[i] for i, _ in sorted(expected.items(), key=lambda kv: -kv[1])]
    assert [h.id for h in hits] == expected_order
    assert all(h.payload["kind"] == "chunk" for h in hits)


def test_store_bm25_limit_keeps_the_best(loaded: Any) -> None:
    store, ids, corpus_tokens = loaded
    expected = _plain_bm25(corpus_tokens, "revenue 营收")
    top = [ids[i] for i, _ in sorted(expected.items(), key=lambda kv: -kv[1])][:2]
    hits = store.search_sparse("lib", "bm25_chunk", query_vector("revenue 营收"), Where(kind="chunk"), 2)
    assert [h.id for h in hits] == top


def test_store_bm25_no_shared_term_gives_no_hits(loaded: Any) -> None:
    store = loaded[0]
    hits = store.search_sparse("lib", "bm25_chunk", query_vector("zebra 斑马"), Where(kind="chunk"), 10)
    assert hits == []


def test_store_bm25_empty_query_gives_no_hits(loaded: Any) -> None:
    store = loaded[0]
    hits = store.search_sparse("lib", "bm25_chunk", query_vector("!!!"), Where(kind="chunk"), 10)
    assert hits == []


def test_points_without_the_vector_do_not_change_idf(store: Any) -> None:
    # A library collection also holds doc/library records (no vectors) and page points (only
    # bm25_page): N in the chunk IDF must count chunks only.
    ids, corpus_tokens = _load(store, "lib", CORPUS)
    other = [
        PointData(id=str(uuid.UUID(int=100 + i)), payload={"kind": "doc", "state": "live"})
        for i in range(4)
    ] + [
        PointData(
            id=str(uuid.UUID(int=200 + i)),
            payload={"kind": "page", "state": "live"},
            sparse={"bm25_page": document_vector(tokenize(CORPUS[0]), 10.0, BM25Params())},
        )
        for i in range(3)
    ]
    store.upsert("lib", other)
    expected = _plain_bm25(corpus_tokens, "revenue 2021")
    hits = store.search_sparse("lib", "bm25_chunk", query_vector("revenue 2021"), Where(kind="chunk"), 20)
    assert {h.id: h.score for h in hits} == pytest.approx({ids[i]: s for i, s in expected.items()}, rel=1e-4)
