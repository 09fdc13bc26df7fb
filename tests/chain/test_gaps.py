"""The knowledge-gap log: misses counted exactly, listed by count, cleared one by one."""

from __future__ import annotations

import threading
from pathlib import Path
import time

import pytest

from ragspine.chain.gaps import GapLog, gap_id
from ragspine.engine import Engine
from ragspine.errors import NotFoundError
from ragspine.store.base import KIND_DOC, Where


@pytest.fixture
def lib(engine: Engine) -> Engine:
    engine.create_library("lib")
    engine.ingest_text("lib", "d", "Revenue grew in Asia.", {"region": "asia"})
    return engine


def search(engine: Engine, query: str, **kw: object) -> object:
    return engine.search({"query": query, "libraries": ["lib"], "mode": "bm25", **kw})


def test_a_miss_is_recorded_with_its_filters_and_a_hit_is_not(lib: Engine) -> None:
    search(lib, "revenue")
    assert lib.gaps.list("lib") == []
    search(lib, "Quantum   GRAVITY")
    search(lib, "quantum gravity")
    search(lib, "revenue", filters=[{"field": "region", "op": "eq", "value": "europe"}])
    gaps = lib.gaps.list("lib")
    assert [(g["query"], g["hit_count"], g["filters"]) for g in gaps] == [
        ("quantum gravity", 2, []),
        ("revenue", 1, [{"field": "region", "op": "eq", "value": "europe"}]),
    ]
    assert gaps[0]["gap_id"] == gap_id("quantum gravity", [])
    assert gaps[0]["first_seen"] <= gaps[0]["last_seen"]
    assert gaps[0]["reason"] == "no_hits"


class SlowReads:
    """The engine's store, with each read taking 2 ms: a count read by two threads before
    either writes is lost unless the log serialises them."""

    def __init__(self, store: object) -> None:
        self._store = store

    def retrieve(self, *a: object, **kw: object) -> object:
        out = self._store.retrieve(*a, **kw)  # type: ignore[attr-defined]
        time.sleep(0.002)
        return out

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_concurrent_identical_misses_count_exactly(lib: Engine) -> None:
    threads, per_thread = 8, 5
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    log = GapLog(SlowReads(lib.store), lib.libraries)  # type: ignore[arg-type]

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                log.record("lib", "missing metric", [], "no_hits")
        except BaseException as e:  # surfaced below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert [g["hit_count"] for g in lib.gaps.list("lib")] == [threads * per_thread]


def test_list_order_delete_and_clear(lib: Engine) -> None:
    for q, n in (("alpha", 1), ("beta", 3), ("gamma", 2)):
        for _ in range(n):
            lib.gaps.record("lib", q, [], "no_hits")
    assert [g["query"] for g in lib.gaps.list("lib")] == ["beta", "gamma", "alpha"]
    assert [g["query"] for g in lib.gaps.list("lib", limit=1)] == ["beta"]
    lib.gaps.delete("lib", gap_id("beta", []))
    assert [g["query"] for g in lib.gaps.list("lib")] == ["gamma", "alpha"]
    with pytest.raises(NotFoundError):
        lib.gaps.delete("lib", gap_id("beta", []))
    with pytest.raises(NotFoundError):
        lib.gaps.delete("lib", "not-a-uuid")
    assert lib.gaps.clear("lib") == 2
    assert lib.gaps.list("lib") == []


def test_the_gap_route_cannot_delete_other_points(lib: Engine) -> None:
    doc_point = lib.store.scroll("lib", Where(kind=KIND_DOC))[0].id
    with pytest.raises(NotFoundError):
        lib.gaps.delete("lib", doc_point)
    assert [d["doc_id"] for d in lib.documents("lib")] == ["d"]


def test_gaps_go_with_their_library(lib: Engine) -> None:
    search(lib, "quantum gravity")
    lib.delete_library("lib")
    lib.create_library("lib")
    assert lib.gaps.list("lib") == []


