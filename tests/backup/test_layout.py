"""A library's layout (``ragspine.catalog.layout``): shards, copies and on-disk vector fields,
chosen at creation (REST, CLI, Python client, settings), recorded, passed to the store, and
followed by a restore on either backend."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import backup_kit
import pytest
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient
from ragspine.catalog.layout import SERVER_ON_DISK, Layout, plan_layout
from ragspine.catalog.libraries import PAGE_FULL
from ragspine.engine import Engine
from ragspine.errors import ConflictError, InvalidRequestError
from ragspine.serving.app import create_app
from ragspine.store.base import DenseField
from ragspine.errors import StoreError
from ragspine.store.server import ServerStore

FIELDS = (DenseField("page_full", 16, multivector=True, hnsw=False), DenseField("page_pooled", 16, multivector=True),
          DenseField("dense_chunk", 24))


class SpyClient(QdrantClient):
    """The in-process Qdrant double, remembering what each collection was created with (it
    keeps ``on_disk`` but not the shard counts, which only a cluster has)."""

    created: dict[str, dict[str, Any]]

    def create_collection(self, collection_name: str, **kw: Any) -> bool:  # type: ignore[override]
        self.created[collection_name] = kw
        return super().create_collection(collection_name, **kw)


def spy_store() -> tuple[ServerStore, SpyClient]:
    client = SpyClient(":memory:")
    client.created = {}
    return ServerStore(client), client


def test_defaults_by_backend() -> None:
    assert SERVER_ON_DISK == {PAGE_FULL}
    from ragspine.catalog.layout import VECTOR_FIELDS
    from ragspine.catalog.libraries import DENSE_CHUNK, PAGE_FDE, PAGE_POOLED

    assert set(VECTOR_FIELDS) == {PAGE_FULL, PAGE_POOLED, PAGE_FDE, DENSE_CHUNK}
    assert plan_layout(FIELDS, "embedded") == Layout()
    server = plan_layout(FIELDS, "server")
    assert server == Layout(on_disk={"page_full": True})
    assert [f.on_disk for f in server.fields(FIELDS)] == [True, False, False]  # the first stage stays in RAM
    asked = plan_layout(FIELDS, "server", shard_number=6, replication_factor=2, write_consistency_factor=2,
                        on_disk={"page_full": False, "dense_chunk": True}, defaults={"shard_number": 3})
    assert asked == Layout(6, 2, 2, {"dense_chunk": True})
    # The settings' counts apply on a server only, and a request's own win.
    defaults = {"shard_number": 3, "replication_factor": 2, "write_consistency_factor": None}
    assert plan_layout(FIELDS, "server", defaults=defaults) == Layout(3, 2, None, {"page_full": True})
    assert plan_layout(FIELDS, "embedded", defaults=defaults) == Layout()
    assert plan_layout(FIELDS, "embedded", shard_number=1, replication_factor=1).shard_number is None


@pytest.mark.parametrize("kw, error, says", [
    ({"shard_number": 2}, ConflictError, "shard_number 2: the embedded store keeps one copy in one shard"),
    ({"replication_factor": 3}, ConflictError, "replication_factor 3: the embedded store"),
    ({"shard_number": 0}, InvalidRequestError, "shard_number must be a whole number from 1 to 1000, got 0"),
    ({"replication_factor": True}, InvalidRequestError, "replication_factor must be a whole number"),
    ({"on_disk": {"page_ful": True}}, InvalidRequestError, "on_disk names ['page_ful']; vector fields are "
                                                           "page_full, page_pooled, page_fde, dense_chunk"),
    ({"on_disk": {"page_fde": True}}, ConflictError, "on_disk names ['page_fde'], not vector fields of this "
                                                     "library (its fields: page_full, page_pooled, dense_chunk)"),
])
def test_a_layout_the_embedded_store_cannot_have_is_named(kw: dict[str, Any], error: type, says: str) -> None:
    """Malformed: 422. Not possible as this server is configured (its store, its models): 409."""
    with pytest.raises(error) as exc:
        plan_layout(FIELDS, "embedded", **kw)
    assert says in exc.value.detail


def test_a_write_cannot_wait_for_more_copies_than_there_are() -> None:
    with pytest.raises(InvalidRequestError, match="write_consistency_factor 3 is more than the 2 copies"):
        plan_layout(FIELDS, "server", replication_factor=2, write_consistency_factor=3)


@pytest.mark.parametrize("raw", [{"shard_number": "6"}, {"on_disk": {"page_full": "yes"}}, {"on_disk": ["page_full"]},
                                 {"replication_factor": 0}, "nope"])
def test_a_hostile_recorded_layout_is_refused(raw: Any) -> None:
    with pytest.raises(ValueError):
        Layout.from_json(raw)


def test_a_server_library_is_created_with_its_layout_and_keeps_it(tmp_path: Path) -> None:
    store, client = spy_store()
    eng = Engine(backup_kit.settings(tmp_path, shard_number=4, replication_factor=2, page_vector_dtype="float16"), store=store,
                 models=backup_kit.models())
    try:
        rec = eng.create_library("a")
        assert rec.layout == {"shard_number": 4, "replication_factor": 2, "write_consistency_factor": None,
                              "on_disk": {"page_full": True}}
        kw = client.created["ragspine__a"]
        assert (kw["shard_number"], kw["replication_factor"], kw["write_consistency_factor"]) == (4, 2, None)
        params = client.get_collection("ragspine__a").config.params.vectors
        assert params["page_full"].on_disk is True
        assert all(not v.on_disk for k, v in params.items() if k != "page_full")  # first stage, dense: RAM
        assert eng.libraries.get("a").layout == rec.layout  # recorded
        eng.create_library("b", shard_number=1, on_disk={"page_full": False, "dense_chunk": True})
        kw = client.created["ragspine__b"]
        assert (kw["shard_number"], kw["replication_factor"]) == (1, 2)
        params = client.get_collection("ragspine__b").config.params.vectors
        assert (params["page_full"].on_disk, params["dense_chunk"].on_disk) == (None, True)
        # Searches and ingest work over it as over any library.
        eng.ingest_text("a", "d1", "harbour revenue grew")
        assert eng.search({"query": "harbour", "libraries": ["a"], "mode": "bm25"}).hits
    finally:
        eng.close()


def test_the_embedded_store_refuses_shards_even_when_asked_directly(tmp_path: Path) -> None:
    from ragspine.store.base import CollectionSpec
    from ragspine.store.edge import EdgeStore

    store = EdgeStore(tmp_path)
    try:
        with pytest.raises(StoreError, match="needs a Qdrant server"):
            store.create_collection("x", CollectionSpec(replication_factor=2))
        assert not store.has_collection("x")
        store.create_collection("y", CollectionSpec(dense=(DenseField("dense_chunk", 8, on_disk=True),)))
        assert store.has_collection("y")
    finally:
        store.close()


def test_a_restore_follows_the_layout_on_either_backend(tmp_path: Path) -> None:
    store, client = spy_store()
    src = Engine(backup_kit.settings(tmp_path / "src", page_vector_dtype="float16"), store=store, models=backup_kit.models())
    try:
        src.create_library("lib", shard_number=3, replication_factor=2, on_disk={"dense_chunk": True})
        src.ingest_text("lib", "d1", "harbour revenue grew")
        buf = io.BytesIO()
        src.backup(["lib"], buf)
    finally:
        src.close()
    path = tmp_path / "lib.rsbak"
    path.write_bytes(buf.getvalue())
    # Into another server: the same shards, copies and on-disk fields.
    store2, client2 = spy_store()
    dst = Engine(backup_kit.settings(tmp_path / "dst", page_vector_dtype="float16"), store=store2, models=backup_kit.models())
    try:
        dst.restore(path)
        kw = client2.created["ragspine__lib"]
        assert (kw["shard_number"], kw["replication_factor"]) == (3, 2)
        params = client2.get_collection("ragspine__lib").config.params.vectors
        assert (params["page_full"].on_disk, params["dense_chunk"].on_disk) == (True, True)
        assert dst.libraries.get("lib").layout["shard_number"] == 3
    finally:
        dst.close()
    # Into the embedded store: one shard, one copy; the on-disk choices kept.
    emb = Engine(backup_kit.settings(tmp_path / "emb"), models=backup_kit.models())
    try:
        emb.restore(path)
        assert emb.libraries.get("lib").layout == {"shard_number": None, "replication_factor": None,
                                                   "write_consistency_factor": None,
                                                   "on_disk": {"page_full": True, "dense_chunk": True}}
        assert emb.search({"query": "harbour", "libraries": ["lib"], "mode": "bm25"}).hits
    finally:
        emb.close()


def test_rest_and_cli_and_client_set_the_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragspine.cli.main import main

    settings = backup_kit.settings(tmp_path / "rest")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/v1/libraries", json={"name": "a", "shard_number": 2})
        assert r.status_code == 409 and "embedded store keeps one copy" in r.json()["detail"]
        r = c.post("/v1/libraries", json={"name": "a", "on_disk": {"page_full": True}})
        assert r.status_code == 409 and "not vector fields of this library" in r.json()["detail"]
        r = c.post("/v1/libraries", json={"name": "a", "on_disk": {"page_ful": True}})
        assert r.status_code == 422
        r = c.post("/v1/libraries", json={"name": "a", "replication_factor": 0})
        assert r.status_code == 422
        r = c.post("/v1/libraries", json={"name": "a", "shard_number": 1})
        assert r.status_code == 201 and r.json()["layout"]["on_disk"] == {}
        assert c.get("/v1/libraries").json()["libraries"][0]["name"] == "a"  # refused ones were not created
    with pytest.raises(SystemExit) as exit_:
        main(["--data-dir", str(tmp_path / "cli"), "libraries", "--create", "b", "--shards", "2"])
    assert exit_.value.code != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "ragspine: error: shard_number 2: the embedded store keeps one copy in one shard; shards and replicas "
        "need a Qdrant server (RAGSPINE_QDRANT_URL)")
    assert main(["--data-dir", str(tmp_path / "cli"), "libraries", "--create", "b", "--shards", "1"]) == 0
    assert capsys.readouterr().out.strip() == "created library 'b'"
    # The Python client sends what the REST model accepts, and checks it first.
    from ragspine.client import _calls

    call = _calls.create_library("c", shard_number=6, replication_factor=2, write_consistency_factor=None,
                                 on_disk={"page_full": False})
    assert call.json == {"name": "c", "shard_number": 6, "replication_factor": 2, "on_disk": {"page_full": False}}
    with pytest.raises(ValueError):
        _calls.create_library("c", shard_number=0)
