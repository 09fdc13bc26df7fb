"""The device copy of an int8 page column (:mod:`ragspine.store.resident`), run here on torch's
CPU device: the same code a GPU runs, so its arithmetic and bookkeeping are checked without
one. Expected scores come from numpy (:meth:`MultivectorColumn.maxsim`, itself checked against
Qdrant's MaxSim in test_columns.py); the device holds float16, so they agree to ~1e-2."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from ragspine.store.base import KIND_PAGE, CollectionSpec, DenseField, PointData, Where
from ragspine.store.columns import MultivectorColumn
from ragspine.store.edge import EdgeStore
from ragspine.store.resident import ResidentColumn, resolve_device

torch = pytest.importorskip("torch")

D = 16


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def pages(rng: np.random.Generator, n: int, length: int | None = None) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        x = rng.normal(size=(length or int(rng.integers(1, 30)), D))
        out.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    return out


@pytest.mark.parametrize("length", [None, 12], ids=["ragged", "uniform"])
def test_device_scores_equal_the_cpu_column(tmp_path: Path, length: int | None) -> None:
    rng = np.random.default_rng(8)
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=D)
    ps = pages(rng, 50, length)
    col.put([(pid(i), p) for i, p in enumerate(ps)])
    res = ResidentColumn(col, "cpu")
    assert res.maxsim(np.ones((1, D)), [pid(0)]) is None  # not built yet: the CPU path serves
    res.build()
    assert res.ready.is_set() and res.error is None
    q = rng.normal(size=(4, D)).astype(np.float32)
    want = MultivectorColumn.maxsim(col, q, [pid(i) for i in range(50)])  # numpy (no resident attached)
    some = [pid(i) for i in (3, 7, 7, 41)] + ["absent"]
    got = res.maxsim(q, some)
    assert set(got) == {pid(3), pid(7), pid(41)}
    for k, v in got.items():
        assert v == pytest.approx(want[k], abs=2e-2)
    ids, scores = res.maxsim_all(q)
    assert ids == [pid(i) for i in range(50)]
    np.testing.assert_allclose(scores, [want[i] for i in ids], atol=2e-2)
    assert np.argmax(scores) == int(np.argmax([want[i] for i in ids]))


def test_writes_during_and_after_the_build_are_not_lost(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=D)
    ps = pages(rng, 40, 10)
    col.put([(pid(i), p) for i, p in enumerate(ps[:30])])
    res = ResidentColumn(col, "cpu")
    gate, resume = threading.Event(), threading.Event()
    real = col.iter_rows

    def slow(batch: int):  # noqa: ANN202 - a generator: the build pauses after its first batch
        for i, rows in enumerate(real(5)):
            yield rows
            if i == 0:
                gate.set()
                resume.wait(10)

    col.iter_rows = slow  # type: ignore[method-assign]
    col.attach(res)
    t = res.start()
    assert gate.wait(10)
    col.put([(pid(i), p) for i, p in enumerate(ps[30:], start=30)])  # while building: queued
    col.delete([pid(0), pid(29)])
    resume.set()
    t.join(10)
    assert res.ready.is_set()
    col.put([(pid(5), ps[39])])  # after: replaces page 5's vectors
    col.delete([pid(6)])
    ids, scores = res.maxsim_all(ps[39][:2])
    want_ids = sorted({pid(i) for i in range(40)} - {pid(0), pid(29), pid(6)})
    assert sorted(ids) == want_ids
    by_id = dict(zip(ids, scores))
    assert by_id[pid(5)] == pytest.approx(by_id[pid(39)], abs=1e-3)  # same vectors now
    want = MultivectorColumn.maxsim(col, ps[39][:2], want_ids)
    for k in want_ids:
        assert by_id[k] == pytest.approx(want[k], abs=2e-2)


def test_a_library_over_the_memory_budget_stays_on_the_cpu(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=D)
    col.put([(pid(0), np.eye(20, D, dtype=np.float32))])
    res = ResidentColumn(col, "cpu", budget_bytes=20 * D * 2 - 1)  # one byte short
    col.attach(res)
    with caplog.at_level(logging.WARNING, logger="ragspine.store.resident"):
        res.build()
    assert res.error is not None and "MemoryError" in res.error and "stays on the CPU" in caplog.text
    assert res.maxsim(np.ones((1, D)), [pid(0)]) is None
    assert col.maxsim(np.ones((1, D)), [pid(0)]) == pytest.approx({pid(0): 1.0})  # numpy served it
    ok = ResidentColumn(col, "cpu", budget_bytes=20 * D * 2)
    ok.build()
    assert ok.error is None


def test_replacing_pages_compacts_the_device_copy(tmp_path: Path) -> None:
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=D)
    res = ResidentColumn(col, "cpu")
    res.build()
    col.attach(res)
    x = np.eye(4, D, dtype=np.float32)
    for r in range(3):
        col.put([(pid(0), (r + 1) * x), (pid(1), x)])
    assert res._used == 24  # 3 writes of 2 pages of 4 tokens; garbage below the threshold
    res._compact()
    assert res._used == 8 and res.maxsim(np.ones((1, D)), [pid(0), pid(1)]) == pytest.approx({pid(0): 3.0, pid(1): 1.0})


def test_edge_store_scores_on_the_device_once_ready(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    ps = pages(rng, 30, 8)
    spec = CollectionSpec(dense=(DenseField("full", D, multivector=True, hnsw=False, datatype="int8"),))
    cpu = EdgeStore(tmp_path / "a")
    dev = EdgeStore(tmp_path / "b", exact_device="cpu")
    try:
        for s in (cpu, dev):
            s.create_collection("lib", spec)
            s.upsert("lib", [PointData(pid(i), {"kind": KIND_PAGE}, dense={"full": p}) for i, p in enumerate(ps)])
        res = dev._cols("lib")["full"].resident
        assert res is not None and res.ready.wait(10) and res.error is None
        calls = []
        real = res.maxsim
        res.maxsim = lambda q, ids: calls.append(len(ids)) or real(q, ids)  # type: ignore[method-assign]
        q = rng.normal(size=(3, D)).tolist()
        a = cpu.search_multivector("lib", q, Where(), 10, full_field="full")
        b = dev.search_multivector("lib", q, Where(), 10, full_field="full")
        assert calls == [30]  # every page, scored on the device
        assert [h.id for h in a][:3] == [h.id for h in b][:3]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=2e-2)
        assert cpu._cols("lib")["full"].resident is None
    finally:
        cpu.close()
        dev.close()


def test_resolve_device() -> None:
    from ragspine.config import Settings

    assert Settings(exact_device="cuda:1").exact_device == "cuda:1"
    with pytest.raises(ValueError, match="exact_device must be auto, numpy"):
        Settings(exact_device="cdua")
    assert resolve_device("numpy") is None
    assert resolve_device("cuda:1") == "cuda:1"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else None)


def test_garbage_over_the_live_pages_rewrites_the_copy_by_itself(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import ragspine.store.resident as resident

    monkeypatch.setattr(resident, "COMPACT_SLACK_TOKENS", 0)
    col = MultivectorColumn(tmp_path / "c.sqlite", dim=D)
    res = ResidentColumn(col, "cpu")
    res.build()
    col.attach(res)
    x = np.eye(4, D, dtype=np.float32)
    col.put([(pid(0), x), (pid(1), x)])
    col.put([(pid(0), 2 * x)])  # 12 tokens used, 8 live: under 2 x live
    assert res._used == 12
    col.put([(pid(0), 3 * x)])  # 16 used, not over 2 x 8 live: kept
    col.put([(pid(0), 4 * x)])  # 20 used > 16: rewritten to the 8 live tokens
    assert res._used == 8
    assert res.maxsim(np.ones((1, D)), [pid(0), pid(1)]) == pytest.approx({pid(0): 4.0, pid(1): 1.0})
