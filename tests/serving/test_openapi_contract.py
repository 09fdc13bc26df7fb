"""The OpenAPI document says what the API accepts and where each answer leads.

- The patterns it declares for names are the ones the engine enforces (checked both ways with
  generated names).
- Every OpenAPI link points at an operation that exists, names its real parameters, and takes
  them from a place the source response's schema has; followed on a live app, the links reach
  the document, its job and its page thumbnail.
- A route that sends a field its response model lacks fails in the tests (strict models).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdfs
from serving_kit import ingest, search, upload, wait_job

from ragspine.api.names import DOC_ID_PATTERN, LIBRARY_NAME_PATTERN
from ragspine.catalog.libraries import check_doc_id, check_library_name
from ragspine.errors import InvalidRequestError
from ragspine.serving import openapi


@given(st.from_regex(LIBRARY_NAME_PATTERN, fullmatch=True))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_every_library_name_the_schema_allows_is_accepted(name: str) -> None:
    assert check_library_name(name) == name


@given(st.text(min_size=1, max_size=70))
@settings(max_examples=300)
def test_every_library_name_the_schema_refuses_is_refused(name: str) -> None:
    if re.match(LIBRARY_NAME_PATTERN, name):
        return
    with pytest.raises(InvalidRequestError):
        check_library_name(name)


@given(st.from_regex(DOC_ID_PATTERN, fullmatch=True).filter(lambda s: ".." not in s))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_every_doc_id_the_schema_allows_is_accepted(doc_id: str) -> None:
    assert check_doc_id(doc_id) == doc_id


def _schema_at(schema: dict[str, Any], node: dict[str, Any], pointer: list[str]) -> dict[str, Any] | None:
    """The sub-schema a JSON pointer into a response body lands on, or None if the schema has
    no such place. Follows $ref, object properties, array items and anyOf (nullable fields)."""
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if not pointer:
        return node
    head, rest = pointer[0], pointer[1:]
    for alt in node.get("anyOf", []):
        found = _schema_at(schema, alt, pointer)
        if found is not None:
            return found
    if head.isdigit() and node.get("type") == "array":
        return _schema_at(schema, node.get("items", {}), rest)
    prop = node.get("properties", {}).get(head)
    return None if prop is None else _schema_at(schema, prop, rest)


def link_errors(schema: dict[str, Any]) -> list[str]:
    """What is wrong with the document's links (empty when every one can be followed)."""
    ops = {op["operationId"]: (path, op) for path, item in schema["paths"].items() for op in item.values()}
    errors = []
    for source, (path, op) in ops.items():
        for code, resp in op["responses"].items():
            for name, link in resp.get("links", {}).items():
                where = f"{source} {code} {name}"
                if link["operationId"] not in ops:
                    errors.append(f"{where}: no operation {link['operationId']}")
                    continue
                target = ops[link["operationId"]][1]
                params = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
                if set(link["parameters"]) != params:
                    errors.append(f"{where}: parameters {sorted(link['parameters'])} != {sorted(params)}")
                body = resp.get("content", {}).get("application/json", {}).get("schema")
                for expr in link["parameters"].values():
                    if expr.startswith("$request.path."):
                        if f"{{{expr.removeprefix('$request.path.')}}}" not in path:
                            errors.append(f"{where}: {path} has no {expr}")
                    elif expr.startswith("$response.body#/"):
                        pointer = expr.removeprefix("$response.body#/").split("/")
                        if body is None or _schema_at(schema, body, pointer) is None:
                            errors.append(f"{where}: the response has no {expr}")
                    else:
                        errors.append(f"{where}: unsupported expression {expr}")
    return errors


