"""int8 page multivectors kept beside an Edge shard (:mod:`ragspine.store.columns`).

The expected rankings and scores come from Qdrant's own MaxSim on a float32 field holding the
same values: the test pages are int8-exact (codes times a power-of-two scale, every token with
a code of +-127), so storing them as int8 loses nothing and the two must agree to float
rounding.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import uuid
from pathlib import Path

import numpy as np
import pytest

from ragspine.config import Settings
from ragspine.errors import StoreError
from ragspine.scoring.multivector import maxsim_many
from ragspine.scoring.muvera import Muvera, MuveraParams
from ragspine.store.base import KIND_PAGE, CollectionSpec, DenseField, PointData, Where
from ragspine.store.columns import MultivectorColumn
from ragspine.store.edge import EdgeStore
from ragspine.store.server import ServerStore

D = 16
FULL, REF, FDE = "page_full", "page_ref", "page_fde"


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def exact_page(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, D)`` int8-exact tokens: codes in -127..127 with one +-127 per token, times 2^-k."""
    codes = rng.integers(-127, 128, size=(n, D)).astype(np.float32)
    codes[np.arange(n), rng.integers(0, D, size=n)] = rng.choice([-127.0, 127.0], size=n)
    return (codes * np.float32(2.0 ** -int(rng.integers(7, 10)))).astype(np.float32)


@pytest.fixture
def lib(tmp_path: Path):  # noqa: ANN201 - yields (store, pages, fdes, muvera)
    rng = np.random.default_rng(3)
    pages = [exact_page(rng, int(rng.integers(1, 40))) for _ in range(60)]
    enc = Muvera(MuveraParams(dim=D, k_sim=2, dim_proj=4, r_reps=3))
    fdes = [enc.document(p) for p in pages]
    store = EdgeStore(tmp_path)
    store.create_collection("lib", CollectionSpec(dense=(
        DenseField(FULL, D, multivector=True, hnsw=False, datatype="int8"),
        DenseField(REF, D, multivector=True, hnsw=False),
        DenseField(FDE, fdes[0].shape[0], distance="dot", hnsw=False),
    )))
    store.upsert("lib", [PointData(pid(i), {"kind": KIND_PAGE, "doc_id": f"d{i % 3}", "page": i + 1},
                                   dense={FULL: p, REF: p.tolist(), FDE: fdes[i].tolist()})
                         for i, p in enumerate(pages)])
    try:
        yield store, pages, fdes, enc
    finally:
        store.close()


def ids(hits: list) -> list[str]:  # noqa: ANN001 - list[Hit]
    return [h.id for h in hits]


def test_int8_column_ranks_and_scores_as_qdrant_maxsim_on_the_same_values(lib, tmp_path: Path) -> None:
    store, pages, fdes, enc = lib
    assert not any(p.name.startswith(FULL) for p in (tmp_path / "libraries" / "lib" / "shard").rglob("*"))
    rng = np.random.default_rng(4)
    for trial in range(5):
        q = rng.normal(size=(int(rng.integers(1, 6)), D)).astype(np.float32)
        for where in (Where(), Where(doc_id="d1")):
            mine = store.search_multivector("lib", q.tolist(), where, 60, full_field=FULL)
            ref = store.search_multivector("lib", q.tolist(), where, 60, full_field=REF)
            assert ids(mine) == ids(ref) and len(mine) == (60 if where.doc_id is None else 20)
            np.testing.assert_allclose([h.score for h in mine], [h.score for h in ref], rtol=1e-5, atol=1e-5)
            assert mine[0].payload == ref[0].payload
        # With a first stage: the same candidates (the inner-product top 20), rescored alike.
        staged = {f: store.search_multivector("lib", q.tolist(), Where(), 5, full_field=f, pooled_field=FDE,
                                              prefetch_query=enc.query(q).tolist(), prefetch_limit=20)
                  for f in (FULL, REF)}
        assert ids(staged[FULL]) == ids(staged[REF])
        top20 = set(np.argsort(-(np.stack(fdes) @ enc.query(q)), kind="stable")[:21].tolist())
        assert {int(uuid.UUID(h)) - 1 for h in ids(staged[FULL])} <= top20
    want = maxsim_many(q, pages)
    for h in mine:
        assert h.score == pytest.approx(want[int(uuid.UUID(h.id)) - 1], abs=1e-4)
    got = store.retrieve_vectors("lib", [pid(0), pid(1), "nope"], FULL)
    assert set(got) == {pid(0), pid(1)}
    np.testing.assert_array_equal(got[pid(0)], pages[0])


