"""Visual channel in the store: MaxSim multivectors, pooled prefetch, quantization, dense search.

One behavioural suite for both backends (Qdrant Edge on disk, the server API over
``QdrantClient(":memory:")``). Expected rankings and scores are computed here with numpy
(:mod:`ragspine.scoring.multivector`) from the vectors the test wrote.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragspine.errors import LibraryNotFoundError
from ragspine.scoring.multivector import maxsim_many, pool_rows_cols
from ragspine.store import Store
from ragspine.store.base import (
    DEFAULT_PREFETCH_LIMIT,
    FDE_OVERSAMPLING,
    KIND_CHUNK,
    TIE_OVERFETCH,
    KIND_PAGE,
    SPARSE_CHUNK,
    CollectionSpec,
    DenseField,
    PointData,
    Where,
)
from ragspine.store.edge import EdgeStore
from ragspine.store.server import ServerStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    # qdrant-client's local mode scans exactly and says so for every search_params it is given.
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

BACKENDS = ["edge", "server"]
D = 16  # embedding width of the test vectors
GRID = (3, 4)  # patch grid of the test pages
N_TEXT = 2  # non-image tokens per test page
FULL, POOLED, DENSE = "page_full", "page_pooled", "chunk_dense"


def make_store(kind: str, root: Path) -> Store:
    return EdgeStore(root) if kind == "edge" else ServerStore.from_url(":memory:")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    try:
        yield s
    finally:
        s.close()


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def spec(quantization: str | None = None, **kw: object) -> CollectionSpec:
    return CollectionSpec(
        dense=(
            DenseField(FULL, D, multivector=True, hnsw=False, quantization=quantization),  # type: ignore[arg-type]
            DenseField(POOLED, D, multivector=True),
            DenseField(DENSE, D),
        ),
        **kw,  # type: ignore[arg-type]
    )


def page_vectors(rng: np.random.Generator, topic: np.ndarray | None = None) -> np.ndarray:
    """A page: ``rows * cols`` patch tokens then ``N_TEXT`` text tokens, unit norm ``(n, D)``."""
    n = GRID[0] * GRID[1] + N_TEXT
    noise = rng.normal(size=(n, D))
    return unit(noise if topic is None else noise + 3.0 * topic)


IMAGE_MASK = np.array([True] * (GRID[0] * GRID[1]) + [False] * N_TEXT)


def write_pages(store: Store, pages: list[np.ndarray], pooled: list[np.ndarray] | None = None) -> None:
    pooled = pooled or [pool_rows_cols(p, IMAGE_MASK, GRID) for p in pages]
    store.upsert(
        "lib",
        [
            PointData(
                pid(i),
                {"kind": KIND_PAGE, "doc_id": f"d{i % 3}", "page": i + 1},
                dense={FULL: p.tolist(), POOLED: pooled[i].tolist()},
            )
            for i, p in enumerate(pages)
        ],
    )


def ranking(hits: list) -> list[str]:  # noqa: ANN001 - list[Hit]
    return [h.id for h in hits]


def expected(q: np.ndarray, pages: list[np.ndarray], keep: list[int] | None = None) -> list[str]:
    scores = maxsim_many(q, pages)  # (n_pages,)
    idx = range(len(pages)) if keep is None else keep
    return [pid(i) for i in sorted(idx, key=lambda i: (-scores[i], pid(i)))]


# -- exhaustive MaxSim ----------------------------------------------------------------------


def test_exhaustive_maxsim_equals_numpy(store: Store) -> None:
    rng = np.random.default_rng(0)
    # Pages of different lengths: MaxSim must not depend on padding.
    pages = [unit(rng.normal(size=(int(rng.integers(1, 30)), D))) for _ in range(40)]
    store.create_collection("lib", spec())
    store.upsert(
        "lib",
        [PointData(pid(i), {"kind": KIND_PAGE}, dense={FULL: p.tolist(), POOLED: p[:1].tolist()}) for i, p in enumerate(pages)],
    )
    q = unit(rng.normal(size=(5, D)))
    hits = store.search_multivector("lib", q.tolist(), Where(kind=KIND_PAGE), 40, full_field=FULL)
    assert ranking(hits) == expected(q, pages)
    want = maxsim_many(q, pages)
    for h in hits:
        assert h.score == pytest.approx(want[int(uuid.UUID(h.id)) - 1], abs=1e-4)
    assert hits[0].payload == {"kind": KIND_PAGE}


def test_exhaustive_respects_where(store: Store) -> None:
    rng = np.random.default_rng(1)
    pages = [page_vectors(rng) for _ in range(12)]
    store.create_collection("lib", spec())
    write_pages(store, pages)
    # A chunk point with no multivector never shows up in a multivector search.
    store.upsert("lib", [PointData(pid(100), {"kind": KIND_CHUNK, "doc_id": "d0"}, dense={DENSE: [1.0] * D})])
    q = unit(rng.normal(size=(3, D)))
    hits = store.search_multivector("lib", q.tolist(), Where(doc_id="d1"), 10, full_field=FULL)
    assert ranking(hits) == expected(q, pages, [i for i in range(12) if i % 3 == 1])
    hits = store.search_multivector(
        "lib", q.tolist(), Where(doc_id="d1"), 10, full_field=FULL, pooled_field=POOLED
    )
    assert ranking(hits) == expected(q, pages, [i for i in range(12) if i % 3 == 1])
    assert store.search_multivector("lib", q.tolist(), Where(doc_id="zz"), 10, full_field=FULL) == []


def test_limit_and_ties_broken_by_id(store: Store) -> None:
    rng = np.random.default_rng(2)
    page = page_vectors(rng)
    store.create_collection("lib", spec())
    write_pages(store, [page, page, page])  # three identical pages: equal scores
    q = unit(rng.normal(size=(2, D)))
    for pooled in (None, POOLED):
        hits = store.search_multivector("lib", q.tolist(), Where(), 2, full_field=FULL, pooled_field=pooled)
        assert ranking(hits) == [pid(0), pid(1)]
        assert hits[0].score == pytest.approx(hits[1].score, abs=1e-6)


# -- two-stage: pooled prefetch, then full MaxSim -------------------------------------------


def topic_corpus(rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    topics = unit(rng.normal(size=(n, D)))
    return topics, [page_vectors(rng, topics[i]) for i in range(n)]


def test_prefetch_finds_exhaustive_top1_when_pooled_vectors_are_informative(store: Store) -> None:
    rng = np.random.default_rng(3)
    topics, pages = topic_corpus(rng, 200)
    store.create_collection("lib", spec())
    write_pages(store, pages)
    for target in (0, 17, 42):
        q = unit(rng.normal(size=(4, D)) * 0.3 + topics[target])
        exhaustive = store.search_multivector("lib", q.tolist(), Where(), 10, full_field=FULL)
        two_stage = store.search_multivector(
            "lib", q.tolist(), Where(), 10, full_field=FULL, pooled_field=POOLED, prefetch_limit=5
        )
        assert ranking(exhaustive)[0] == pid(target)
        assert ranking(two_stage)[0] == ranking(exhaustive)[0]
        # Scores of the second stage are exact MaxSim on the full vectors.
        want = maxsim_many(q, pages)
        for h in two_stage:
            assert h.score == pytest.approx(want[int(uuid.UUID(h.id)) - 1], abs=1e-4)


def test_prefetch_really_limits_candidates_to_the_pooled_top(store: Store) -> None:
    """Pooled vectors that point away from the query hide the best page from a small prefetch:
    proof that the two-stage path scores only what the pooled stage hands over."""
    rng = np.random.default_rng(4)
    n = 60
    topics, pages = topic_corpus(rng, n)
    q = unit(rng.normal(size=(3, D)) * 0.3 + topics[7])
    pooled = [pool_rows_cols(p, IMAGE_MASK, GRID) for p in pages]
    pooled[7] = unit(-np.tile(q.mean(axis=0), (len(pooled[7]), 1)))  # misleading pooled page 7
    store.create_collection("lib", spec())
    write_pages(store, pages, pooled)
    exhaustive = store.search_multivector("lib", q.tolist(), Where(), 5, full_field=FULL)
    assert ranking(exhaustive)[0] == pid(7)
    small = store.search_multivector(
        "lib", q.tolist(), Where(), 5, full_field=FULL, pooled_field=POOLED, prefetch_limit=5
    )
    assert pid(7) not in ranking(small)
    # The full stage ranks exactly the pooled top candidates by full MaxSim; the prefetch is
    # never smaller than what the full stage fetches (limit + TIE_OVERFETCH).
    n_candidates = max(5, 5 + TIE_OVERFETCH)
    assert n_candidates < n
    pooled_scores = maxsim_many(q, pooled)
    pooled_top = sorted(range(n), key=lambda i: -pooled_scores[i])[:n_candidates]
    assert ranking(small) == expected(q, pages, pooled_top)[:5]
    # A prefetch as large as the corpus is exhaustive again.
    big = store.search_multivector(
        "lib", q.tolist(), Where(), 5, full_field=FULL, pooled_field=POOLED, prefetch_limit=n
    )
    assert ranking(big) == ranking(exhaustive)


def test_prefetch_limit_never_below_limit(store: Store) -> None:
    rng = np.random.default_rng(5)
    _, pages = topic_corpus(rng, 20)
    store.create_collection("lib", spec())
    write_pages(store, pages)
    q = unit(rng.normal(size=(2, D)))
    hits = store.search_multivector(
        "lib", q.tolist(), Where(), 8, full_field=FULL, pooled_field=POOLED, prefetch_limit=3
    )
    assert len(hits) == 8
    assert DEFAULT_PREFETCH_LIMIT >= 200  # docs/measured.md: 200 candidates cost what 10 do


# -- quantization ---------------------------------------------------------------------------


@pytest.mark.parametrize("quantization", [None, "scalar", "binary"])
def test_quantized_full_field_stays_exact_by_default(store: Store, quantization: str | None) -> None:
    rng = np.random.default_rng(6)
    topics, pages = topic_corpus(rng, 80)
    # indexing_threshold_kb=1: the optimizer quantizes even this tiny corpus.
    store.create_collection("lib", spec(quantization, indexing_threshold_kb=1))
    write_pages(store, pages)
    store.optimize("lib")
    want = maxsim_many
    for target in (3, 50):
        q = unit(rng.normal(size=(4, D)) * 0.5 + topics[target])
        exhaustive = store.search_multivector("lib", q.tolist(), Where(), 10, full_field=FULL)
        assert ranking(exhaustive) == expected(q, pages)[:10]
        two_stage = store.search_multivector(
            "lib", q.tolist(), Where(), 10, full_field=FULL, pooled_field=POOLED, prefetch_limit=40
        )
        assert ranking(two_stage)[0] == pid(target)
        # With oversampling the quantized copy picks candidates; returned scores stay exact.
        over = store.search_multivector(
            "lib", q.tolist(), Where(), 10, full_field=FULL, oversampling=8.0
        )
        scores = want(q, pages)
        assert len(over) == 10
        for h in over:
            assert h.score == pytest.approx(scores[int(uuid.UUID(h.id)) - 1], abs=1e-4)
        if quantization != "binary":  # int8 keeps the clear winner; 1 bit of 16 dims may not
            assert ranking(over)[0] == pid(target)


def test_edge_builds_quantized_and_hnsw_indexes_on_optimize(tmp_path: Path) -> None:
    s = EdgeStore(tmp_path)
    try:
        rng = np.random.default_rng(7)
        _, pages = topic_corpus(rng, 50)
        s.create_collection("lib", spec("scalar", indexing_threshold_kb=1))
        write_pages(s, pages)
        shard = s._shard("lib")
        assert shard.info().indexed_vectors_count == 0  # Edge has no background optimizer
        s.optimize("lib")
        assert shard.info().indexed_vectors_count > 0
        # Reopened from disk, the shard keeps its config and answers the same.
        q = unit(rng.normal(size=(3, D)))
        before = s.search_multivector("lib", q.tolist(), Where(), 5, full_field=FULL, pooled_field=POOLED)
        s.close()
        s2 = EdgeStore(tmp_path)
        after = s2.search_multivector("lib", q.tolist(), Where(), 5, full_field=FULL, pooled_field=POOLED)
        assert ranking(after) == ranking(before)
        s2.close()
    finally:
        s.close()


def test_dense_field_validates() -> None:
    with pytest.raises(ValueError, match="quantization must be one of"):
        DenseField("x", 4, quantization="pq")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size must be >= 1"):
        DenseField("x", 0)
    with pytest.raises(ValueError, match="hnsw_m must be >= 1"):
        DenseField("x", 4, hnsw_m=0)


# -- dense single vector --------------------------------------------------------------------


def test_search_dense_is_cosine_and_filtered(store: Store) -> None:
    rng = np.random.default_rng(8)
    vecs = rng.normal(size=(20, D)).astype(np.float32) * rng.uniform(0.1, 5, size=(20, 1))  # any norms
    store.create_collection("lib", spec())
    store.upsert(
        "lib",
        [PointData(pid(i), {"kind": KIND_CHUNK, "doc_id": f"d{i % 2}"}, dense={DENSE: v.tolist()}) for i, v in enumerate(vecs)],
    )
    q = rng.normal(size=D).astype(np.float32) * 7.0
    cos = unit(vecs) @ unit(q)  # (20,)
    hits = store.search_dense("lib", DENSE, q.tolist(), Where(kind=KIND_CHUNK), 5)
    assert ranking(hits) == [pid(i) for i in np.argsort(-cos, kind="stable")[:5]]
    for h in hits:
        assert h.score == pytest.approx(cos[int(uuid.UUID(h.id)) - 1], abs=1e-5)
    hits = store.search_dense("lib", DENSE, q.tolist(), Where(doc_id="d1"), 20)
    assert {int(uuid.UUID(h.id)) - 1 for h in hits} == set(range(1, 20, 2))


# -- stored vectors -------------------------------------------------------------------------


def vector_corpus(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray], dict[int, np.ndarray]]:
    """Pages of 1..20 tokens with rows of any norm (MaxSim fields are Dot: stored as written),
    their pooled vectors, and single dense vectors of any norm on chunk points."""
    pages = [
        (rng.normal(size=(n, D)) * rng.uniform(0.2, 3.0, size=(n, 1))).astype(np.float32)
        for n in [1, 20, 7, *rng.integers(2, 20, size=27)]
    ]
    pooled = [p[: max(1, len(p) // 3)] for p in pages]
    dense = {100 + i: (rng.normal(size=D) * rng.uniform(0.1, 5.0)).astype(np.float32) for i in range(6)}
    return pages, pooled, dense


@pytest.mark.parametrize("quantization", [None, "scalar", "binary"])
def test_retrieve_vectors_returns_the_vectors_written(store: Store, quantization: str | None) -> None:
    rng = np.random.default_rng(9)
    pages, pooled, dense = vector_corpus(rng)
    # indexing_threshold_kb=1: optimize() builds the quantized copy even for this tiny corpus.
    store.create_collection("lib", spec(quantization, indexing_threshold_kb=1))
    write_pages(store, pages, pooled)
    store.upsert(
        "lib", [PointData(pid(i), {"kind": KIND_CHUNK}, dense={DENSE: v.tolist()}) for i, v in dense.items()]
    )
    page_ids = [pid(i) for i in range(len(pages))]
    chunk_ids = [pid(i) for i in dense]
    missing = pid(4242)
    # Cosine fields are normalised on write: v / |v|, worked out here in float64.
    want_dense = {pid(i): v.astype(np.float64) / np.linalg.norm(v.astype(np.float64)) for i, v in dense.items()}

    for stage in ("written", "optimized"):  # before and after the quantized copy exists
        full = store.retrieve_vectors("lib", [*page_ids, *chunk_ids, missing], FULL)
        assert set(full) == set(page_ids), stage  # chunks have no page multivector; missing is absent
        for i, p in enumerate(pages):
            got = full[pid(i)]
            assert got.dtype == np.float32 and got.shape == p.shape == (len(p), D), (stage, i)
            # Originals, not int8 / 1-bit reconstructions (those are off by >1e-3).
            np.testing.assert_allclose(got, p, rtol=1e-6, atol=1e-7)
        pool = store.retrieve_vectors("lib", [pid(0), pid(5)], POOLED)
        assert set(pool) == {pid(0), pid(5)}
        np.testing.assert_allclose(pool[pid(5)], pooled[5], rtol=1e-6, atol=1e-7)
        assert pool[pid(0)].shape == (1, D)  # a one-token multivector stays 2-D

        single = store.retrieve_vectors("lib", [*chunk_ids, page_ids[0], missing], DENSE)
        assert set(single) == set(chunk_ids), stage
        for k, v in single.items():
            assert v.dtype == np.float32 and v.shape == (D,)
            np.testing.assert_allclose(v, want_dense[k], rtol=1e-5, atol=1e-6)
            assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5)
        if stage == "written":
            store.optimize("lib")
            if isinstance(store, EdgeStore):  # the quantized copy (and HNSW) now exist
                assert store._shard("lib").info().indexed_vectors_count > 0

    assert store.retrieve_vectors("lib", [], FULL) == {}
    assert store.retrieve_vectors("lib", [missing], FULL) == {}


def test_retrieve_vectors_errors(store: Store) -> None:
    store.create_collection("lib", spec())
    store.upsert("lib", [PointData(pid(0), {"kind": KIND_CHUNK}, dense={DENSE: [1.0] * D})])
    with pytest.raises(ValueError, match="no dense vector field 'nope'"):
        store.retrieve_vectors("lib", [pid(0)], "nope")
    with pytest.raises(ValueError, match="no dense vector field 'nope'"):
        store.retrieve_vectors("lib", [pid(77)], "nope")  # also when no requested point exists
    with pytest.raises(ValueError, match="no dense vector field"):
        store.retrieve_vectors("lib", [pid(0)], SPARSE_CHUNK)  # a sparse field is not dense
    with pytest.raises(LibraryNotFoundError):
        store.retrieve_vectors("nope", [pid(0)], DENSE)


def test_edge_retrieve_vectors_after_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    pages = [page_vectors(rng) for _ in range(3)]
    s = EdgeStore(tmp_path)
    s.create_collection("lib", spec("scalar", indexing_threshold_kb=1))
    write_pages(s, pages)
    s.optimize("lib")
    s.close()
    s2 = EdgeStore(tmp_path)
    try:
        got = s2.retrieve_vectors("lib", [pid(i) for i in range(3)], FULL)
        for i, p in enumerate(pages):
            np.testing.assert_allclose(got[pid(i)], p, rtol=1e-6, atol=1e-7)
        with pytest.raises(ValueError, match="no dense vector field"):
            s2.retrieve_vectors("lib", [pid(0)], "nope")
        s2.drop_collection("lib")
        s2.create_collection("lib", CollectionSpec(dense=(DenseField("other", D),)))
        with pytest.raises(ValueError, match=f"no dense vector field '{FULL}'"):  # no stale cache
            s2.retrieve_vectors("lib", [pid(0)], FULL)
    finally:
        s2.close()


# -- errors ---------------------------------------------------------------------------------


def test_bad_queries_and_unknown_library(store: Store) -> None:
    store.create_collection("lib", spec())
    with pytest.raises(ValueError, match="empty"):
        store.search_multivector("lib", [], Where(), 5, full_field=FULL)
    with pytest.raises(ValueError, match="differ in length"):
        store.search_multivector("lib", [[1.0] * D, [1.0]], Where(), 5, full_field=FULL)
    with pytest.raises(ValueError, match="oversampling"):
        store.search_multivector("lib", [[1.0] * D], Where(), 5, full_field=FULL, oversampling=0.5)
    with pytest.raises(ValueError, match="empty"):
        store.search_dense("lib", DENSE, [], Where(), 5)
    with pytest.raises(LibraryNotFoundError):
        store.search_multivector("nope", [[1.0] * D], Where(), 5, full_field=FULL)
    with pytest.raises(LibraryNotFoundError):
        store.search_dense("nope", DENSE, [1.0] * D, Where(), 5)
    with pytest.raises(LibraryNotFoundError):
        store.optimize("nope")


# -- float16 storage ----------------------------------------------------------------------------


def test_float16_full_vectors_score_as_their_float16_values(store: Store) -> None:
    """A float16 field keeps each vector rounded to float16: MaxSim over it equals numpy's
    MaxSim of the rounded vectors (to float32 summation), the ranking included, and vectors
    read back are those rounded values."""
    rng = np.random.default_rng(7)
    pages = [unit(rng.normal(size=(int(rng.integers(4, 30)), D))) for _ in range(40)]
    store.create_collection("lib", CollectionSpec(dense=(
        DenseField(FULL, D, multivector=True, hnsw=False, datatype="float16"),)))
    store.upsert("lib", [PointData(pid(i), {"kind": KIND_PAGE}, dense={FULL: p}) for i, p in enumerate(pages)])
    rounded = [p.astype(np.float16).astype(np.float32) for p in pages]
    back = store.retrieve_vectors("lib", [pid(3)], FULL)[pid(3)]
    if isinstance(store, ServerStore):
        # qdrant-client's in-process double keeps float32 whatever the datatype (a server
        # does not): what can be checked here is that the collection asks for float16.
        params = store.client.get_collection("ragspine__lib").config.params.vectors[FULL]
        assert params.datatype == "float16"
        rounded = pages
    assert np.array_equal(back, rounded[3])  # stored as float16 (Edge), not float32
    assert isinstance(store, ServerStore) or not np.array_equal(back, pages[3])
    q = unit(rng.normal(size=(6, D)))
    hits = store.search_multivector("lib", q.tolist(), Where(kind=KIND_PAGE), 40, full_field=FULL)
    want = maxsim_many(q, rounded)
    for h in hits:
        assert h.score == pytest.approx(want[int(uuid.UUID(h.id)) - 1], abs=2e-3)
    top = [pid(int(i)) for i in np.argsort(-want, kind="stable")[:10]]
    gaps = np.diff(np.sort(want)[::-1][:11])
    if np.all(np.abs(gaps) > 5e-3):  # no near-tie among the first ten: the order is exact
        assert ranking(hits)[:10] == top


def test_datatype_is_checked() -> None:
    with pytest.raises(ValueError, match="datatype must be one of"):
        DenseField(FULL, D, multivector=True, datatype="int4")  # type: ignore[arg-type]


# -- MUVERA first stage: one vector per page, scored by inner product ------------------------------

FDE = "page_fde"


@pytest.mark.parametrize("quant", [None, "scalar", "turbo2"], ids=["graph", "int8-scan", "turbo2-scan"])
def test_muvera_first_stage_hands_its_inner_product_top_to_exact_maxsim(store: Store, quant: str | None) -> None:
    """The single-vector first stage ranks by the raw inner product of the encodings (a page
    encoding scaled up moves up; a cosine field would not see it) and exact MaxSim reranks only
    its top ``max(prefetch_limit, limit + TIE_OVERFETCH)``. With a quantized copy (the
    ``muvera`` field: no graph, TurboQuant 2-bit or int8, built by optimize) the candidates are
    rescored with the originals, so the same ones come out."""
    from ragspine.scoring.muvera import Muvera, MuveraParams

    rng = np.random.default_rng(11)
    n, limit = 60, 5
    topics, pages = topic_corpus(rng, n)
    q = unit(rng.normal(size=(3, D)) * 0.3 + topics[7])
    enc = Muvera(MuveraParams(dim=D, k_sim=3, dim_proj=4, r_reps=4))
    fdes = np.stack([enc.document(p) for p in pages])  # (n, 128)
    qf = enc.query(q)
    n_candidates = limit + TIE_OVERFETCH
    fdes[7] = -fdes[7]  # the best page by MaxSim, hidden from the first stage
    before = fdes @ qf
    # The best page by MaxSim among those outside the first stage's top with a positive inner
    # product, its encoding made 25x longer: in the top by inner product, unmoved by cosine.
    exact = maxsim_many(q, pages)
    outside = [int(i) for i in np.argsort(-before, kind="stable")[n_candidates:] if before[i] > 0 and i != 7]
    long = max(outside, key=lambda i: exact[i])
    fdes[long] *= 25.0
    fde_field = (DenseField(FDE, fdes.shape[1], distance="dot", hnsw=False, quantization=quant) if quant
                 else DenseField(FDE, fdes.shape[1], distance="dot"))
    # indexing_threshold_kb=1: Qdrant builds the int8 copy of even these 60 pages (its default
    # threshold, 10 MB, would leave them unquantized and the scan would read the originals).
    store.create_collection("lib", CollectionSpec(dense=(DenseField(FULL, D, multivector=True, hnsw=False), fde_field),
                                                  indexing_threshold_kb=1))
    store.upsert("lib", [PointData(pid(i), {"kind": KIND_PAGE, "doc_id": "d", "page": i + 1},
                                   dense={FULL: p.tolist(), FDE: fdes[i].tolist()})
                         for i, p in enumerate(pages)])
    store.optimize("lib")  # builds the quantized copy (Qdrant Edge builds it only here)
    if quant and isinstance(store, EdgeStore):  # the copy is built, so the scan below reads it
        copies = [p.read_text() for p in store.root.glob(f"lib/shard/segments/*/vector_storage-{FDE}/quantized.config.json")]
        assert copies and all(("turbo" if quant == "turbo2" else "scalar") in c for c in copies)
    exhaustive = store.search_multivector("lib", q.tolist(), Where(), limit, full_field=FULL)
    assert ranking(exhaustive)[0] == pid(7)
    hits = store.search_multivector("lib", q.tolist(), Where(), limit, full_field=FULL, pooled_field=FDE,
                                    prefetch_query=qf.tolist(), prefetch_limit=limit)
    by_dot = [int(i) for i in np.argsort(-(fdes @ qf), kind="stable")[:n_candidates]]
    assert long in by_dot and 7 not in by_dot
    got = [int(uuid.UUID(h)) - 1 for h in ranking(hits)]
    if quant is None:
        assert ranking(hits) == expected(q, pages, by_dot)[:limit]
    else:
        # The quantized copy picks the candidates by its own scores (2x oversampled, then the
        # originals keep the best): every hit comes from the oversampled top by inner product,
        # and they are ranked by exact MaxSim.
        pool = np.argsort(-(fdes @ qf), kind="stable")[: int(FDE_OVERSAMPLING * n_candidates)].tolist()
        assert set(got) <= set(pool) and 7 not in got
        assert ranking(hits) == expected(q, pages, got)
        assert len(set(ranking(hits)) & set(expected(q, pages, by_dot)[:limit])) >= limit - 1
    if quant != "scalar":
        assert pid(long) in ranking(hits)
    # else: int8 clips every component at the 0.99 quantile of all of them, so the 25x-long
    # encoding loses most of its length in the copy and falls out of the oversampled top (it
    # does on these pages); TurboQuant keeps each vector's norm apart, one reason it is the
    # embedded default.
    want = maxsim_many(q, pages)
    for h in hits:  # scores are exact MaxSim on the full vectors
        assert h.score == pytest.approx(want[int(uuid.UUID(h.id)) - 1], abs=1e-4)
    with pytest.raises(ValueError, match="NaN"):
        store.search_multivector("lib", q.tolist(), Where(), limit, full_field=FULL, pooled_field=FDE,
                                 prefetch_query=[float("nan")] * fdes.shape[1])
