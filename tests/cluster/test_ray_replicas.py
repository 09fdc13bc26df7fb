"""Two Ingress replicas under CPU Ray over one shared Qdrant (the double in a Ray actor, see
bench/qdrant_actor.py, which bench/serve_load.py --replicas uses too): uploads and job polls spread over both replicas, and an Ingress replica killed with
``ray.kill`` in the middle of an ingest. Nothing is lost: every upload ends ``succeeded`` with
its document whole, or ``failed`` (``replica-lost``) with nothing of it visible; the library
stays writable (the next writer takes the dead replica's lease over and rolls back its staged
pages) and no point is left over."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.serve", reason="needs ragspine[serve]")

import httpx  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
_SERVING = str(Path(__file__).resolve().parents[1] / "serving")
_BENCH = str(Path(__file__).resolve().parents[2] / "bench")
for p in (_HERE, _SERVING, _BENCH):
    if p not in sys.path:
        sys.path.insert(0, p)

import ray_kit  # noqa: E402
import qdrant_actor as ray_store  # noqa: E402
from pdfs import make_pdf, words  # noqa: E402
from serving_kit import clean_settings  # noqa: E402

from ragspine.store.base import KIND_CHUNK, KIND_PAGE, Where  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

APP = "ragspine-replicas"
LIB = "reports"


def report(n_pages: int, word: str) -> bytes:
    return make_pdf([f"{word} page p{i} {words(40, word)}" for i in range(1, n_pages + 1)])


def upload(client: httpx.Client, doc_id: str, data: bytes) -> dict[str, Any]:
    r = client.post(f"/v1/libraries/{LIB}/documents",
                    files={"file": (f"{doc_id}.pdf", data, "application/pdf")},
                    data={"metadata": f'{{"doc_id": "{doc_id}"}}'})
    assert r.status_code == 202, r.text
    return r.json()


def job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def finished(client: httpx.Client, job_id: str) -> dict[str, Any]:
    return ray_kit.wait_until(lambda: (j := job(client, job_id))["state"] in ("succeeded", "failed") and j,
                              what=f"job {job_id} to finish", every=0.2)


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Any]]:
    import ray
    from ray import serve

    from ragspine.serving import ray_app as ra

    settings = clean_settings(data_dir=tmp_path_factory.mktemp("ray-replicas"), qdrant_url=":memory:",
                              reranker="none", ocr="off", writer_lease_seconds=3, job_stale_seconds=3)
    path = os.pathsep.join([_BENCH, _SERVING, str(Path(_HERE).parent), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             namespace=ray_store.NAMESPACE,
             runtime_env={"worker_process_setup_hook": "qdrant_actor.setup", "env_vars": {"PYTHONPATH": path}})
    try:
        ray_store.QdrantDouble.options(name=ray_store.ACTOR, lifetime="detached").remote()
        port = ray_kit.free_port()
        fixed = {"num_replicas": 2, "health_check_period_s": 1, "health_check_timeout_s": 30}
        ra.start_local(settings, "127.0.0.1", port, name=APP, deployments={"Ingress": fixed})
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            assert client.post("/v1/libraries", json={"name": LIB}).status_code == 201
            yield client, ray_store.connect()
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def ingress_actors() -> dict[int, Any]:
    """pid -> actor handle of every live Ingress replica (from the GCS table: the state API
    needs the dashboard, which this Ray does not start)."""
    import ray
    from ray._private import state

    out = {}
    for a in state.actors().values():
        if a["State"] == "ALIVE" and "Ingress" in (a.get("ActorClassName") or "") and a.get("Name"):
            out[int(a["Pid"])] = ray.get_actor(a["Name"], namespace="serve")
    return out


def check_store(store: Any, expected: dict[str, int]) -> None:
    """Every committed document whole at its active version; nothing else in the store."""
    entries = {r.payload["doc_id"]: r.payload for r in store.scroll(LIB, Where(kind="doc"))}
    assert {d for d, e in entries.items() if e.get("active_version")} == set(expected)
    assert all(not e.get("staging_version") or e.get("staging_version") == e.get("active_version")
               for e in entries.values())
    pts = [p.payload for p in store.scroll(LIB, Where(), fields=["kind", "doc_id", "version"])
           if p.payload.get("kind") in (KIND_PAGE, KIND_CHUNK)]
    assert {p["doc_id"] for p in pts} == set(expected), "points of an uncommitted document"
    for doc_id, pages in expected.items():
        mine = [p for p in pts if p["doc_id"] == doc_id]
        assert {p["version"] for p in mine} == {entries[doc_id]["active_version"]}
        assert sum(1 for p in mine if p["kind"] == KIND_PAGE) == pages


def test_uploads_and_polls_spread_over_two_replicas(two_replicas: tuple[httpx.Client, Any]) -> None:
    client, store = two_replicas
    assert len(ingress_actors()) == 2
    jobs = [upload(client, f"d{i}", report(3, f"word{i}")) for i in range(8)]
    done = [finished(client, j["id"]) for j in jobs]
    assert all(j["state"] == "succeeded" for j in done), done
    ran_on = {j["replica"] for j in done}
    # the proxy spreads requests: with 8 uploads both replicas almost surely took some
    assert len(ran_on) == 2, ran_on
    check_store(store, {f"d{i}": 3 for i in range(8)})
    for i in (0, 7):
        r = client.post("/v1/search", json={"query": f"word{i} p2", "libraries": [LIB], "mode": "bm25"})
        assert r.json()["hits"][0]["doc_id"] == f"d{i}"


def test_a_replica_killed_mid_ingest_loses_nothing(two_replicas: tuple[httpx.Client, Any]) -> None:
    import ray

    client, store = two_replicas
    before = {r.payload["doc_id"]: r.payload.get("pages_indexed")
              for r in store.scroll(LIB, Where(kind="doc")) if r.payload.get("active_version")}
    big = upload(client, "big", report(800, "giant"))  # ingests for seconds: killed midway
    running = ray_kit.wait_until(
        lambda: (j := job(client, big["id"]))["state"] == "running" and j["pages_done"] > 0 and j,
        what="the big ingest to be under way", every=0.05)
    pid = int(running["replica"].rsplit("-", 2)[-2])  # <host>-<pid>-<random>
    victims = ingress_actors()
    assert pid in victims, (pid, list(victims))
    ray.kill(victims[pid], no_restart=False)
    lost = finished(client, big["id"])
    assert lost["state"] == "failed" and lost["error"]["type"] == "/problems/replica-lost", lost
    # the library stays writable: the next write takes the dead lease over and rolls back
    after = finished(client, upload(client, "after", report(2, "later"))["id"])
    assert after["state"] == "succeeded", after
    check_store(store, {**before, "after": 2})
    ray_kit.wait_until(lambda: len(ingress_actors()) == 2, what="Serve to replace the replica")