def test_deletes_remove_the_vectors_from_the_column_file(lib, tmp_path: Path) -> None:
    store, pages, _fdes, _enc = lib
    files = lambda: b"".join(p.read_bytes() for p in (tmp_path / "libraries" / "lib" / "columns").iterdir())  # noqa: E731
    marker = np.int8([127, -127, 5, 99, -3, 17, 42, -88, 1, 2, 3, 4, 5, 6, 7, 8] * 4).tobytes()
    store.upsert("lib", [PointData(pid(100), {"kind": KIND_PAGE, "doc_id": "gone"},
                                   dense={FULL: np.frombuffer(marker, np.int8).reshape(4, D).astype(np.float32)})])
    store.flush("lib")
    assert marker in files()  # the check below can fail
    store.delete("lib", Where(doc_id="gone"))
    store.delete_ids("lib", [pid(0)])
    assert store.retrieve_vectors("lib", [pid(100), pid(0), pid(1)], FULL).keys() == {pid(1)}
    store.optimize("lib")
    assert marker not in files()
    hits = store.search_multivector("lib", [[1.0] * D], Where(), 100, full_field=FULL)
    assert {h.id for h in hits} == {pid(i) for i in range(1, 60)}


def test_optimize_removes_vectors_the_shard_never_got(lib, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, _pages, _fdes, _enc = lib
    col = store._cols("lib")[FULL]
    col.put([(pid(500), np.eye(2, D, dtype=np.float32))])  # as if the shard write had failed
    assert store.retrieve_vectors("lib", [pid(500)], FULL)  # readable by id, found by no search
    assert pid(500) not in ids(store.search_multivector("lib", [[1.0] * D], Where(), 100, full_field=FULL))
    with caplog.at_level(logging.INFO, logger="ragspine.store.edge"):
        store.optimize("lib")
    assert "removed 1 orphaned page vectors" in caplog.text
    assert store.retrieve_vectors("lib", [pid(500)], FULL) == {}
    assert len(col) == 60


def test_columns_survive_reopen_and_drop_removes_them(lib, tmp_path: Path) -> None:
    store, pages, _fdes, _enc = lib
    q = [[0.5] * D]
    before = store.search_multivector("lib", q, Where(), 10, full_field=FULL)
    store.close()
    again = EdgeStore(tmp_path)
    try:
        assert [(h.id, h.score) for h in again.search_multivector("lib", q, Where(), 10, full_field=FULL)] == \
               [(h.id, h.score) for h in before]
        with pytest.raises(ValueError, match="no dense vector field 'nope'"):
            again.retrieve_vectors("lib", [pid(0)], "nope")
        again.drop_collection("lib")
        assert not (tmp_path / "libraries" / "lib").exists()
    finally:
        again.close()


def test_column_writes_are_all_or_none_and_checked(tmp_path: Path) -> None:
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=4)
    good = np.eye(3, 4, dtype=np.float32)
    with pytest.raises(ValueError, match="non-finite"):
        col.put([("a", good), ("b", np.full((2, 4), np.nan, dtype=np.float32))])
    with pytest.raises(ValueError, match="has dim 3, the field has 4"):
        col.put([("a", np.ones((2, 3)))])
    with pytest.raises(ValueError, match="no tokens"):
        col.put([("a", np.zeros((0, 4)))])
    assert len(col) == 0  # nothing of the failed batches was written
    col.put([("a", good), ("b", 2 * good)])
    col.put([("a", -good)])  # replaces
    assert sorted(col.ids()) == ["a", "b"]
    np.testing.assert_array_equal(col.get(["a"])["a"], -good)
    assert col.maxsim(np.ones((1, 4)), ["a", "b", "zzz"]) == pytest.approx({"a": -1.0, "b": 2.0})
    with pytest.raises(StoreError, match="already exists"):
        MultivectorColumn(tmp_path / "c.sqlite", dim=4)
    col.close()
    with pytest.raises(StoreError, match="closed"):
        col.get(["a"])
    with pytest.raises(StoreError, match="is missing"):
        MultivectorColumn(tmp_path / "other.sqlite")
    with sqlite3.connect(tmp_path / "c.sqlite") as conn:
        conn.execute("UPDATE meta SET value = 99 WHERE key = 'format'")
    with pytest.raises(StoreError, match="has format 99"):
        MultivectorColumn(tmp_path / "c.sqlite")


