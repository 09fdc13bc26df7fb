"""Concurrent query encodings batched into one call (``ragspine.models.batching``), and a
server's query encoders readied: batched and warmed up at start."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ragspine.models.batching import BatchedDenseEncoder, BatchedPageEncoder, QueryBatcher
from ragspine.models.modelset import ModelSet


class SlowUpper:
    """Encodes a list of texts as their upper case, taking ``delay`` a call; remembers calls."""

    def __init__(self, delay: float, fail_on: str | None = None) -> None:
        self.delay = delay
        self.fail_on = fail_on
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, texts: list[str]) -> list[str]:
        with self.lock:
            self.calls.append(list(texts))
        time.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in texts:
            raise ValueError(f"cannot encode {self.fail_on}")
        return [t.upper() for t in texts]


def run_together(batcher: QueryBatcher, queries: list[list[str]]) -> list[Any]:
    out: list[Any] = [None] * len(queries)
    start = threading.Barrier(len(queries))

    def one(i: int) -> None:
        start.wait()
        try:
            out[i] = batcher(queries[i])
        except Exception as exc:  # noqa: BLE001
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return out


def test_an_idle_encoder_runs_a_query_at_once_and_alone() -> None:
    enc = SlowUpper(0.0)
    b = QueryBatcher(enc, max_batch=8)
    assert b(["revenue"]) == ["REVENUE"] and enc.calls == [["revenue"]]
    assert b(["cost"]) == ["COST"] and enc.calls == [["revenue"], ["cost"]]  # nothing waits for company


class Gated(SlowUpper):
    """Its first call waits until the test opens the gate: the queries that arrive meanwhile
    queue up, whatever the machine's speed."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.gate = threading.Event()

    def __call__(self, texts: list[str]) -> list[str]:
        if not self.calls:
            self.gate.wait(30)
        return super().__call__(texts)


def test_queries_that_arrive_during_a_call_share_the_next_calls() -> None:
    enc = Gated()
    b = QueryBatcher(enc, max_batch=8)
    first: list[Any] = []
    t = threading.Thread(target=lambda: first.append(b(["first"])))
    t.start()
    while not b._busy:  # the first call is in the encoder (blocked at the gate)
        time.sleep(0.001)
    queries = [[f"q{i}"] for i in range(12)]  # one text each: the batch sizes do not depend on queue order
    done: list[Any] = [None] * len(queries)
    threads = [threading.Thread(target=lambda i=i: done.__setitem__(i, b(queries[i]))) for i in range(len(queries))]
    for th in threads:
        th.start()
    while len(b._queue) < len(queries):  # every later query is queued behind the first call
        time.sleep(0.001)
    enc.gate.set()
    for th in [t, *threads]:
        th.join(30)
    assert first == [["FIRST"]] and done == [[q.upper() for q in qs] for qs in queries]
    assert enc.calls[0] == ["first"]
    assert [len(c) for c in enc.calls[1:]] == [8, 4]  # 12 queued texts: a full batch, then the rest
    assert b.calls == 3 and b.texts == 13
    two = QueryBatcher(SlowUpper(0.0), max_batch=8)
    assert two(["a", "b"]) == ["A", "B"]  # a caller with several texts gets its own rows


def test_a_failed_call_fails_its_callers_and_not_the_next() -> None:
    enc = SlowUpper(0.05, fail_on="bad")
    b = QueryBatcher(enc, max_batch=64)
    got = run_together(b, [["bad"], ["good"]])
    assert any(isinstance(x, ValueError) for x in got)
    assert b(["later"]) == ["LATER"]  # the batcher keeps working


def test_an_encoder_that_loses_rows_is_an_error() -> None:
    b = QueryBatcher(lambda texts: texts[:-1], max_batch=4)
    with pytest.raises(RuntimeError, match="1 rows for 2 queries"):
        b(["a", "b"])
    with pytest.raises(ValueError):
        QueryBatcher(lambda t: t, max_batch=0)


class Dense:
    model_id, revision, dim = "test/dense", "1", 3

    def __init__(self) -> None:
        self.kinds: list[tuple[str, int]] = []

    def encode(self, texts: list[str], kind: str = "passage") -> np.ndarray:
        self.kinds.append((kind, len(texts)))
        return np.tile(np.arange(3, dtype=np.float32), (len(texts), 1)) + (1.0 if kind == "query" else 0.0)


class Pages:
    model_id, revision, dim = "test/pages", "1", 4

    def __init__(self) -> None:
        self.queries: list[list[str]] = []

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        self.queries.append(list(texts))
        return [np.ones((2, 4), np.float32) * len(t) for t in texts]

    def encode_pages(self, images: list[Any]) -> list[Any]:
        return ["page"] * len(images)


def test_the_wrappers_keep_the_models_identity_and_other_calls() -> None:
    d = BatchedDenseEncoder(Dense())
    q = d.encode(["x", "y"], kind="query")
    assert q.shape == (2, 3) and float(q[0, 0]) == 1.0
    assert float(d.encode(["x"], kind="passage")[0, 0]) == 0.0  # passages bypass the batcher
    assert (d.model_id, d.revision, d.dim) == ("test/dense", "1", 3)
    p = BatchedPageEncoder(Pages())
    assert [float(a[0, 0]) for a in p.encode_queries(["ab", "abc"])] == [2.0, 3.0]
    assert p.encode_pages([1, 2]) == ["page", "page"] and p.dim == 4


def test_a_server_batches_and_warms_its_query_encoders(tmp_path: Path) -> None:
    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.serving.app import create_app

    pages, dense = Pages(), Dense()
    eng = Engine(Settings(data_dir=tmp_path, page_vector_dtype="float32"), models=ModelSet(page=pages, dense=dense))
    try:
        create_app(eng.settings, eng)
        assert isinstance(eng.models.page, BatchedPageEncoder) and isinstance(eng.models.dense, BatchedDenseEncoder)
        assert pages.queries == [["warm up"]] and dense.kinds == [("query", 1)]
        eng.models.serve_queries(16)  # again: wrapped once, warmed again
        assert isinstance(eng.models.page._model, Pages)
    finally:
        eng.close()
    off = ModelSet(page=Pages())
    off.serve_queries(1)  # 1: no batching, still warmed
    assert isinstance(off.page, Pages) and off.page.queries == [["warm up"]]