def test_every_link_can_be_followed(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    assert link_errors(schema) == []
    linked = {link["operationId"] for item in schema["paths"].values() for op in item.values()
              for resp in op["responses"].values() for link in resp.get("links", {}).values()}
    # Every operation that takes a path parameter is reachable from another one's answer.
    with_params = {op["operationId"] for item in schema["paths"].values() for op in item.values()
                   if any(p["in"] == "path" for p in op.get("parameters", []))}
    assert with_params - linked == set()


def test_a_broken_link_is_reported(make_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    links = {**openapi.LINKS, "get_job": {"200": {
        "Nowhere": ("get_documnet", {"lib": "$response.body#/library"}),
        "BadParam": ("get_document", {"lib": "$response.body#/library", "doc": "$response.body#/doc_id"}),
        "BadPointer": ("list_documents", {"lib": "$response.body#/libary"}),
    }}}
    monkeypatch.setattr(openapi, "LINKS", links)
    errors = link_errors(make_client().get("/openapi.json").json())
    assert errors == [
        "get_job 200 Nowhere: no operation get_documnet",
        "get_job 200 BadParam: parameters ['doc', 'lib'] != ['doc_id', 'lib']",
        "get_job 200 BadPointer: the response has no $response.body#/libary",
    ]


def _follow(schema: dict[str, Any], op_id: str, code: int, link: str, request_path: dict[str, str],
            body: Any) -> str:
    """The URL a link leads to, its runtime expressions evaluated on a real exchange."""
    ops = {op["operationId"]: (path, op) for path, item in schema["paths"].items() for op in item.values()}
    spec = ops[op_id][1]["responses"][str(code)]["links"][link]
    path = ops[spec["operationId"]][0]
    for name, expr in spec["parameters"].items():
        if expr.startswith("$request.path."):
            value = request_path[expr.removeprefix("$request.path.")]
        else:
            value = body
            for part in expr.removeprefix("$response.body#/").split("/"):
                value = value[int(part)] if isinstance(value, list) else value[part]
        path = path.replace(f"{{{name}}}", str(value))
    return path


def test_links_lead_from_an_upload_to_its_job_document_and_thumbnail(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    created = client.post("/v1/libraries", json={"name": "linked"})
    upload_url = _follow(schema, "create_library", 201, "UploadDocument", {}, created.json())
    assert upload_url == "/v1/libraries/linked/documents"
    r = upload(client, "linked", pdfs.make_pdf(["first page words", "second page words"]),
               metadata={"doc_id": "two-pages"})
    assert r.status_code == 202
    job_url = _follow(schema, "upload_document", 202, "GetJob", {"lib": "linked"}, r.json())
    assert job_url == r.headers["Location"]
    job = wait_job(client, r.json()["id"])
    doc_url = _follow(schema, "get_job", 200, "GetDocument", {"job_id": job["id"]}, job)
    assert doc_url == "/v1/libraries/linked/documents/two-pages"
    doc = client.get(doc_url)
    assert doc.status_code == 200
    thumb_url = _follow(schema, "get_document", 200, "Thumbnail", {"lib": "linked", "doc_id": "two-pages"},
                        doc.json())
    assert thumb_url == "/v1/libraries/linked/documents/two-pages/pages/1/thumbnail"
    thumb = client.get(thumb_url)
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/png"
    hits = search(client, "second page", ["linked"]).json()
    assert _follow(schema, "search", 200, "Thumbnail", {}, hits) == \
        f"/v1/libraries/linked/documents/two-pages/pages/{hits['hits'][0]['page']}/thumbnail"


def test_a_field_the_response_model_lacks_fails_in_the_tests(client: Any) -> None:
    assert client.post("/v1/libraries", json={"name": "lib"}).status_code == 201
    ingest(client, "lib", pdfs.make_pdf(["a page"]), metadata={"doc_id": "d1"})
    eng = client.app.state.engine
    real = eng.document

    def leaky(library: str, doc_id: str) -> dict[str, Any]:
        return {**real(library, doc_id), "internal_path": "/var/lib/ragspine/x"}

    assert client.get("/v1/libraries/lib/documents/d1").status_code == 200
    eng.document = leaky
    try:
        r = client.get("/v1/libraries/lib/documents/d1")
    finally:
        eng.document = real
    assert r.status_code == 500
    assert "internal_path" not in r.text


@given(st.text(max_size=30))
@settings(max_examples=400)
def test_the_query_pattern_is_the_servers_query_check(query: str) -> None:
    from pydantic import ValidationError

    from ragspine.api import SearchRequest
    from ragspine.api.names import QUERY_PATTERN

    # ECMA's '$' (JSON Schema) is the end of the string; Python's would also match before a
    # final newline.
    declared = re.search(QUERY_PATTERN.removesuffix("$") + r"\Z", query) is not None
    try:
        SearchRequest(query=query, libraries=["lib"])
        accepted = True
    except ValidationError:
        accepted = False
    assert declared == accepted, repr(query)


def test_an_upload_declares_its_metadata_as_a_json_object(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    content = schema["paths"]["/v1/libraries/{lib}/documents"]["post"]["requestBody"]["content"]
    part = content["multipart/form-data"]
    assert part["encoding"] == {"metadata": {"contentType": "application/json"}}
    body = schema["components"]["schemas"][part["schema"]["$ref"].rsplit("/", 1)[1]]
    assert body["properties"]["metadata"]["$ref"] == "#/components/schemas/UploadMetadata"
    meta = schema["components"]["schemas"]["UploadMetadata"]
    assert meta["properties"]["doc_id"]["pattern"] == DOC_ID_PATTERN
    assert meta["propertyNames"] == {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"}


def test_the_ingest_result_the_api_declares_is_the_one_the_indexer_reports() -> None:
    """The REST model mirrors ``ragspine.indexing.IngestResult`` field for field (types and
    defaults are the API's own): a field added to one and not the other would be sent
    undeclared, or declared and never sent."""
    import dataclasses

    from ragspine.api.resources import IngestResult as Declared
    from ragspine.indexing import IngestResult as Reported

    reported = {f.name: f for f in dataclasses.fields(Reported)}
    assert list(Declared.model_fields) == list(reported)
    for name, field in Declared.model_fields.items():
        f = reported[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert (field.get_default(call_default_factory=True) if not field.is_required() else dataclasses.MISSING) \
            == default, name