def test_the_gap_log_can_be_turned_off(data_dir: Path) -> None:
    from ragspine.config import Settings

    eng = Engine(Settings(data_dir=data_dir, gap_log=False))
    try:
        eng.create_library("lib")
        eng.search({"query": "quantum gravity", "libraries": ["lib"]})
        assert eng.store.count("lib", Where(kind="gap")) == 0
    finally:
        eng.close()


def test_misses_on_several_replicas_count_exactly() -> None:
    """Four replicas (their own GapLog and in-process locks) over one Qdrant, reads slowed so
    that counts are read by several before any writes: every miss is counted once."""
    from qdrant_client import QdrantClient

    from ragspine.catalog import Libraries
    from ragspine.scoring.bm25 import BM25Params
    from ragspine.store.server import ServerStore

    client = QdrantClient(":memory:")
    Libraries(ServerStore(client), BM25Params()).create("lib")
    logs = []
    for _ in range(4):
        store = ServerStore(client)
        logs.append(GapLog(SlowReads(store), Libraries(store, BM25Params())))  # type: ignore[arg-type]
    barrier = threading.Barrier(len(logs))
    errors: list[BaseException] = []

    def replica(log: GapLog) -> None:
        try:
            barrier.wait()
            for _ in range(6):
                log.record("lib", "missing metric", [], "no_hits")
        except BaseException as e:  # surfaced below
            errors.append(e)

    ts = [threading.Thread(target=replica, args=(log,)) for log in logs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert [g["hit_count"] for g in logs[0].list("lib")] == [4 * 6]


def test_a_landed_increment_built_on_by_another_replica_counts_once() -> None:
    """Replica B's miss lands between replica A's conditional write and A's read-back of it:
    A's write did land (B built on it), so A must not count its miss again."""
    from qdrant_client import QdrantClient

    from ragspine.catalog import Libraries
    from ragspine.chain.gaps import gap_id
    from ragspine.scoring.bm25 import BM25Params
    from ragspine.store.server import ServerStore

    client = QdrantClient(":memory:")
    sa, sb = ServerStore(client), ServerStore(client)
    la, lb = Libraries(sa, BM25Params()), Libraries(sb, BM25Params())
    la.create("lib")
    ga, gb = GapLog(sa, la), GapLog(sb, lb)
    ga.record("lib", "q", [], "no_hits")
    api, armed = sa._api, [True]

    class BeforeReadBack:  # B's miss is recorded just before A reads its own write back
        def __getattr__(self, attr: str) -> object:
            fn = getattr(api, attr)
            if attr != "retrieve":
                return fn

            def call(*a: object, **kw: object) -> object:
                sel = kw.get("with_payload")
                if armed[0] and getattr(sel, "include", None) == ["_put"]:  # put_if's read-back
                    armed[0] = False
                    gb.record("lib", "q", [], "no_hits")
                return fn(*a, **kw)
            return call

    sa._api = BeforeReadBack()  # type: ignore[assignment]
    ga.record("lib", "q", [], "no_hits")
    assert not armed[0]  # the interleaving happened
    assert sa.retrieve("lib", [gap_id("q", [])])[0].payload["hit_count"] == 3


def test_a_miss_that_never_wins_its_write_gives_up_with_a_warning(lib: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """A conditional write that loses every try (other writers always first) stops after
    MAX_RECORD_TRIES with a warning instead of looping forever; the search is not failed."""
    from ragspine.chain.gaps import MAX_RECORD_TRIES

    class AlwaysBeaten:
        def __init__(self, store: object) -> None:
            self._store, self.tries = store, 0

        def put_if(self, *a: object, **kw: object) -> bool:
            self.tries += 1
            return False

        def __getattr__(self, name: str) -> object:
            return getattr(self._store, name)

    store = AlwaysBeaten(lib.store)
    log = GapLog(store, lib.libraries)  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="ragspine.chain.gaps"):
        log.record("lib", "contested", [], "no_hits")
    assert store.tries == MAX_RECORD_TRIES
    assert "was not counted" in caplog.text
    assert lib.gaps.list("lib") == []