def test_int8_is_for_embedded_multivectors_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="int8 storage is for multivectors"):
        DenseField(FULL, D, datatype="int8")
    with pytest.raises(ValueError, match="int8 storage is for multivectors"):
        DenseField(FULL, D, multivector=True, datatype="int8", quantization="scalar")
    server = ServerStore.from_url(":memory:")
    try:
        with pytest.raises(StoreError, match="only the embedded store keeps"):
            server.create_collection("lib", CollectionSpec(dense=(DenseField(FULL, D, multivector=True, datatype="int8"),)))
        assert not server.has_collection("lib")
    finally:
        server.close()


def test_page_vector_dtype_default_follows_the_store(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).page_dtype == "int8"
    assert Settings(data_dir=tmp_path, qdrant_url="http://qdrant:6333").page_dtype == "float16"
    assert Settings(data_dir=tmp_path, page_vector_dtype="float32").page_dtype == "float32"
    with pytest.raises(ValueError, match="int8 needs the embedded store"):
        Settings(data_dir=tmp_path, qdrant_url="http://qdrant:6333", page_vector_dtype="int8")
    with pytest.raises(ValueError, match="the int8 codes are what is scored"):
        Settings(data_dir=tmp_path, page_quantization="scalar")
    assert Settings(data_dir=tmp_path, page_quantization="scalar", page_vector_dtype="float16").page_quantization


def test_first_stage_quantization_default_follows_the_store(tmp_path: Path) -> None:
    """TurboQuant needs Qdrant 1.18; the manifests run 1.17, so a server gets int8."""
    assert Settings(data_dir=tmp_path).fde_quantization == "turbo2"
    assert Settings(data_dir=tmp_path, qdrant_url="http://qdrant:6333").fde_quantization == "scalar"
    assert Settings(data_dir=tmp_path, first_stage_quantization="scalar").fde_quantization == "scalar"
    assert Settings(data_dir=tmp_path, qdrant_url="http://q:6333", first_stage_quantization="turbo2").fde_quantization \
        == "turbo2"
    with pytest.raises(ValueError, match="first_stage_quantization"):
        Settings(data_dir=tmp_path, first_stage_quantization="binary")


