"""API keys (``RAGSPINE_API_KEYS``): 401 without a valid key, 403 outside a key's libraries,
listings and jobs limited to what a key may see."""

from __future__ import annotations

from collections.abc import Iterator

import pdfs
import pytest
from fastapi.testclient import TestClient
from ragspine.serving.app import create_app
from serving_kit import assert_problem, clean_settings, search, upload, wait_job

A = "key-aaaaaaaa"  # liba only
STAR = "key-bbbbbbbb"  # every library
KEYS = f"{A}=liba;{STAR}=*"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def xkey(key: str) -> dict[str, str]:
    return {"X-API-Key": key}


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """liba and libb with one document each, created with the all-libraries key; returns the
    client and the id of each library's ingest job."""
    settings = clean_settings(data_dir=tmp_path_factory.mktemp("auth"), api_keys=KEYS)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        jobs = {}
        for lib, word in (("liba", "aardvark"), ("libb", "bonobo")):
            assert c.post("/v1/libraries", json={"name": lib}, headers=bearer(STAR)).status_code == 201
            r = upload(c, lib, pdfs.make_pdf([f"{word} revenue report"]), filename=f"{lib}-doc.pdf",
                       wait=True, headers=bearer(STAR))
            assert r.status_code == 201, r.text
            jobs[lib] = r.json()["id"]
        yield c, jobs


@pytest.fixture
def ac(authed: tuple[TestClient, dict[str, str]]) -> TestClient:
    return authed[0]


PROTECTED = [
    ("GET", "/v1/libraries", None),
    ("POST", "/v1/libraries", {"name": "libc"}),
    ("DELETE", "/v1/libraries/liba", None),
    ("GET", "/v1/libraries/liba/documents", None),
    ("GET", "/v1/libraries/liba/documents/liba-doc", None),
    ("DELETE", "/v1/libraries/liba/documents/liba-doc", None),
    ("GET", "/v1/libraries/liba/documents/liba-doc/pages/1/thumbnail", None),
    ("GET", "/v1/jobs/0123", None),
    ("POST", "/v1/search", {"query": "revenue", "libraries": ["liba"]}),
    ("GET", "/v1/libraries/liba/graph/entities", None),
    ("GET", "/v1/libraries/liba/graph/paths?from=a&to=b", None),
]


@pytest.mark.parametrize(("method", "url", "body"), PROTECTED, ids=[f"{m} {u}" for m, u, _ in PROTECTED])
@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer("key-wrong-key"),
        xkey("key-wrong-key"),
        {"Authorization": "Bearer "},
        {"Authorization": f"Basic {A}"},
        {"Authorization": A},
        bearer(A[:-1]),
        bearer(A + "x"),
        {"X-API-Key": ""},
    ],
    ids=["none", "bad-bearer", "bad-x-api-key", "empty-bearer", "basic", "no-scheme", "prefix", "longer",
         "empty-x-api-key"],
)
def test_401_without_a_valid_key(ac: TestClient, method: str, url: str, body: object,
                                 headers: dict[str, str]) -> None:
    r = ac.request(method, url, json=body, headers=headers)
    assert_problem(r, 401, "unauthorized")
    assert r.headers.get("www-authenticate", "").startswith("Bearer")
    # Nothing was deleted or created by the refused call.
    listed = ac.get("/v1/libraries", headers=bearer(STAR)).json()["libraries"]
    assert [x["name"] for x in listed] == ["liba", "libb"] and all(x["documents"] == 1 for x in listed)


def test_upload_without_a_key_is_401(ac: TestClient) -> None:
    r = upload(ac, "liba", pdfs.make_pdf(["sneaky"]), wait=True)
    assert_problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("how", [bearer, xkey], ids=["bearer", "x-api-key"])
def test_both_headers_work(ac: TestClient, how: type) -> None:
    h = how(A)
    assert ac.get("/v1/libraries", headers=h).status_code == 200
    hits = search(ac, "aardvark", ["liba"], headers=h).json()["hits"]
    assert [x["doc_id"] for x in hits] == ["liba-doc"]
    assert ac.get("/v1/libraries/liba/documents/liba-doc/pages/1/thumbnail", headers=h).status_code == 200


def test_bearer_scheme_is_case_insensitive(ac: TestClient) -> None:
    assert ac.get("/v1/libraries", headers={"Authorization": f"bearer {A}"}).status_code == 200


