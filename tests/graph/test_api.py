"""The graph's REST routes through the real app (TestClient): answers, problem+json errors,
auth, and a search with ``expand`` over HTTP."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from graph_kit import clean_settings

from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.demo.corpus import demo_relations_csv
from ragspine.serving.app import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

PROBLEM = "application/problem+json"
G = f"/v1/libraries/{DEMO_LIBRARY}/graph"
KEY_DEMO, KEY_OTHER = "key-demo-12345", "key-other-12345"


def problem(resp: Any, status: int, type_: str) -> str:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["type"] == f"/problems/{type_}" and body["status"] == status, body
    assert "Traceback" not in resp.text
    return str(body["detail"])


def client_on(src: Path, dst: Path, **settings: Any) -> TestClient:
    shutil.copytree(src, dst)
    return TestClient(create_app(clean_settings(data_dir=dst, **settings)), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def api(demo_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with client_on(demo_data_dir, tmp_path_factory.mktemp("api") / "data") as c:
        yield c


@pytest.fixture
def api_rw(demo_data_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    with client_on(demo_data_dir, tmp_path / "data") as c:
        yield c


def upload(client: TestClient, text: str, name: str = "rel.csv", **kw: Any) -> Any:
    ctype = "application/json" if name.endswith(".json") else "text/csv"
    return client.post(f"{G}/relations", files={"file": (name, text.encode(), ctype)}, **kw)


def test_routes_are_documented(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    assert "post" in paths["/v1/libraries/{lib}/graph/relations"]
    for p in ("/entities", "/entities/{entity_id}/neighbors", "/paths"):
        assert "get" in paths[f"/v1/libraries/{{lib}}/graph{p}"]


def test_entities(api: TestClient) -> None:
    r = api.get(f"{G}/entities", params={"q": "阿克米"})
    assert r.status_code == 200
    assert [e["id"] for e in r.json()["entities"]] == ["acme-energy", "acme-holdings", "acme-robotics"]
    [holdings] = api.get(f"{G}/entities", params={"q": "Acme Holdings", "limit": 1}).json()["entities"]
    assert holdings == {"id": "acme-holdings", "name": "Acme Holdings", "type": "company", "aliases": ["阿克米控股"]}
    metrics = api.get(f"{G}/entities", params={"type": "metric"}).json()["entities"]
    assert [e["id"] for e in metrics] == ["operating-margin", "operating-profit", "revenue"]
    assert api.get(f"{G}/entities", params={"q": "nothing like it"}).json() == {"entities": []}


def test_neighbors(api: TestClient) -> None:
    r = api.get(f"{G}/entities/{quote('阿克米控股')}/neighbors", params={"relation": "subsidiary_of"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["entity"]["id"] == "acme-holdings" and body["truncated"] is False
    assert [(n["id"], n["depth"]) for n in body["neighbors"]] == [("acme-energy", 1), ("acme-robotics", 1), ("acme-services", 1)]
    [cite] = body["neighbors"][0]["path"][0]["citations"]
    assert cite["row"] == 3 and cite["file"] == "demo-relations.csv"

    deep = api.get(f"{G}/entities/globex-automation/neighbors",
                   params={"relation": "peer_of,subsidiary_of", "depth": 3}).json()
    by_id = {n["id"]: n for n in deep["neighbors"]}
    assert [(e["source"], e["relation"], e["target"]) for e in by_id["acme-energy"]["path"]] == [
        ("acme-robotics", "peer_of", "globex-automation"),
        ("acme-robotics", "subsidiary_of", "acme-holdings"),
        ("acme-energy", "subsidiary_of", "acme-holdings"),
    ]
    docs = api.get(f"{G}/entities/acme-energy/neighbors", params={"relation": "mentions", "limit": 2}).json()
    assert [n["type"] for n in docs["neighbors"]] == ["document", "document"] and docs["truncated"] is True


def test_paths(api: TestClient) -> None:
    r = api.get(f"{G}/paths", params={"from": "Acme Energy", "to": "Globex", "relation": "peer_of,subsidiary_of"})
    body = r.json()
    assert body["found"] and body["hops"] == 2
    assert [n["id"] for n in body["nodes"]] == ["acme-energy", "acme-holdings", "globex-corp"]
    assert [[c["row"] for c in e["citations"]] for e in body["path"]] == [[3], [6]]
    short = api.get(f"{G}/paths", params={"from": "acme-energy", "to": "globex-corp", "max_hops": 1,
                                          "relation": "peer_of,subsidiary_of"}).json()
    assert short["found"] is False and short["path"] is None


def test_search_with_expand_over_http(api: TestClient) -> None:
    r = api.post("/v1/search", json={"query": "营业收入", "libraries": [DEMO_LIBRARY], "top_k": 3,
                                     "expand": {"entity": "Acme Holdings", "relation": "subsidiary_of"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {h["doc_id"] for h in body["hits"]} == {"acme-energy-bulletin-2023"}
    assert all(h["via"] and h["thumbnail_url"] for h in body["hits"])
    assert body["expansion"]["libraries"][0]["origin"]["id"] == "acme-holdings"


@pytest.mark.parametrize(
    ("method", "url", "params", "status", "type_", "detail"),
    [
        ("get", f"{G}/entities/initech/neighbors", {}, 404, "unknown-entity", "no entity 'initech'"),
        ("get", f"{G}/entities/acme-holdings/neighbors", {"relation": "owns"}, 422, "unknown-relation", "allowed"),
        ("get", f"{G}/entities/acme-holdings/neighbors", {"depth": 4}, 422, "depth-out-of-range", "from 1 to 3, got 4"),
        ("get", f"{G}/entities/acme-holdings/neighbors", {"depth": "x"}, 422, "invalid-request", "depth"),
        ("get", f"{G}/paths", {"from": "acme-holdings", "to": "revenue", "max_hops": 7}, 422, "depth-out-of-range",
         "max_hops must be an integer from 1 to 6"),
        ("get", f"{G}/paths", {"from": "acme-holdings", "to": "nobody"}, 404, "unknown-entity", "nobody"),
        ("get", f"{G}/paths", {"to": "revenue"}, 422, "invalid-request", "from"),
        ("get", "/v1/libraries/nope/graph/entities", {"q": "x"}, 404, "unknown-library", "nope"),
        ("get", f"{G}/entities", {"type": "planet"}, 422, "invalid-request", "unknown entity type"),
    ],
)
def test_errors(api: TestClient, method: str, url: str, params: dict[str, Any], status: int, type_: str,
                detail: str) -> None:
    assert detail in problem(getattr(api, method)(url, params=params), status, type_)


def test_search_errors(api: TestClient) -> None:
    body = {"query": "revenue", "libraries": [DEMO_LIBRARY]}
    r = api.post("/v1/search", json={**body, "expand": {"entity": "Initech"}})
    assert "Initech" in problem(r, 404, "unknown-entity")
    r = api.post("/v1/search", json={**body, "expand": {"entity": "Acme Holdings", "depth": 9}})
    problem(r, 422, "depth-out-of-range")
    r = api.post("/v1/search", json={**body, "expand": {"entity": "Acme Holdings", "colour": "red"}})
    problem(r, 422, "invalid-request")


def test_upload_csv_and_json(api_rw: TestClient) -> None:
    r = upload(api_rw, demo_relations_csv(), "demo-relations.csv")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["rows"] == 8 and body["mode"] == "replace" and body["declared"] == {"entities": 9, "relations": 8}
    rows = [{"source": "Initech", "relation": "peer_of", "target": "Acme Holdings", "provenance": "press",
             "source_aliases": ["英尼泰克"]}]
    r = upload(api_rw, json.dumps(rows, ensure_ascii=False), "more.json", params={"mode": "merge"})
    assert r.status_code == 200 and r.json()["declared"]["relations"] == 9
    [e] = api_rw.get(f"{G}/entities", params={"q": "英尼泰克"}).json()["entities"]
    assert e["id"] == "initech"


@pytest.mark.parametrize(
    ("text", "type_", "detail"),
    [
        ("source,relation,target,provenance\nA,subsidiary_of,B,x\nB,subsidiary_of,A,y\n", "relation-cycle",
         "subsidiary_of relations form a cycle: 'A' subsidiary_of 'B' (row 2); 'B' subsidiary_of 'A' (row 3)"),
        ("source,relation,target,provenance\nAcme Holdings,peer_of,阿克米控股,x\n", "relation-self-loop",
         "bad.csv row 2: 'Acme Holdings' peer_of '阿克米控股' relates an entity to itself"),
        ("source,relation,target,provenance\nA,acquired,B,x\n", "unknown-relation", "bad.csv row 2: unknown relation 'acquired'"),
        ("source,target\nA,B\n", "invalid-relations", "missing column(s) relation, provenance"),
    ],
)
def test_bad_uploads_are_refused_and_change_nothing(api_rw: TestClient, text: str, type_: str, detail: str) -> None:
    before = api_rw.get(f"{G}/entities/acme-holdings/neighbors", params={"depth": 2}).json()
    # merge: the rows are checked together with the declared ones (阿克米控股 is an alias there)
    assert detail in problem(upload(api_rw, text, "bad.csv", params={"mode": "merge"}), 422, type_)
    assert api_rw.get(f"{G}/entities/acme-holdings/neighbors", params={"depth": 2}).json() == before


def test_upload_needs_a_file_and_a_known_mode(api_rw: TestClient) -> None:
    problem(api_rw.post(f"{G}/relations"), 422, "invalid-request")
    problem(upload(api_rw, demo_relations_csv(), params={"mode": "append"}), 422, "invalid-request")
    problem(upload(api_rw, ""), 422, "invalid-relations")


def test_auth(demo_data_dir: Path, tmp_path: Path) -> None:
    keys = f"{KEY_DEMO}={DEMO_LIBRARY};{KEY_OTHER}=other"
    with client_on(demo_data_dir, tmp_path / "data", api_keys=keys) as c:
        url = f"{G}/entities"
        problem(c.get(url), 401, "unauthorized")
        problem(c.get(url, headers={"Authorization": f"Bearer {KEY_OTHER}"}), 403, "forbidden")
        problem(upload(c, demo_relations_csv(), headers={"X-API-Key": KEY_OTHER}), 403, "forbidden")
        problem(c.get(f"{G}/paths", params={"from": "a", "to": "b"}, headers={"X-API-Key": KEY_OTHER}), 403, "forbidden")
        assert c.get(url, headers={"Authorization": f"Bearer {KEY_DEMO}"}).status_code == 200


def test_no_canary_in_answers(api: TestClient, demo_docs: list[DemoDocument]) -> None:
    texts = []
    for e in api.get(f"{G}/entities").json()["entities"]:
        texts.append(api.get(f"{G}/entities/{quote(e['id'])}/neighbors", params={"depth": 2, "limit": 1000}).text)
        texts.append(api.get(f"{G}/paths", params={"from": e["id"], "to": "acme-holdings", "max_hops": 6}).text)
    joined = "\n".join(texts).lower()
    assert "acme-board-memo-2023" not in joined
    for c in {c for d in demo_docs for c in d.canaries}:
        assert c.lower() not in joined
