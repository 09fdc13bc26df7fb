"""The query chain over REST: glossary upload (422 on bad rows), the gap log (listed by count,
cleared one by one, scoped by API key), and the chain's fields in search answers."""

from __future__ import annotations

from collections.abc import Iterator

import pdfs
import pytest
from fastapi.testclient import TestClient
from ragspine.serving.app import create_app
from serving_kit import assert_problem, clean_settings, upload

A = "key-aaaaaaaa"  # liba only
STAR = "key-bbbbbbbb"  # every library


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = clean_settings(data_dir=tmp_path_factory.mktemp("chain"), api_keys=f"{A}=liba;{STAR}=*")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for lib, text in (("liba", "Harbour revenue grew in the north."), ("libb", "Bonobo habitats shrank.")):
            assert client.post("/v1/libraries", json={"name": lib}, headers=h(STAR)).status_code == 201
            r = upload(client, lib, pdfs.make_pdf([text]), filename=f"{lib}.pdf", wait=True, headers=h(STAR))
            assert r.status_code == 201, r.text
        yield client


def glossary(c: TestClient, lib: str, body: bytes, name: str = "g.csv", key: str = STAR) -> object:
    return c.post(f"/v1/libraries/{lib}/glossary", files={"file": (name, body, "text/csv")}, headers=h(key))


def test_glossary_upload_read_and_rewrite(c: TestClient) -> None:
    r = glossary(c, "liba", b"term,synonyms\nturnover,revenue|sales\n")
    assert r.status_code == 200, r.text
    assert r.json()["terms"] == 1
    got = c.get("/v1/libraries/liba/glossary", headers=h(A)).json()
    assert got["entries"] == [{"term": "turnover", "synonyms": ["revenue", "sales"], "kind": "metric"}]
    body = {"query": "turnover", "libraries": ["liba"], "mode": "bm25", "rewrite": True}
    out = c.post("/v1/search", json=body, headers=h(A)).json()
    assert [q["query"] for q in out["queries"]] == ["turnover", "revenue", "sales"]
    assert [(x["doc_id"], x["found_by"]) for x in out["hits"]] == [("liba", [1])]
    assert out["abstained"] is False


def test_bad_glossary_is_422_naming_the_row_and_keeps_the_old_one(c: TestClient) -> None:
    glossary(c, "liba", b"term,synonyms\nturnover,revenue\n")
    r = glossary(c, "liba", b"term,synonyms\nturnover,revenue\nprofit,\n")
    body = assert_problem(r, 422, "invalid-glossary")
    assert "row 3: term 'profit' has no synonym" in body["detail"]
    assert c.get("/v1/libraries/liba/glossary", headers=h(A)).json()["terms"] == 1


def test_glossary_delete_and_404(c: TestClient) -> None:
    glossary(c, "libb", b"term,synonyms\nbonobo,pygmy chimpanzee\n")
    assert c.delete("/v1/libraries/libb/glossary", headers=h(STAR)).status_code == 204
    assert_problem(c.get("/v1/libraries/libb/glossary", headers=h(STAR)), 404)
    assert_problem(c.delete("/v1/libraries/libb/glossary", headers=h(STAR)), 404)
    assert_problem(c.get("/v1/libraries/nolib/glossary", headers=h(STAR)), 404)


def test_gaps_are_counted_listed_and_cleared(c: TestClient) -> None:
    c.delete("/v1/libraries/liba/gaps", headers=h(A))
    for q, n in (("zebra migration", 3), ("okapi census", 1)):
        for _ in range(n):
            r = c.post("/v1/search", json={"query": q, "libraries": ["liba"], "mode": "bm25"}, headers=h(A))
            assert r.json()["hits"] == []
    c.post("/v1/search", json={"query": "harbour", "libraries": ["liba"], "mode": "bm25"}, headers=h(A))
    gaps = c.get("/v1/libraries/liba/gaps", headers=h(A)).json()["gaps"]
    assert [(g["query"], g["hit_count"]) for g in gaps] == [("zebra migration", 3), ("okapi census", 1)]
    assert c.get("/v1/libraries/liba/gaps?limit=1", headers=h(A)).json()["gaps"][0]["query"] == "zebra migration"
    assert c.delete(f"/v1/libraries/liba/gaps/{gaps[0]['gap_id']}", headers=h(A)).status_code == 204
    assert [g["query"] for g in c.get("/v1/libraries/liba/gaps", headers=h(A)).json()["gaps"]] == ["okapi census"]
    assert_problem(c.delete(f"/v1/libraries/liba/gaps/{gaps[0]['gap_id']}", headers=h(A)), 404)
    assert c.delete("/v1/libraries/liba/gaps", headers=h(A)).json() == {"deleted": 1}
    assert_problem(c.get("/v1/libraries/liba/gaps?limit=0", headers=h(A)), 422)


def test_abstention_is_logged_as_a_gap(c: TestClient) -> None:
    c.delete("/v1/libraries/liba/gaps", headers=h(A))
    body = {"query": "harbour dividends buyback", "libraries": ["liba"], "mode": "bm25", "corrective": True}
    out = c.post("/v1/search", json=body, headers=h(A)).json()
    assert out["abstained"] is True and out["hits"] == []
    assert out["corrective"]["steps"][0]["verdict"] == "low_coverage"
    gaps = c.get("/v1/libraries/liba/gaps", headers=h(A)).json()["gaps"]
    assert [g["reason"].split(":")[0] for g in gaps] == ["abstained"]


def test_a_key_sees_only_its_libraries(c: TestClient) -> None:
    assert_problem(c.get("/v1/libraries/libb/gaps", headers=h(A)), 403)
    assert_problem(c.delete("/v1/libraries/libb/gaps", headers=h(A)), 403)
    assert_problem(glossary(c, "libb", b"term,synonyms\na1,b1\n", key=A), 403)
    assert_problem(c.get("/v1/libraries/libb/glossary", headers=h(A)), 403)
    assert_problem(c.get("/v1/libraries/liba/gaps"), 401)


def test_bad_postprocess_is_422(c: TestClient) -> None:
    body = {"query": "harbour", "libraries": ["liba"], "postprocess": ["shuffle"]}
    assert_problem(c.post("/v1/search", json=body, headers=h(A)), 422)
