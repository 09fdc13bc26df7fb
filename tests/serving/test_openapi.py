"""The OpenAPI document declares the errors the API really sends: application/problem+json with
the Problem schema. Checked as a schema fuzzer would: every error the bad requests below provoke
must be a status the operation declares, with the declared media type and a body that has the
declared shape."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import pdfs
from serving_kit import upload

PROBLEM = "application/problem+json"


def _operation(schema: dict[str, Any], method: str, url: str) -> dict[str, Any]:
    path = url.split("?", 1)[0]
    for template, item in schema["paths"].items():
        pattern = "^" + re.sub(r"\{[^/]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return item[method.lower()]
    raise AssertionError(f"{method} {path} is not in the OpenAPI document")


def test_every_declared_error_is_a_problem(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    problem = schema["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail"}
    assert "HTTPValidationError" not in schema["components"]["schemas"]  # never sent
    seen = 0
    for path, item in schema["paths"].items():
        for method, op in item.items():
            errors = {c: r for c, r in op["responses"].items() if c[0] in "45"}
            assert {"422", "500"} <= set(errors), (method, path)
            if path.startswith("/v1/"):
                assert {"401", "403", "404"} <= set(errors), (method, path)
            for code, resp in errors.items():
                seen += 1
                if (path, code) == ("/readyz", "503"):
                    assert list(resp["content"]) == ["application/json"]  # its checks, not a problem
                    continue
                assert resp["content"] == {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}, (
                    method, path, code)
    assert seen > 50
    upload_op = schema["paths"]["/v1/libraries/{lib}/documents"]["post"]
    assert {"413", "415"} <= set(upload_op["responses"])


def _bad_requests(client: Any) -> list[tuple[str, str, dict[str, Any]]]:
    client.post("/v1/libraries", json={"name": "lib"})
    upload(client, "lib", pdfs.make_pdf(["Harbour traffic grew."]), metadata={"doc_id": "d1"}, wait=True)
    return [
        ("GET", "/v1/libraries/nope/documents", {}),
        ("POST", "/v1/libraries", {"json": {"name": "Bad Name!"}}),
        ("POST", "/v1/libraries", {"json": {"name": "lib"}}),  # exists: 409
        ("POST", "/v1/libraries", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("DELETE", "/v1/libraries/nope", {}),
        ("GET", "/v1/libraries/lib/documents/nope", {}),
        ("DELETE", "/v1/libraries/lib/documents/nope", {}),
        ("GET", "/v1/libraries/lib/documents/d1/pages/9/thumbnail", {}),
        ("GET", "/v1/libraries/lib/documents/d1/pages/x/thumbnail", {}),
        ("GET", "/v1/libraries/lib/documents/d1/pages/1/similarity-map?query=revenue", {}),
        ("GET", "/v1/libraries/lib/documents/d1/pages/1/similarity-map", {}),
        ("GET", "/v1/jobs/nope", {}),
        ("POST", "/v1/libraries/lib/documents", {"files": {"file": ("a.txt", b"plain text", "text/plain")}}),
        ("POST", "/v1/libraries/lib/documents", {"files": {"file": ("a.pdf", b"", "application/pdf")}}),
        ("POST", "/v1/libraries/lib/documents", {"files": {"file": ("a.pdf", pdfs.make_pdf(["x"]), "application/pdf")},
                                                 "data": {"metadata": "[1, 2"}}),
        ("POST", "/v1/libraries/nope/documents", {"files": {"file": ("a.pdf", pdfs.make_pdf(["x"]), "application/pdf")}}),
        ("POST", "/v1/search", {"json": {"query": "x", "libraries": ["nope"]}}),
        ("POST", "/v1/search", {"json": {"query": "x", "libraries": ["lib"], "mode": "telepathy"}}),
        ("POST", "/v1/search", {"json": {"query": "x", "libraries": ["lib"], "top_k": 0}}),
        ("POST", "/v1/search", {"json": {"query": "x", "libraries": ["lib"],
                                         "filters": [{"field": "period", "op": "near", "value": 1}]}}),
        ("POST", "/v1/search", {"json": {"query": "x", "libraries": ["lib"], "mode": "vector"}}),
        ("POST", "/v1/search", {"json": {"libraries": ["lib"]}}),
        ("GET", "/v1/libraries/lib/graph/entities/nope/neighbors", {}),
        ("GET", "/v1/libraries/lib/graph/entities/nope/neighbors?depth=9", {}),
        ("GET", "/v1/libraries/lib/graph/paths?from=a", {}),
        ("POST", "/v1/libraries/lib/graph/relations", {"files": {"file": ("r.csv", b"source,relation\nA,owns\n", "text/csv")}}),
    ]


def test_errors_the_api_sends_are_the_ones_it_declares(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    required = schema["components"]["schemas"]["Problem"]["required"]
    statuses = set()
    for method, url, kw in _bad_requests(client):
        r = client.request(method, url, **kw)
        assert r.status_code >= 400, (method, url, r.status_code, r.text[:200])
        op = _operation(schema, method, url)
        declared = op["responses"].get(str(r.status_code))
        assert declared is not None, f"{method} {url}: {r.status_code} is not declared ({sorted(op['responses'])})"
        media = r.headers["content-type"].split(";")[0]
        assert media in declared["content"], (method, url, media, declared)
        body = r.json()
        assert set(required) <= set(body) and body["status"] == r.status_code, body
        assert body["type"].startswith("/problems/") and body["detail"]
        statuses.add(r.status_code)
    assert {404, 409, 415, 422} <= statuses, statuses


def test_the_document_is_valid_json_and_stable(client: Any) -> None:
    a = client.get("/openapi.json")
    b = client.get("/openapi.json")
    assert a.status_code == 200 and a.json() == b.json()
    json.dumps(a.json())  # serialisable as is