def test_listing_shows_only_allowed_libraries(ac: TestClient) -> None:
    assert [x["name"] for x in ac.get("/v1/libraries", headers=bearer(A)).json()["libraries"]] == ["liba"]
    assert [x["name"] for x in ac.get("/v1/libraries", headers=bearer(STAR)).json()["libraries"]] == [
        "liba", "libb"]


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("GET", "/v1/libraries/libb/documents", None),
        ("GET", "/v1/libraries/libb/documents/libb-doc", None),
        ("DELETE", "/v1/libraries/libb/documents/libb-doc", None),
        ("GET", "/v1/libraries/libb/documents/libb-doc/pages/1/thumbnail", None),
        ("DELETE", "/v1/libraries/libb", None),
        ("POST", "/v1/libraries", {"name": "libc"}),
        ("POST", "/v1/search", {"query": "bonobo", "libraries": ["libb"]}),
        ("POST", "/v1/search", {"query": "bonobo", "libraries": ["liba", "libb"]}),
        ("POST", "/v1/search", {"query": "bonobo", "libraries": ["libb", "liba"]}),
        # A library that does not exist is just as forbidden: the key learns nothing.
        ("GET", "/v1/libraries/ghost/documents", None),
        ("POST", "/v1/search", {"query": "bonobo", "libraries": ["liba", "ghost"]}),
        ("GET", "/v1/libraries/libb/graph/entities", None),
        ("GET", "/v1/libraries/libb/graph/entities/x/neighbors", None),
        ("GET", "/v1/libraries/libb/graph/paths?from=a&to=b", None),
    ],
)
def test_403_outside_the_keys_libraries(ac: TestClient, method: str, url: str, body: object) -> None:
    for h in (bearer(A), xkey(A)):
        r = ac.request(method, url, json=body, headers=h)
        problem = assert_problem(r, 403, "forbidden")
        assert "bonobo" not in r.text
        assert "libb-doc" not in r.text
        assert problem["detail"]
    # libb is intact.
    hits = search(ac, "bonobo", ["libb"], headers=bearer(STAR)).json()["hits"]
    assert [x["doc_id"] for x in hits] == ["libb-doc"]


def test_upload_into_another_library_is_403(ac: TestClient) -> None:
    r = upload(ac, "libb", pdfs.make_pdf(["intruder text"]), wait=True, headers=bearer(A))
    assert_problem(r, 403, "forbidden")
    assert search(ac, "intruder", ["libb"], headers=bearer(STAR)).json()["hits"] == []


def test_jobs_of_another_library_are_404(authed: tuple[TestClient, dict[str, str]]) -> None:
    ac, jobs = authed
    r = ac.get(f"/v1/jobs/{jobs['libb']}", headers=bearer(A))
    other = assert_problem(r, 404, "not-found")
    missing = assert_problem(ac.get("/v1/jobs/ffffffffffffffffffffffffffffffff", headers=bearer(A)), 404)
    assert other["type"] == missing["type"] and other["title"] == missing["title"]
    assert "libb" not in r.text
    assert ac.get(f"/v1/jobs/{jobs['liba']}", headers=bearer(A)).json()["state"] == "succeeded"
    assert ac.get(f"/v1/jobs/{jobs['libb']}", headers=bearer(STAR)).json()["state"] == "succeeded"


def test_limited_key_works_inside_its_library(ac: TestClient) -> None:
    h = xkey(A)
    r = upload(ac, "liba", pdfs.make_pdf(["capybara notes"]), filename="extra.pdf", headers=h)
    assert r.status_code == 202
    job = wait_job(ac, r.json()["id"], headers=h)
    assert job["state"] == "succeeded"
    assert [x["doc_id"] for x in search(ac, "capybara", ["liba"], headers=h).json()["hits"]] == ["extra"]
    assert ac.delete("/v1/libraries/liba/documents/extra", headers=h).status_code == 204
    assert ac.get("/v1/libraries/liba/documents/extra", headers=h).status_code == 404


def test_open_routes_need_no_key(ac: TestClient) -> None:
    for url in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
        assert ac.get(url).status_code == 200, url


def test_no_keys_configured_means_no_auth(client: TestClient) -> None:
    assert client.get("/v1/libraries").status_code == 200
    assert client.get("/v1/libraries", headers=bearer("anything-at-all")).status_code == 200


def test_keys_never_appear_in_responses_or_metrics(ac: TestClient) -> None:
    for h in (bearer(A), bearer("key-wrong-key"), {}):
        for url in ("/v1/libraries", "/v1/libraries/libb/documents"):
            assert A.encode() not in ac.get(url, headers=h).content
    metrics = ac.get("/metrics").content
    assert A.encode() not in metrics and STAR.encode() not in metrics and b"key-wrong-key" not in metrics
