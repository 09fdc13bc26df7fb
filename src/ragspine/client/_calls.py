"""Each REST operation once, as a :class:`Call`: method, path, parameters and how to read the
answer. :class:`ragspine.client.Client` and :class:`ragspine.client.AsyncClient` send the same
calls, one with a blocking and one with an async httpx client, so the two cannot disagree on
what an operation sends or how its answer is parsed."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from ragspine import api

T = TypeVar("T")
#: What a PDF, a relations file or a glossary may be given as: a path, the bytes, or an open
#: binary file.
FileInput = str | os.PathLike[str] | bytes | IO[bytes]


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    #: ``model``: parse the JSON body with ``parse``; ``none``: no body (204); ``bytes``: the body.
    reads: Literal["model", "none", "bytes"]
    parse: Any = None
    params: dict[str, Any] | None = None
    json: Any = None
    files: dict[str, tuple[str, Any, str]] | None = None
    data: dict[str, str] | None = None
    #: Files this call opened, closed after it is sent.
    opened: list[IO[bytes]] = field(default_factory=list)
    #: Error statuses whose body is the answer (``/readyz``'s 503 carries the checks).
    accept: tuple[int, ...] = ()


def _seg(value: str) -> str:
    """A path segment, percent-encoded: a name with '/' cannot reach another route."""
    return quote(str(value), safe="")


def _lib(library: str) -> str:
    return f"/v1/libraries/{_seg(library)}"


def _file(source: FileInput, filename: str | None, default: str, ctype: str,
          opened: list[IO[bytes]]) -> tuple[str, Any, str]:
    if isinstance(source, (bytes, bytearray)):
        return (filename or default, bytes(source), ctype)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        fh = path.open("rb")  # FileNotFoundError names the path
        opened.append(fh)
        return (filename or path.name, fh, ctype)
    return (filename or Path(getattr(source, "name", default) or default).name, source, ctype)


def _model(model: type[BaseModel]) -> Any:
    return model.model_validate


def _field(model: type[BaseModel], name: str) -> Any:
    return lambda body: getattr(model.model_validate(body), name)


# -- health -------------------------------------------------------------------------------------

def ready() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", "model", parse=dict, accept=(503,))


# -- libraries ----------------------------------------------------------------------------------

def create_library(name: str, **layout: Any) -> Call[api.LibraryCreated]:
    """``layout``: shard_number, replication_factor, write_consistency_factor, on_disk (None: the
    server's default), checked by the API's model before anything is sent."""
    body = api.CreateLibrary(name=name, **layout)
    return Call("POST", "/v1/libraries", "model", _model(api.LibraryCreated),
                json=body.model_dump(exclude_none=True))


def libraries() -> Call[list[api.LibrarySummary]]:
    return Call("GET", "/v1/libraries", "model", _field(api.LibraryList, "libraries"))


def delete_library(name: str) -> Call[None]:
    return Call("DELETE", _lib(name), "none")


def add_dense(library: str) -> Call[api.DenseAdded]:
    return Call("POST", f"{_lib(library)}/dense", "model", _model(api.DenseAdded))


# -- documents ----------------------------------------------------------------------------------

def upload(library: str, pdf: FileInput, metadata: Mapping[str, Any] | None, filename: str | None) -> Call[api.Job]:
    """Queue an upload (202 + the job); waiting is the client's (``wait_for``): a request held
    open for a long OCR would outlive any read timeout, and the caller would lose the job id."""
    data = {"metadata": json.dumps(dict(metadata), ensure_ascii=False)} if metadata else None  # before a file opens
    opened: list[IO[bytes]] = []
    files = {"file": _file(pdf, filename, "document.pdf", "application/pdf", opened)}
    return Call("POST", f"{_lib(library)}/documents", "model", _model(api.Job), files=files, data=data, opened=opened)


def job(job_id: str) -> Call[api.Job]:
    return Call("GET", f"/v1/jobs/{_seg(job_id)}", "model", _model(api.Job))


def documents(library: str) -> Call[list[api.Document]]:
    return Call("GET", f"{_lib(library)}/documents", "model", _field(api.DocumentList, "documents"))


def document(library: str, doc_id: str) -> Call[api.Document]:
    return Call("GET", f"{_lib(library)}/documents/{_seg(doc_id)}", "model", _model(api.Document))


def delete_document(library: str, doc_id: str) -> Call[None]:
    return Call("DELETE", f"{_lib(library)}/documents/{_seg(doc_id)}", "none")


def page(library: str, doc_id: str, page: int) -> Call[api.Page]:
    return Call("GET", f"{_lib(library)}/documents/{_seg(doc_id)}/pages/{int(page)}", "model", _model(api.Page))


def thumbnail(library: str, doc_id: str, page: int) -> Call[bytes]:
    return Call("GET", f"{_lib(library)}/documents/{_seg(doc_id)}/pages/{int(page)}/thumbnail", "bytes")


def similarity_map(library: str, doc_id: str, page: int, query: str) -> Call[dict[str, Any]]:
    return Call("GET", f"{_lib(library)}/documents/{_seg(doc_id)}/pages/{int(page)}/similarity-map",
                "model", dict, params={"query": query, "format": "json"})


# -- search -------------------------------------------------------------------------------------

def search(query: str | api.SearchRequest, libraries: str | Sequence[str] | None,
           options: Mapping[str, Any]) -> Call[api.SearchResponse]:
    if isinstance(query, api.SearchRequest):
        if libraries is not None or options:
            raise TypeError("pass either a SearchRequest or a query with its libraries and options")
        req = query
    else:
        if libraries is None:
            raise TypeError("search() needs the libraries to search")
        libs = [libraries] if isinstance(libraries, str) else list(libraries)
        req = api.SearchRequest(query=query, libraries=libs, **options)  # the server's own checks
    return Call("POST", "/v1/search", "model", _model(api.SearchResponse),
                json=req.model_dump(mode="json", exclude_defaults=True))


# -- relation graph -----------------------------------------------------------------------------

def upload_relations(library: str, source: FileInput, mode: str, filename: str | None
                     ) -> Call[api.RelationsUploaded]:
    opened: list[IO[bytes]] = []
    ctype = "application/json" if str(filename or getattr(source, "name", "")).endswith(".json") else "text/csv"
    files = {"file": _file(source, filename, "relations.csv", ctype, opened)}
    return Call("POST", f"{_lib(library)}/graph/relations", "model", _model(api.RelationsUploaded),
                params={"mode": mode}, files=files, opened=opened)


def entities(library: str, q: str, type_: str | None, limit: int) -> Call[list[api.Entity]]:
    params: dict[str, Any] = {"q": q, "limit": limit}
    if type_ is not None:
        params["type"] = type_
    return Call("GET", f"{_lib(library)}/graph/entities", "model", _field(api.EntityList, "entities"),
                params=params)


def _relation(relation: str | Sequence[str] | None) -> str | None:
    return relation if relation is None or isinstance(relation, str) else ",".join(relation)


def neighbors(library: str, entity: str, relation: str | Sequence[str] | None, depth: int, direction: str,
              limit: int | None) -> Call[api.GraphNeighbors]:
    params: dict[str, Any] = {"depth": depth, "direction": direction}
    if (rel := _relation(relation)) is not None:
        params["relation"] = rel
    if limit is not None:
        params["limit"] = limit
    return Call("GET", f"{_lib(library)}/graph/entities/{_seg(entity)}/neighbors", "model",
                _model(api.GraphNeighbors), params=params)


def paths(library: str, source: str, target: str, max_hops: int | None,
          relation: str | Sequence[str] | None) -> Call[api.GraphPaths]:
    params: dict[str, Any] = {"from": source, "to": target}
    if max_hops is not None:
        params["max_hops"] = max_hops
    if (rel := _relation(relation)) is not None:
        params["relation"] = rel
    return Call("GET", f"{_lib(library)}/graph/paths", "model", _model(api.GraphPaths), params=params)


# -- query chain --------------------------------------------------------------------------------

def upload_glossary(library: str, source: FileInput, filename: str | None) -> Call[api.Glossary]:
    opened: list[IO[bytes]] = []
    files = {"file": _file(source, filename, "glossary.csv", "text/csv", opened)}
    return Call("POST", f"{_lib(library)}/glossary", "model", _model(api.Glossary), files=files, opened=opened)


def glossary(library: str) -> Call[api.Glossary]:
    return Call("GET", f"{_lib(library)}/glossary", "model", _model(api.Glossary))


def delete_glossary(library: str) -> Call[None]:
    return Call("DELETE", f"{_lib(library)}/glossary", "none")


def gaps(library: str, limit: int) -> Call[list[api.Gap]]:
    return Call("GET", f"{_lib(library)}/gaps", "model", _field(api.GapList, "gaps"), params={"limit": limit})


def delete_gap(library: str, gap_id: str) -> Call[None]:
    return Call("DELETE", f"{_lib(library)}/gaps/{_seg(gap_id)}", "none")


def clear_gaps(library: str) -> Call[int]:
    return Call("DELETE", f"{_lib(library)}/gaps", "model", _field(api.GapsCleared, "deleted"))
