"""The Ray Serve app end to end on CPU Ray with tiny models: HTTP ingest and search, the same
rankings as the local engine, and the fallback when a model deployment breaks.

One Serve app for the module (Ray with 2 CPUs, like the laptop it must fit): Ingress,
PageEncoder, QueryEncoder and Reranker deployments with tiny random-weight models. Breaking a
deployment uses its fault drill (the replica fails calls and health checks until Serve replaces
it) or ``ray.kill`` of the replica; each test waits for recovery before it ends, so the next one
starts from a healthy app.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.serve", reason="needs ragspine[serve]")
pytest.importorskip("colpali_engine", reason="needs ragspine[gpu] for the tiny page model")

import httpx  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import ray_kit  # noqa: E402
from pdfs import Page, make_pdf  # noqa: E402
from serving_kit import clean_settings  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

APP = "ragspine-test"
LIB = "reports"
QUERIES = ["revenue growth in Asia", "operating costs", "market share of mobile operators"]

DOCS: dict[str, bytes] = {
    "alpha": make_pdf([
        "Revenue grew by twelve percent in Asia in the third quarter.",
        "Operating costs fell while net income rose; gross margin widened.",
        Page(["Secret merger plan with revenue figures."], header="RESTRICTED"),
    ]),
    "beta": make_pdf([
        "Figure 3: market share of mobile operators by region.",
        "The chart shows quarterly sales by region, with Asia leading growth since 2019.",
    ]),
}


def _settings_kw(data_dir: Path, models: dict[str, Path]) -> dict[str, Any]:
    return {
        "data_dir": data_dir,
        "page_model": str(models["colpali"]),
        "reranker": "cross_encoder",
        "reranker_model": str(models["cross_encoder"]),
        "device": "cpu",
        # A busy 2-core CI box: generous deadlines. Whether a broken replica is still routed to
        # (the call fails at once) or already stopped (the call waits out its deadline), the
        # outcome the tests check is the same.
        "ray_query_deadline_ms": 5000,
        "ray_ingest_deadline_ms": 15000,
    }


def _upload(client: Any, name: str, data: bytes) -> Any:
    return client.post(f"/v1/libraries/{LIB}/documents", params={"wait": "true"},
                       files={"file": (f"{name}.pdf", data, "application/pdf")},
                       data={"metadata": f'{{"doc_id": "{name}"}}'})


def _ranking(client: Any, query: str, mode: str, rerank: bool = False) -> tuple[list[tuple], dict]:
    r = client.post("/v1/search", json={"query": query, "libraries": [LIB], "mode": mode,
                                        "top_k": 10, "rerank": rerank})
    assert r.status_code == 200, r.text
    body = r.json()
    return [(h["doc_id"], h["page"], h["chunk_id"]) for h in body["hits"]], body


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return ray_kit.tiny_models(tmp_path_factory.mktemp("tiny"), "colpali", "cross_encoder")


@pytest.fixture(scope="module")
def ray_app(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    from ray import serve

    from ragspine.serving import ray_app as ra

    settings = clean_settings(**_settings_kw(tmp_path_factory.mktemp("ray-data"), models))
    port = ray_kit.free_port()
    # Fixed single replicas (no autoscaling noise) and fast health checks, so a broken
    # replica is noticed and replaced within seconds.
    fast = {"num_replicas": 1, "health_check_period_s": 1, "health_check_timeout_s": 30}
    deployments = {name: dict(fast) for name in ("PageEncoder", "QueryEncoder", "Reranker")}
    with ray_kit.local_ray(num_cpus=2):
        ra.start_local(settings, "127.0.0.1", port, name=APP, deployments=deployments)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            assert client.post("/v1/libraries", json={"name": LIB}).status_code == 201
            for name, data in DOCS.items():
                r = _upload(client, name, data)
                assert r.status_code == 201, r.text
            yield client
        assert set(serve.status().applications[APP].deployments) == {
            "Ingress", "PageEncoder", "QueryEncoder", "Reranker"}


@pytest.fixture(scope="module")
def local_client(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same corpus through ``--engine local`` (the in-process app)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from ragspine.serving.app import create_app

    settings = clean_settings(**_settings_kw(tmp_path_factory.mktemp("local-data"), models))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.post("/v1/libraries", json={"name": LIB}).status_code == 201
        for name, data in DOCS.items():
            assert _upload(client, name, data).status_code == 201
        yield client


def _drill(deployment: str, fault: str | None = "unhealthy") -> str:
    from ray import serve

    return serve.get_deployment_handle(deployment, app_name=APP).drill.remote(fault).result(timeout_s=30)


def _healthy(client: httpx.Client) -> bool:
    _, body = _ranking(client, QUERIES[0], "hybrid")
    return not body["degraded"]


def test_ingest_and_search_over_http(ray_app: httpx.Client) -> None:
    ranking, body = _ranking(ray_app, QUERIES[0], "bm25")
    assert ranking and ranking[0][:2] == ("alpha", 1)
    assert body["hits"][0]["text"] == "Revenue grew by twelve percent in Asia in the third quarter."
    # Hybrid: the visual channel (tiny random weights: its order means nothing) is there.
    ranking, body = _ranking(ray_app, QUERIES[0], "hybrid")
    assert not body["degraded"], body["degraded_reasons"]
    assert ("alpha", 1) in {h[:2] for h in ranking}
    assert all(h["scores"]["visual"] is not None for h in body["hits"])  # QueryEncoder answered
    # The RESTRICTED page never reached an encoder or the index.
    doc = ray_app.get(f"/v1/libraries/{LIB}/documents/alpha").json()
    assert doc["pages_dropped"] == [3] and doc["page_numbers"] == [1, 2]
    for q in ["secret merger plan", "revenue figures"]:
        hits, _ = _ranking(ray_app, q, "hybrid")
        assert ("alpha", 3) not in {h[:2] for h in hits}
    # Rerank goes through the Reranker deployment.
    _, body = _ranking(ray_app, QUERIES[0], "hybrid", rerank=True)
    assert not body["degraded"], body["degraded_reasons"]
    assert all(h["scores"]["rerank"] is not None for h in body["hits"])
    ready = ray_app.get("/readyz")
    assert ready.status_code == 200


def test_ray_and_local_engines_rank_identically(ray_app: httpx.Client, local_client: Any) -> None:
    for query in QUERIES:
        for mode in ("hybrid", "vector", "bm25"):
            ray_rank, ray_body = _ranking(ray_app, query, mode)
            local_rank, local_body = _ranking(local_client, query, mode)
            assert ray_rank == local_rank, (query, mode)
            assert not ray_body["degraded"] and not local_body["degraded"]
            for a, b in zip(ray_body["hits"], local_body["hits"]):
                for ch in ("fused", "visual", "bm25"):
                    if a["scores"][ch] is None:
                        assert b["scores"][ch] is None
                    else:
                        assert a["scores"][ch] == pytest.approx(b["scores"][ch], rel=1e-4, abs=1e-6)


def test_broken_query_encoder_degrades_then_recovers(ray_app: httpx.Client) -> None:
    before, _ = _ranking(ray_app, QUERIES[0], "bm25")
    _drill("QueryEncoder")
    ranking, body = _ranking(ray_app, QUERIES[0], "hybrid")  # 200, never a 5xx
    assert body["degraded"] is True
    reason = " ".join(body["degraded_reasons"])
    assert "visual_unavailable" in reason and "QueryEncoder" in reason, reason
    assert "marked unhealthy" in reason or "did not answer" in reason, reason
    assert "Traceback" not in reason and "pid=" not in reason, reason  # no Ray internals
    assert ranking == before  # the CPU path answered: BM25 + RRF
    assert all(h["scores"]["visual"] is None for h in body["hits"])
    # Serve sees the failing health check, replaces the replica, and visual search is back.
    ray_kit.wait_until(lambda: _healthy(ray_app), what="visual search to recover")


def test_killed_query_encoder_replica_degrades_then_recovers(ray_app: httpx.Client) -> None:
    import ray
    from ray import serve

    name = serve.get_deployment_handle("QueryEncoder", app_name=APP).info.remote().result(timeout_s=30)["replica"]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    _, body = _ranking(ray_app, QUERIES[0], "hybrid")
    assert r_ok(body)
    if body["degraded"]:  # the usual case: the dead replica is still routed to, or none is up
        assert any("visual_unavailable" in r for r in body["degraded_reasons"])
    ray_kit.wait_until(lambda: _healthy(ray_app), what="a new QueryEncoder replica")


def r_ok(body: dict[str, Any]) -> bool:
    return isinstance(body.get("hits"), list) and bool(body["hits"])


def test_broken_reranker_keeps_fused_order(ray_app: httpx.Client) -> None:
    fused, _ = _ranking(ray_app, QUERIES[1], "hybrid")
    _drill("Reranker")
    ranking, body = _ranking(ray_app, QUERIES[1], "hybrid", rerank=True)
    assert body["degraded"] is True
    assert any(r.startswith("rerank_failed") for r in body["degraded_reasons"]), body["degraded_reasons"]
    assert ranking == fused
    ray_kit.wait_until(
        lambda: not _ranking(ray_app, QUERIES[1], "hybrid", rerank=True)[1]["degraded"],
        what="the Reranker deployment to recover",
    )


def test_ingest_with_broken_page_encoder_is_atomic(ray_app: httpx.Client) -> None:
    before, _ = _ranking(ray_app, "market share", "bm25")
    version = ray_app.get(f"/v1/libraries/{LIB}/documents/beta").json()["version"]
    _drill("PageEncoder")
    new = make_pdf(["Completely different words about ferries and harbours."])
    r = _upload(ray_app, "beta", new)
    assert r.status_code == 503, r.text
    assert r.json()["type"] == "/problems/model-unavailable"
    # The previous version is still served, whole.
    assert ray_app.get(f"/v1/libraries/{LIB}/documents/beta").json()["version"] == version
    assert _ranking(ray_app, "market share", "bm25")[0] == before
    assert not _ranking(ray_app, "ferries harbours", "bm25")[0]
    # Once Serve has replaced the replica, the same upload goes through.
    r = ray_kit.wait_until(lambda: (x := _upload(ray_app, "beta", new)).status_code == 201 and x,
                           what="ingest to work again")
    assert r.json()["result"]["version"] > version  # (failed attempts used up version numbers)
    assert _ranking(ray_app, "ferries harbours", "bm25")[0][0][:2] == ("beta", 1)


def test_mcp_on_the_ray_ingress_needs_no_session(ray_app: httpx.Client) -> None:
    """The Ingress serves /mcp stateless: a request without a session id is answered (a
    stateful endpoint answers 400 'Missing session ID'), so any replica can take an agent's
    next request."""
    r = ray_app.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": "search", "arguments": {
                                       "query": QUERIES[0], "libraries": [LIB], "mode": "bm25"}}},
                     headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    assert "mcp-session-id" not in r.headers
    assert '"doc_id":"alpha"' in r.text.replace(" ", "")
