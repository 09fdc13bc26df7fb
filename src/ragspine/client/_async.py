"""The async client: :class:`ragspine.client.Client`'s methods as coroutines, method for method
(``tests/client/test_client.py`` checks the two have the same methods and signatures)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from ragspine import api
from ragspine.client import _calls as calls
from ragspine.client._calls import Call, FileInput
from ragspine.client._common import (
    CHUNK,
    DEFAULT_URL,
    FIRST_POLL_S,
    TAR,
    PathLike,
    backup_request,
    check,
    finished,
    headers_for,
    next_delay,
    part_file,
    read,
    restore_params,
    timed_out,
)

T = TypeVar("T")


class AsyncClient:
    """ragspine's REST API as coroutines, answers as the API's own models (:mod:`ragspine.api`).

    ``Client("http://host:8000", api_key=...)``; ``transport=`` takes any httpx transport (an
    ``httpx.ASGITransport`` over an app runs it in process, in the same event loop). Errors the server answers raise
    :class:`~ragspine.client.ApiError`; a server that cannot be reached raises httpx's
    ``TransportError``.
    """

    def __init__(self, url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None, headers: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/")

        def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=self.url, headers=headers_for(api_key, headers), timeout=timeout,
                                     transport=transport)

        self._make = make
        self._http = make()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client().aclose()  # another loop's connections went with that loop

    def absolute(self, path: str) -> str:
        """A URL the server answered relative (a hit's ``thumbnail_url``), made absolute."""
        return path if "://" in path else f"{self.url}{path}"

    def _client(self) -> httpx.AsyncClient:
        """The httpx client of the running event loop. Its pooled connections belong to the loop
        that opened them: used from another loop (a second ``asyncio.run``), the client starts
        afresh, and the old loop's connections are dropped with it."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                self._http = self._make()
            self._loop = loop
        return self._http

    async def _send(self, call: Call[T]) -> T:
        try:
            r = await self._client().request(call.method, call.path, params=call.params, json=call.json,
                                   files=call.files, data=call.data)
        finally:
            for fh in call.opened:
                fh.close()
        check(r.status_code, r.content, r.headers.get("content-type", ""), call.accept)
        return read(call, r)

    # -- health ----------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """``/readyz``: the store and each configured model's state."""
        return await self._send(calls.ready())

    # -- libraries -------------------------------------------------------------------------------

    async def create_library(self, name: str, *, shard_number: int | None = None,
                            replication_factor: int | None = None, write_consistency_factor: int | None = None,
                            on_disk: dict[str, bool] | None = None) -> api.LibraryCreated:
        """A new library. Its layout, on a Qdrant server: shards, copies of each, copies a write
        waits for, and vector fields whose originals stay on disk (None: the server's default)."""
        return await self._send(calls.create_library(name, shard_number=shard_number, replication_factor=replication_factor,
                                                  write_consistency_factor=write_consistency_factor, on_disk=on_disk))

    async def libraries(self) -> list[api.LibrarySummary]:
        """The libraries this key may read, with their document and page counts."""
        return await self._send(calls.libraries())

    async def delete_library(self, name: str) -> None:
        return await self._send(calls.delete_library(name))

    async def add_dense(self, library: str) -> api.DenseAdded:
        """Give a library the server's dense vectors, from the text it stores."""
        return await self._send(calls.add_dense(library))

    # -- documents -------------------------------------------------------------------------------

    async def upload(self, library: str, pdf: FileInput, *, metadata: Mapping[str, Any] | None = None,
               filename: str | None = None, wait: bool = False, timeout: float = 3600.0) -> api.Job:
        """Upload a PDF (a path, bytes or a binary file). ``metadata``: doc_id, title, entity,
        period, sensitivity, page_sensitivity... The job as queued (``wait=False``), or ended,
        its OCR included (``wait=True``: polled, up to ``timeout`` seconds; a failed ingest
        raises :class:`JobFailedError`, one still running :class:`JobTimeoutError`, which
        carries the job id)."""
        job = await self._send(calls.upload(library, pdf, metadata, filename))
        return (await self.wait_for(job, timeout=timeout, ocr=True)) if wait else job

    async def job(self, job_id: str) -> api.Job:
        return await self._send(calls.job(job_id))

    async def wait_for(self, job: str | api.Job, *, timeout: float = 600.0, ocr: bool = False) -> api.Job:
        """Poll a job until it ends (``ocr=True``: until its OCR has ended too). A failed job
        raises :class:`JobFailedError`; one still running at ``timeout`` :class:`JobTimeoutError`."""
        job_id = job if isinstance(job, str) else job.id
        deadline = time.monotonic() + timeout
        delay = FIRST_POLL_S
        while True:  # polled at least once, and once more at the deadline
            state = await self.job(job_id)
            if finished(state, ocr):
                return state
            left = deadline - time.monotonic()
            if left <= 0:
                raise timed_out(job_id)
            await asyncio.sleep(min(delay, left))
            delay = next_delay(delay)

    async def documents(self, library: str) -> list[api.Document]:
        return await self._send(calls.documents(library))

    async def document(self, library: str, doc_id: str) -> api.Document:
        return await self._send(calls.document(library, doc_id))

    async def delete_document(self, library: str, doc_id: str) -> None:
        return await self._send(calls.delete_document(library, doc_id))

    async def page(self, library: str, doc_id: str, page: int) -> api.Page:
        """A page's text and passages (chunk id, bbox, text): what a hit on it cites."""
        return await self._send(calls.page(library, doc_id, page))

    async def thumbnail(self, library: str, doc_id: str, page: int) -> bytes:
        """The page's thumbnail (PNG bytes)."""
        return await self._send(calls.thumbnail(library, doc_id, page))

    async def similarity_map(self, library: str, doc_id: str, page: int, query: str) -> dict[str, Any]:
        """The query's patch-level similarity map on a page (needs a page model), as JSON."""
        return await self._send(calls.similarity_map(library, doc_id, page, query))

    # -- search ----------------------------------------------------------------------------------

    async def search(self, query: str | api.SearchRequest, libraries: str | Sequence[str] | None = None,
               **options: Any) -> api.SearchResponse:
        """Search ``libraries``. ``options`` are the request's other fields (mode, top_k,
        filters, rerank, expand, rewrite, corrective, postprocess...), checked by the same
        model the server checks with; or pass a whole :class:`ragspine.api.SearchRequest`."""
        return await self._send(calls.search(query, libraries, options))

    # -- relation graph --------------------------------------------------------------------------

    async def upload_relations(self, library: str, source: FileInput, *, mode: str = "replace",
                         filename: str | None = None) -> api.RelationsUploaded:
        return await self._send(calls.upload_relations(library, source, mode, filename))

    async def entities(self, library: str, q: str = "", *, type: str | None = None, limit: int = 20) -> list[api.Entity]:
        return await self._send(calls.entities(library, q, type, limit))

    async def neighbors(self, library: str, entity: str, *, relation: str | Sequence[str] | None = None,
                  depth: int = 1, direction: str = "both", limit: int | None = None) -> api.GraphNeighbors:
        return await self._send(calls.neighbors(library, entity, relation, depth, direction, limit))

    async def paths(self, library: str, source: str, target: str, *, max_hops: int | None = None,
              relation: str | Sequence[str] | None = None) -> api.GraphPaths:
        return await self._send(calls.paths(library, source, target, max_hops, relation))

    # -- query chain -----------------------------------------------------------------------------

    async def upload_glossary(self, library: str, source: FileInput, *, filename: str | None = None) -> api.Glossary:
        return await self._send(calls.upload_glossary(library, source, filename))

    async def glossary(self, library: str) -> api.Glossary:
        return await self._send(calls.glossary(library))

    async def delete_glossary(self, library: str) -> None:
        return await self._send(calls.delete_glossary(library))

    async def gaps(self, library: str, *, limit: int = 100) -> list[api.Gap]:
        return await self._send(calls.gaps(library, limit))

    async def delete_gap(self, library: str, gap_id: str) -> None:
        return await self._send(calls.delete_gap(library, gap_id))

    async def clear_gaps(self, library: str) -> int:
        return await self._send(calls.clear_gaps(library))

    # -- backup and restore ----------------------------------------------------------------------

    async def backup(self, dest: PathLike, library: str | Sequence[str] | None = None, *, native: bool = True) -> int:
        """Download a backup of ``library`` (one name, several, or None: every library) into the
        file ``dest``; its size in bytes. Needs a key allowed every library (``*``). ``native``
        False: without the embedded store's own files (a faster backup, a slower restore)."""
        path, params = backup_request(library, native)
        final, part = part_file(dest)
        async with self._client().stream("GET", path, params=params, timeout=None) as r:
            if r.status_code != 200:
                await r.aread()
                check(r.status_code, r.content, r.headers.get("content-type", ""))
            size = 0
            try:
                with open(part, "wb") as fh:  # noqa: ASYNC230 - local disk, written as the bytes come
                    async for block in r.aiter_bytes():
                        fh.write(block)
                        size += len(block)
                part.replace(final)
            finally:
                part.unlink(missing_ok=True)
        return size

    async def restore(self, source: PathLike, *, as_name: str | None = None, bm25_only: bool = False
                      ) -> api.Restored:
        """Upload the backup file ``source`` and restore its libraries (the one library as
        ``as_name``; ``bm25_only`` for vectors of models the server does not load)."""
        async def body() -> AsyncIterator[bytes]:
            with open(source, "rb") as fh:  # noqa: ASYNC230 - local disk, read as the upload goes
                while block := fh.read(CHUNK):
                    yield block

        r = await self._client().post("/v1/restore", params=restore_params(as_name, bm25_only), content=body(),
                                      headers={"Content-Type": TAR}, timeout=None)
        check(r.status_code, r.content, r.headers.get("content-type", ""))
        return api.Restored.model_validate(r.json())
