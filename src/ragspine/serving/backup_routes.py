"""REST routes of backup and restore (:mod:`ragspine.backup`), mounted by
:func:`ragspine.serving.app.create_app`.

A backup streams out as a download and a restore streams in as an upload: no server-side path
is ever named, so no request can read or write a file of the caller's choosing. Both need a key
allowed every library (``*``), or no keys configured: a backup holds everything a library has.

The backup is written to a spool file under the data dir inside the server (each library under
its write lock, so it is consistent while the server keeps serving and writing), then sent: a
slow download never holds a library's lock. A restore is spooled to disk whole (the reader
checks the file before writing anything), then restored.
"""

# No ``from __future__ import annotations``: FastAPI reads the route signatures at runtime.
import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from ragspine.api import LIBRARY_NAME_PATTERN, Restored
from ragspine.errors import InvalidRequestError, OversizeError
from ragspine.serving.auth import Auth, Principal
from ragspine.serving.openapi import typed
from ragspine.serving.params import Lib
from ragspine.serving.spool import spool, too_big

if TYPE_CHECKING:
    from ragspine.config import Settings
    from ragspine.engine import Engine

_CHUNK = 1 << 20
TAR = "application/x-tar"


def _require_all(who: Principal) -> None:
    if not who.everything:  # a backup holds every document: a key with a filter may not take one
        raise HTTPException(403, "backup and restore need an API key allowed every library ('*'), "
                                 "without a filter")


def backup_router(engine: "Engine", auth: Auth, settings: "Settings", folder: Path) -> APIRouter:
    """``GET /v1/libraries/{lib}/backup``, ``GET /v1/backup`` and ``POST /v1/restore``."""
    router = APIRouter(tags=["backup"])
    Who = Annotated[Principal, Depends(auth)]
    Native = Annotated[bool, Query(description="on the embedded store, also its own files, indexed: a restore "
                                               "onto an embedded store then copies them (~1.6x a plain copy) "
                                               "instead of rebuilding the index; false: a faster backup")]
    download = {"200": {"description": "the backup file (POSIX tar; restore it with POST /v1/restore or "
                                       "`ragspine restore FILE`)", "content": {TAR: {"schema": {
                                           "type": "string", "format": "binary"}}}}}

    async def _send(names: list[str], filename: str, native: bool) -> FileResponse:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".rsbak.part")
        path = Path(tmp)
        try:
            with os.fdopen(fd, "wb") as fh:
                await asyncio.to_thread(lambda: engine.backup(names, fh, native=native))
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return FileResponse(path, media_type=TAR, filename=filename,
                            background=BackgroundTask(path.unlink, missing_ok=True))

    @router.get("/v1/libraries/{lib}/backup", response_class=FileResponse, responses=download)  # type: ignore[arg-type]
    async def backup_library(lib: Lib, who: Who, native: Native = True) -> FileResponse:
        """A backup of one library as a file download: its record (with every vector field's
        model), documents, points with all their vectors, relation graph, glossary, gap log,
        thumbnails and owed-OCR PDFs. Taken under the library's write lock: consistent while
        searches and ingests go on (a commit waits for it)."""
        _require_all(who)
        return await _send([lib], f"{lib}.rsbak", native)

    @router.get("/v1/backup", response_class=FileResponse, responses=download)  # type: ignore[arg-type]
    async def backup_libraries(
        who: Who,
        library: Annotated[list[str] | None, Query(description="libraries to back up (default: all)",
                                                   json_schema_extra={"items": {"pattern": LIBRARY_NAME_PATTERN}})
                           ] = None,
        native: Native = True,
    ) -> FileResponse:
        """A backup of several libraries (each consistent on its own) in one file."""
        _require_all(who)
        names = list(dict.fromkeys(library)) if library else engine.list_libraries()
        if not names:
            raise InvalidRequestError("there is no library to back up")
        return await _send(names, "ragspine.rsbak", native)

    @router.post("/v1/restore", status_code=201, openapi_extra={"requestBody": {
        "required": True, "content": {TAR: {"schema": {"type": "string", "format": "binary"}},
                                      "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "description": "a backup file (the body itself, not a form)"}}, **typed(Restored))
    async def restore(
        request: Request,
        who: Who,
        as_: Annotated[str | None, Query(alias="as", description="restore the backup's one library under this name",
                                         json_schema_extra={"pattern": LIBRARY_NAME_PATTERN})] = None,
        bm25_only: Annotated[bool, Query(description="keep BM25 only: for a backup whose vectors came from "
                                                     "models this server does not load")] = False,
    ) -> dict[str, Any]:
        """Restore the libraries of a backup file sent as the request body. Checked whole before
        anything is written; a library that exists is never overwritten (409: use ``as``); vectors
        of other models than this server's are refused (409) unless ``bm25_only``."""
        _require_all(who)
        declared = request.headers.get("content-length")
        limit = settings.max_restore_bytes
        if declared and declared.isdigit() and int(declared) > limit:
            raise OversizeError(_too_big(int(declared), limit))
        path = await spool(request.stream(), folder, limit, suffix=".rsbak.part", too_large=_too_big,
                           empty=InvalidRequestError("the request has no body: send the backup file as the body"))
        try:
            report = await asyncio.to_thread(engine.restore, path, as_name=as_, bm25_only=bm25_only,
                                             label="the uploaded backup")
        finally:
            path.unlink(missing_ok=True)
        return report.to_json()

    return router


def _too_big(size: int, limit: int) -> str:
    return too_big(size, limit, "RAGSPINE_MAX_RESTORE_BYTES", "the backup")