def test_rewrite_drops_garbage_and_a_crash_leaves_nothing_behind(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    ps = [exact_page(rng, 10) for _ in range(8)]
    col = MultivectorColumn(tmp_path / "f.sqlite", dim=D)
    col.put([(pid(i), p) for i, p in enumerate(ps)])
    q = rng.normal(size=(2, D)).astype(np.float32)
    want = {pid(i): float(maxsim_many(q, [p])[0]) for i, p in enumerate(ps)}
    assert col.keep_only([pid(i) for i in range(8)]) == 0
    assert (tmp_path / "f.0.codes").stat().st_size == 80 * D  # under a quarter garbage: kept as is
    assert col.keep_only([pid(i) for i in range(5)]) == 3  # 30 of 80 tokens garbage: rewritten
    assert not (tmp_path / "f.0.codes").exists() and (tmp_path / "f.1.codes").stat().st_size == 50 * D
    got = col.maxsim(q, [pid(i) for i in range(8)])
    assert got == pytest.approx({k: v for k, v in want.items() if k in got}) and len(got) == 5
    # A crash mid-rewrite leaves a generation the index does not name; one between the data and
    # the index write leaves an unreferenced tail. Reopening removes the first and appends
    # after the second.
    (tmp_path / "f.2.codes").write_bytes(b"\1" * 64)
    os.truncate(tmp_path / "f.1.codes", 50 * D + 3 * D)
    col.close()
    again = MultivectorColumn(tmp_path / "f.sqlite")
    assert not (tmp_path / "f.2.codes").exists()
    again.put([(pid(9), ps[7])])
    assert again.maxsim(q, [pid(9), pid(0)]) == pytest.approx({pid(9): want[pid(7)], pid(0): want[pid(0)]})
    assert again.token_count() == 60 and len(again) == 6
    again.close()


def test_a_truncated_column_file_is_named_not_misread(tmp_path: Path) -> None:
    col = MultivectorColumn(tmp_path / "f.sqlite", dim=D)
    col.put([(pid(0), np.eye(3, D, dtype=np.float32)), (pid(1), np.eye(5, D, dtype=np.float32))])
    os.truncate(tmp_path / "f.0.codes", 4 * D)  # page 1 (tokens 3-7) is cut short
    assert col.maxsim(np.ones((1, D)), [pid(0)]) == pytest.approx({pid(0): 1.0})
    with pytest.raises(StoreError, match=r"codes file ends early .* damaged"):
        col.maxsim(np.ones((1, D)), [pid(1)])
    col.close()


@pytest.mark.parametrize("guarded", [True, False])
def test_optimize_does_not_drop_the_vectors_of_a_write_made_while_it_runs(lib, monkeypatch: pytest.MonkeyPatch,
                                                                          guarded: bool) -> None:
    """optimize() lists the shard's live ids, then removes every column entry not on the list.
    A page written between the two (column, then shard) is not on the list but is in the
    column: without the per-library column lock its vectors would go and the page would be
    found by no search. The unguarded run shows the lock is what prevents it."""
    import threading

    store, _pages, _fdes, _enc = lib
    col = store._cols("lib")[FULL]
    if not guarded:
        monkeypatch.setattr(store._columns, "lock", lambda name: threading.Lock())  # a fresh lock: no exclusion
    listed, written = threading.Event(), threading.Event()
    keep_only = col.keep_only

    def slow_keep_only(live):  # noqa: ANN001, ANN202 - wraps MultivectorColumn.keep_only
        listed.set()  # the live ids are taken; let the writer in
        written.wait(timeout=0.5)  # guarded: the writer is blocked, this times out
        return keep_only(live)

    monkeypatch.setattr(col, "keep_only", slow_keep_only)
    new = np.eye(3, D, dtype=np.float32)

    def write() -> None:
        listed.wait(timeout=5)
        store.upsert("lib", [PointData(pid(700), {"kind": KIND_PAGE, "doc_id": "new", "page": 1}, dense={FULL: new})])
        written.set()

    writer = threading.Thread(target=write)
    writer.start()
    store.optimize("lib")
    writer.join(timeout=10)
    assert written.is_set()
    assert store.retrieve("lib", [pid(700)])  # the shard has the page either way
    found = pid(700) in ids(store.search_multivector("lib", [[0.0] * (D - 1) + [1.0]], Where(), 100, full_field=FULL))
    has_vectors = bool(store.retrieve_vectors("lib", [pid(700)], FULL))
    assert (found, has_vectors) == ((True, True) if guarded else (False, False))
