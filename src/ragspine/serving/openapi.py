"""The OpenAPI document says what the API really answers on errors.

Every error ragspine returns is ``application/problem+json`` (RFC 9457) with the body of
:class:`Problem`, but FastAPI's generated schema declares ``application/json`` with its own
validation-error body for 422 and nothing for the other errors, so a client generator or a
schema fuzzer run against ``/openapi.json`` sees every error as undocumented. This module
rewrites the generated document once, in one place, so routes need no per-route boilerplate:

- every operation declares 422 (validation) and 500; operations under ``/v1`` also 401 and 403
  (API keys), 404, 409 (model or settings mismatch) and 503 (a model or the store is down);
  operations that take an upload also 413 and 415;
- every 4xx/5xx response an operation declares is ``application/problem+json`` with the
  ``Problem`` schema, except one a route declared with its own content (``/readyz`` answers 503
  with its checks, not a problem).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ragspine.api.resources import Problem

PROBLEM = "application/problem+json"
_REF = {"$ref": "#/components/schemas/Problem"}

#: Status -> description, for the statuses declared by the rules above.
_STATUS = {
    401: "No valid API key (RAGSPINE_API_KEYS is set)",
    403: "The API key does not cover this library",
    404: "Unknown library, document, page, job or entity",
    409: "The library was built with another model or BM25 settings; re-index it",
    413: "Upload too large (bytes, pages or page size)",
    415: "The upload is not a PDF",
    422: "Invalid request: what was received and what is allowed",
    500: "Unexpected error (logged on the server)",
    503: "A model the request needs, or the store, is unavailable; nothing was changed",
}


_LIB = "$response.body#/name"
#: OpenAPI links: from an operation's response to the operations it leads to, with the
#: parameters taken from that response. A generated client or a stateful fuzzer
#: (schemathesis) follows them from a new library to its routes and from an upload to its job.
#: ``{operationId: {status: {link name: (target operationId, {parameter: runtime expression})}}}``;
#: ``tests/serving/test_openapi.py`` checks every target and parameter exists.
LINKS: dict[str, dict[str, dict[str, tuple[str, dict[str, str]]]]] = {
    "create_library": {"201": {
        "UploadDocument": ("upload_document", {"lib": _LIB}),
        "ListDocuments": ("list_documents", {"lib": _LIB}),
        "AddDense": ("add_dense", {"lib": _LIB}),
        "UploadRelations": ("upload_relations", {"lib": _LIB}),
        "ListEntities": ("entities", {"lib": _LIB}),
        "FindPath": ("paths", {"lib": _LIB}),
        "UploadGlossary": ("upload_glossary", {"lib": _LIB}),
        "GetGlossary": ("get_glossary", {"lib": _LIB}),
        "DeleteGlossary": ("delete_glossary", {"lib": _LIB}),
        "ListGaps": ("list_gaps", {"lib": _LIB}),
        "ClearGaps": ("clear_gaps", {"lib": _LIB}),
        "DeleteLibrary": ("delete_library", {"lib": _LIB}),
        "BackupLibrary": ("backup_library", {"lib": _LIB}),
    }},
    "upload_document": {
        "202": {"GetJob": ("get_job", {"job_id": "$response.body#/id"})},
        "201": {"GetDocument": ("get_document", {"lib": "$response.body#/library",
                                                 "doc_id": "$response.body#/doc_id"})},
    },
    "get_job": {"200": {"GetDocument": ("get_document", {"lib": "$response.body#/library",
                                                         "doc_id": "$response.body#/doc_id"})}},
    "list_documents": {"200": {
        "GetDocument": ("get_document", {"lib": "$request.path.lib",
                                         "doc_id": "$response.body#/documents/0/doc_id"}),
    }},
    "get_document": {"200": {
        "GetPage": ("get_page", {"lib": "$request.path.lib", "doc_id": "$response.body#/doc_id",
                                 "n": "$response.body#/page_numbers/0"}),
        "Thumbnail": ("thumbnail", {"lib": "$request.path.lib", "doc_id": "$response.body#/doc_id",
                                    "n": "$response.body#/page_numbers/0"}),
        "SimilarityMap": ("similarity_map_route", {"lib": "$request.path.lib", "doc_id": "$response.body#/doc_id",
                                                   "n": "$response.body#/page_numbers/0"}),
        "DeleteDocument": ("delete_document", {"lib": "$request.path.lib", "doc_id": "$response.body#/doc_id"}),
    }},
    "search": {"200": {
        "GetPage": ("get_page", {"lib": "$response.body#/hits/0/library_id",
                                 "doc_id": "$response.body#/hits/0/doc_id", "n": "$response.body#/hits/0/page"}),
        "GetDocument": ("get_document", {"lib": "$response.body#/hits/0/library_id",
                                         "doc_id": "$response.body#/hits/0/doc_id"}),
        "Thumbnail": ("thumbnail", {"lib": "$response.body#/hits/0/library_id",
                                    "doc_id": "$response.body#/hits/0/doc_id", "n": "$response.body#/hits/0/page"}),
    }},
    "entities": {"200": {
        "Neighbors": ("neighbors", {"lib": "$request.path.lib", "entity_id": "$response.body#/entities/0/id"}),
    }},
    "list_gaps": {"200": {
        "DeleteGap": ("delete_gap", {"lib": "$request.path.lib", "gap_id": "$response.body#/gaps/0/gap_id"}),
    }},
}


def typed(model: type) -> dict[str, Any]:
    """A route's declared response: validated against the API's model (:mod:`ragspine.api`)
    before it is sent, with the fields the route left out (``via`` without ``expand``) left out."""
    return {"response_model": model, "response_model_exclude_unset": True}


def _statuses(path: str, op: dict[str, Any]) -> set[int]:
    codes = {422, 500}
    if path.startswith("/v1/"):
        codes |= {401, 403, 404, 409, 503}
    body = op.get("requestBody", {}).get("content", {})
    if "multipart/form-data" in body or "application/x-tar" in body:  # an upload: too big, not the file it must be
        codes |= {413, 415}
    return codes


def problem_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare every error response as ``application/problem+json``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        for path, item in schema.get("paths", {}).items():
            for op in item.values():
                responses = op.setdefault("responses", {})
                for code in _statuses(path, op):
                    responses.setdefault(str(code), {"description": _STATUS[code]})
                for code, resp in responses.items():
                    if code[:1] not in ("4", "5"):
                        continue
                    content = resp.get("content")
                    if content and PROBLEM not in content and not _is_fastapi_validation(content):
                        continue  # a route's own error body (readyz's checks)
                    resp["content"] = {PROBLEM: {"schema": _REF}}
                    if resp.get("description") in (None, "", "Validation Error"):
                        resp["description"] = _STATUS.get(int(code), "Error")
                op["responses"] = dict(sorted(responses.items()))
                for code, links in LINKS.get(op.get("operationId", ""), {}).items():
                    responses[code]["links"] = {
                        name: {"operationId": target, "parameters": params}
                        for name, (target, params) in links.items()}
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Problem"] = Problem.model_json_schema()
        _json_metadata_part(schema, components)
        for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body, never sent
            if not _referenced(schema, unused):
                components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _json_metadata_part(schema: dict[str, Any], components: dict[str, Any]) -> None:
    """The upload's ``metadata`` form part is a JSON object (FastAPI can only declare a string
    there): declared as :class:`ragspine.api.UploadMetadata` with its part's content type, so
    a generated client sends an object the server accepts."""
    from ragspine.api import UploadMetadata

    op = schema["paths"].get("/v1/libraries/{lib}/documents", {}).get("post")
    if op is None:
        return
    content = op["requestBody"]["content"]["multipart/form-data"]
    body = components[content["schema"]["$ref"].rsplit("/", 1)[1]]
    components["UploadMetadata"] = UploadMetadata.model_json_schema()
    body["properties"]["metadata"] = {"$ref": "#/components/schemas/UploadMetadata",
                                      "description": body["properties"]["metadata"].get("description", "")}
    content["encoding"] = {"metadata": {"contentType": "application/json"}}


def _is_fastapi_validation(content: dict[str, Any]) -> bool:
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    return ref.endswith("/HTTPValidationError")


def _referenced(schema: dict[str, Any], name: str) -> bool:
    """Whether anything but the schema itself points at ``components.schemas[name]``."""
    target = f"#/components/schemas/{name}"

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            return any((k == "$ref" and v == target) or walk(v) for k, v in node.items())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    comps = schema.get("components", {}).get("schemas", {})
    return walk(schema.get("paths", {})) or walk({k: v for k, v in comps.items() if k != name})
