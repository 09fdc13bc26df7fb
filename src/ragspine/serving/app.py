"""The REST API: the one definition of ragspine's HTTP interface.

``create_app(settings)`` builds it; ``ragspine serve`` runs it with uvicorn, and the Ray Serve
ingress wraps the same app. Every error is ``application/problem+json`` (RFC 9457) with a
stable ``type``; no stack trace ever reaches a client.
"""


import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragspine import __version__, api
from ragspine.catalog.formats import LibraryUnavailableError
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import (
    EmptyPDFError,
    InvalidRequestError,
    NotFoundError,
    OcrClaimLostError,
    OversizeError,
    RagspineError,
)
from ragspine.indexing import parse_metadata
from ragspine.indexing.pdf import sniff_pdf
from ragspine.retrieval.explain import heatmap_png
from ragspine.runtimes import limit_threads
from ragspine.serving.auth import Auth, Principal
from ragspine.serving.backup_routes import backup_router
from ragspine.serving.chain_routes import chain_router
from ragspine.serving.graph_routes import graph_router
from ragspine.serving.jobs import Job, JobRecords, JobRunner
from ragspine.serving.mcp_server import mount_mcp
from ragspine.serving.metrics import Metrics
from ragspine.serving.openapi import PROBLEM, problem_openapi, typed
from ragspine.serving.params import DocId, JobId, Lib, PageNo
from ragspine.serving.spool import CHUNK, STALE_SPOOL_SECONDS, spool, spool_dir, too_big
from ragspine.serving.web_routes import mount_web

logger = logging.getLogger(__name__)



def problem(status: int, type_: str, title: str, detail: str) -> JSONResponse:
    return JSONResponse(
        {"type": f"/problems/{type_}", "title": title, "status": status, "detail": detail},
        status_code=status,
        media_type=PROBLEM,
    )


def create_app(settings: Settings, engine: Engine | None = None, *, close_engine: bool = False) -> FastAPI:
    """Build the app. Pass ``engine`` to share one (tests, Ray ingress); else one is opened,
    and closed at shutdown. ``close_engine``: the shutdown closes a passed engine too (``ragspine
    demo``: uvicorn re-raises SIGTERM once it has shut down, so the command's own ``finally``
    never runs)."""
    # The server's share of the cores, before the engine loads any model (ragspine.runtimes).
    blas, runtime = settings.thread_rule()
    limit_threads(blas, runtime)
    logger.info("threads: BLAS %d, model runtimes %d", blas, runtime)
    eng = engine if engine is not None else Engine(settings)
    eng.models.serve_queries(settings.query_batch_size)  # batched and warm (ragspine.models.batching)
    jobs = JobRunner(settings.ingest_workers, JobRecords(
        eng.store, eng.replica, heartbeat=settings.job_stale_seconds / 6, stale_after=settings.job_stale_seconds,
        retention=settings.job_retention_days * 86400))
    metrics = Metrics()
    pool = eng.indexer.ocr_pool
    metrics.ocr_backlog(lambda: eng.ocr_queue.backlog, lambda: pool.backlog if pool is not None else 0)
    metrics.dense_backlog(lambda: eng.dense_queue.backlog)
    defer_dense = eng.defer_dense(serving=True)
    auth = Auth(settings.api_key_map(), settings.api_keys_file)
    # One process owns an embedded store's data dir: every leftover upload there is a crash's.
    upload_dir = spool_dir(Path(settings.data_dir) / "uploads", eng.replica,
                           stale_after=STALE_SPOOL_SECONDS if eng.libraries.leased else 0.0)

    def resume_ocr() -> None:
        # OCR that a stopped process owed (ragspine.indexing.ocr_phase) resumes in the background.
        # With writer leases, several replicas share the libraries: the OCR claims' sweep instead.
        try:
            owed = eng.resume_ocr()
            dense = eng.resume_dense()  # and the dense phases (ragspine.indexing.dense_phase)
        except Exception:  # a closed engine, a library being deleted: the CLI resumes it later
            logger.warning("could not resume the owed OCR or dense phases of this data dir", exc_info=True)
            return
        if owed or dense:
            logger.info("resuming the OCR of %d documents and the dense phase of %d", len(owed), len(dense))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not eng.libraries.leased:
            threading.Thread(target=resume_ocr, name="ragspine-ocr-resume", daemon=True).start()
        else:  # (the Ray ingress runs this lifespan too)
            eng.start_ocr_sweep()  # now and every RAGSPINE_OCR_SWEEP_SECONDS (ragspine.indexing.ocr_sweep)
        async with mcp.running():
            yield
        await asyncio.to_thread(eng.stop_ocr_sweep)  # a stopping replica takes no more owed OCR
        # A stop (SIGTERM): running and queued ingests get the drain time, then stop uncommitted;
        # the OCR second phases get what is left of it, then stop at their next page (their first
        # versions stay live, and the next start finishes them).
        # Ctrl-C (the CLI sets ``interrupted``): the second phases stop at once, not after a drain.
        deadline = time.monotonic() + settings.drain_seconds
        await asyncio.to_thread(jobs.shutdown, settings.drain_seconds)
        if engine is None or close_engine:  # else its owner's to stop (the Ray ingress drains its own)
            ocr_drain = 0.0 if app.state.interrupted else max(0.0, deadline - time.monotonic())
            await asyncio.to_thread(eng.close, ocr_drain)

    app = FastAPI(
        title="ragspine",
        version=__version__,
        description="Multimodal retrieval for chart-heavy PDF reports: ranked pages and passages "
        "with citations (document, 1-based page, bbox in PDF points, chunk).",
        lifespan=lifespan,
        # Operation ids are the route functions' names (search, get_document): what generated
        # clients call their methods, and what the OpenAPI links (serving.openapi) point at.
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.engine = eng
    app.state.interrupted = False  # set by the CLI's server on Ctrl-C (see the lifespan above)
    app.state.jobs = jobs
    app.state.metrics = metrics

    # -- errors -------------------------------------------------------------------------------

    @app.exception_handler(RagspineError)
    async def _ragspine_error(_: Request, exc: RagspineError) -> JSONResponse:
        if exc.status >= 500:
            logger.error("request failed: %s", exc.type)
        return problem(exc.status, exc.type, exc.title, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        parts = []
        for e in errs[:3]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body",))
            parts.append(f"{loc or 'request'}: {e.get('msg')}")
        return problem(422, "invalid-request", "Invalid request", "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        titles = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
                  405: "Method not allowed"}
        kinds = {400: "bad-request", 401: "unauthorized", 403: "forbidden", 404: "not-found",
                 405: "method-not-allowed"}
        resp = problem(exc.status_code, kinds.get(exc.status_code, "http-error"),
                       titles.get(exc.status_code, "HTTP error"), str(exc.detail))
        if exc.status_code == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return problem(500, "internal-error", "Internal error",
                       "the server hit an unexpected error; it has been logged")

    @app.middleware("http")
    async def _measure(request: Request, call_next: Any) -> Response:
        t0 = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            path = getattr(route, "path", "unmatched")
            metrics.observe(request.method, path, status, time.perf_counter() - t0)

    # -- health -------------------------------------------------------------------------------

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process is alive."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {
        "description": "Not ready: the checks say which part does not answer",
        "content": {"application/json": {}}}})
    def readyz() -> JSONResponse:
        """The store answers and the configured models are loaded."""
        checks: dict[str, str] = {}
        ok = True
        try:
            eng.list_libraries()
            checks["store"] = "ok"
        except Exception as exc:  # readiness reports, never raises
            ok = False
            checks["store"] = f"unavailable: {type(exc).__name__}"
        status = eng.models.status()
        checks["page_model"] = status["page"]
        checks["dense_model"] = status["dense"]
        checks["reranker"] = status["reranker"]
        # A configured model that failed leaves the server answering from the CPU path
        # (degraded): still ready, and the check says why.
        return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["health"], include_in_schema=False)
    def metrics_route() -> Response:
        body, ctype = metrics.render()
        return Response(body, media_type=ctype)

    # -- libraries ----------------------------------------------------------------------------

    Who = Annotated[Principal, Depends(auth)]

    @app.post("/v1/libraries", status_code=201, tags=["libraries"], **typed(api.LibraryCreated))
    def create_library(body: api.CreateLibrary, who: Who) -> dict[str, Any]:
        who.require_whole(body.name, "creating a library")
        rec = eng.create_library(body.name, shard_number=body.shard_number, replication_factor=body.replication_factor,
                                 write_consistency_factor=body.write_consistency_factor, on_disk=body.on_disk)
        return {"name": rec.name, "created_at": rec.created_at, "encoders": rec.encoders, "layout": rec.layout}

    @app.get("/v1/libraries", tags=["libraries"], **typed(api.LibraryList))
    def list_libraries(who: Who) -> dict[str, Any]:
        out = []
        for name in eng.list_libraries():
            if not who.allows(name):
                continue
            try:
                docs = eng.documents(name, who.scope(name))
            except LibraryUnavailableError as exc:  # listed, not readable: the detail says what to run
                out.append({"name": name, "documents": None, "pages": None, "problem": exc.detail})
                continue
            out.append({"name": name, "documents": len(docs),
                        "pages": sum(d["pages_indexed"] or 0 for d in docs)})
        return {"libraries": out}

    @app.delete("/v1/libraries/{lib}", status_code=204, tags=["libraries"])
    def delete_library(lib: Lib, who: Who) -> Response:
        who.require_whole(lib, "deleting the library")
        eng.delete_library(lib)
        return Response(status_code=204)

    @app.post("/v1/libraries/{lib}/dense", tags=["libraries"], **typed(api.DenseAdded))
    def add_dense(lib: Lib, who: Who) -> dict[str, Any]:
        """Give a library built without dense vectors those of the server's dense model, from
        the passage text it stores (no PDF is parsed again). Answers when done (~100 passages/s
        on 2 cores); ingests into the library wait meanwhile, searches go on without the dense
        channel until it is done."""
        who.require_whole(lib, "adding dense vectors")
        return eng.add_dense(lib).to_json()

    # -- documents ----------------------------------------------------------------------------

    @app.post("/v1/libraries/{lib}/documents", status_code=202, tags=["documents"], responses={
        201: {"model": api.Job, "description": "With wait=true: the job, ended"}, 202: {"model": api.Job}})
    async def upload_document(
        lib: Lib,
        request: Request,
        who: Who,
        file: Annotated[UploadFile, File(description="the PDF")],
        metadata: Annotated[str | None, Form(description="JSON object: doc_id, title, entity, "
                            "period, topic, geography, language, sensitivity, page_sensitivity, custom fields")] = None,
        wait: Annotated[bool, Query(description="answer when the ingest is done, its OCR included")] = False,
    ) -> JSONResponse:
        who.require_whole(lib, "uploading a document")
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_upload_bytes + 65536:
            raise OversizeError(too_big(int(declared), settings.max_upload_bytes))
        if metadata and "\ufffd" in metadata:
            raise InvalidRequestError("metadata is not valid UTF-8 (it decodes with U+FFFD replacement characters)")
        try:
            raw_meta = json.loads(metadata) if metadata else {}
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"metadata is not valid JSON: {exc.msg} at position {exc.pos}") from None
        meta = parse_metadata(raw_meta)
        # 404 / 409 before the upload is copied. (Starlette has already spooled a multipart
        # body to a temporary file by now; a declared Content-Length above the limit was
        # refused before that, and spool stops copying at the limit.)
        await asyncio.to_thread(eng.library, lib)
        tmp = await spool(_read(file), upload_dir, settings.max_upload_bytes, suffix=".pdf.part", too_large=too_big,
                          empty=EmptyPDFError("the uploaded file is empty (0 bytes)"))
        try:
            with open(tmp, "rb") as fh:
                sniff_pdf(fh.read(1024))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

        def work(job: Job) -> dict[str, Any]:
            def progress(done: int, total: int) -> None:
                job.pages_total = total  # total first: a poller never sees done > total
                job.pages_done = done
                jobs.progress(job)
                jobs.check_stopping()  # past the drain time: stop here, before the version is live

            def ocr_progress(done: int, total: int) -> None:
                job.ocr_pages_total = total
                job.ocr_pages_done = done
                jobs.progress(job)

            # Two phases: the job succeeds when the pages that need no content OCR are live; the
            # rest follow in the background, and the job keeps reporting them (job.ocr).
            result = eng.ingest(lib, tmp, meta, filename=file.filename, progress=progress,
                                ocr_progress=ocr_progress, defer_ocr=True, defer_dense=defer_dense)
            metrics.ingested(result.pages_indexed, len(result.pages_dropped), result.stages)
            job.ocr = result.ocr
            if result.ocr in ("pending", "failed") and result.doc_id is not None:
                job.ocr_pages_done, job.ocr_pages_total = 0, len(result.ocr_pending_pages)
                eng.finish_ocr_later(lib, result.doc_id, progress=ocr_progress,
                                     done=lambda fut: _ocr_ended(job, fut, result.pages_indexed, str(result.doc_id)))
            return result.to_json()

        def _ocr_ended(job: Job, fut: Any, first_pages: int, doc_id: str) -> None:
            exc = fut.exception() if not fut.cancelled() else None
            if fut.cancelled():
                job.ocr = "failed"
                job.ocr_error = {"type": "/problems/ocr-interrupted", "title": "OCR interrupted", "status": 503,
                                 "detail": "the server stopped before this document's OCR ran; it resumes at the "
                                           "next start (or: ragspine ocr --resume)"}
            elif isinstance(exc, OcrClaimLostError):
                job.ocr = "pending"  # the replica that took the document's OCR claim over finishes it
            elif exc is not None:
                job.ocr = "failed"
                job.ocr_error = (
                    {"type": f"/problems/{exc.type}", "title": exc.title, "status": exc.status, "detail": exc.detail}
                    if isinstance(exc, RagspineError) else
                    {"type": "/problems/internal-error", "title": "Internal error", "status": 500,
                     "detail": "the document's OCR failed on an unexpected error; see the server log"})
            else:
                res = fut.result()
                job.ocr = res.ocr if res is not None else _owed_elsewhere(doc_id)
                job.ocr_result = res.to_json() if res is not None else None
                if res is not None:
                    metrics.ingested(max(0, res.pages_indexed - first_pages), 0)
                    job.pages_total = job.pages_done = res.pages_indexed  # the new version, written
            metrics.ocr_finished.labels(job.ocr).inc()
            jobs.changed(job)
            job.settled.set()  # (still "pending": another replica finishes it; this job's part is over)

        def _owed_elsewhere(doc_id: str) -> Literal["pending", "done"]:
            # No new version: nothing was owed any more (done, or superseded by a newer upload),
            # or, with leases, another replica holds the document's OCR claim and finishes it.
            if not eng.libraries.leased:
                return "done"
            try:
                e = eng.libraries.doc_entry(lib, doc_id)
            except Exception:  # the library went meanwhile
                return "done"
            return "pending" if e and e.get("ocr") in ("pending", "failed") else "done"

        job = jobs.submit(lib, file.filename, work, cleanup=lambda: tmp.unlink(missing_ok=True))
        if wait:
            # Until nothing more happens to the document: both phases of a deferred OCR.
            await asyncio.to_thread(job.done.wait)
            await asyncio.to_thread(job.settled.wait)
            if job.state == "failed" and job.error:
                e = job.error
                return problem(e["status"], e["type"].removeprefix("/problems/"), e["title"], e["detail"])
            return JSONResponse(jobs.lookup(job.id), status_code=201)
        return JSONResponse(jobs.lookup(job.id), status_code=202,
                            headers={"Location": f"/v1/jobs/{job.id}"})

    @app.get("/v1/jobs/{job_id}", tags=["documents"], **typed(api.Job))
    def get_job(job_id: JobId, who: Who) -> dict[str, Any]:
        state = jobs.lookup(job_id)  # this replica's, else any replica's (from the store)
        # A key with a filter writes nothing, so no job is its own; another key's job would
        # name a document the filter may keep out.
        if state is None or not who.allows(state["library"]) or who.scope(state["library"]):
            raise NotFoundError(f"no job '{job_id}'")
        return state

    @app.get("/v1/libraries/{lib}/documents", tags=["documents"], **typed(api.DocumentList))
    def list_documents(lib: Lib, who: Who) -> dict[str, Any]:
        who.require(lib)
        return {"documents": eng.documents(lib, who.scope(lib))}

    @app.get("/v1/libraries/{lib}/documents/{doc_id}", tags=["documents"], **typed(api.Document))
    def get_document(lib: Lib, doc_id: DocId, who: Who) -> dict[str, Any]:
        who.require(lib)
        return eng.document(lib, doc_id, who.scope(lib))

    @app.delete("/v1/libraries/{lib}/documents/{doc_id}", status_code=204, tags=["documents"])
    def delete_document(lib: Lib, doc_id: DocId, who: Who) -> Response:
        who.require_whole(lib, "deleting a document")
        eng.delete_document(lib, doc_id)
        return Response(status_code=204)

    @app.get("/v1/libraries/{lib}/documents/{doc_id}/pages/{n}", tags=["documents"], **typed(api.Page))
    def get_page(lib: Lib, doc_id: DocId, n: PageNo, who: Who) -> dict[str, Any]:
        """A page's text and its passages (chunk id, bbox, text): what a hit on it cites."""
        who.require(lib)
        out = eng.page(lib, doc_id, n, who.scope(lib))
        out["thumbnail_url"] = f"/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/thumbnail"
        return out

    @app.get("/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/thumbnail", tags=["documents"],
             response_class=FileResponse)
    def thumbnail(lib: Lib, doc_id: DocId, n: PageNo, who: Who) -> FileResponse:
        who.require(lib)
        path = eng.thumbnail(lib, doc_id, n, who.scope(lib))
        return FileResponse(path, media_type="image/png",
                            headers={"Cache-Control": "private, max-age=300"})

    @app.get("/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/similarity-map", tags=["documents"],
             responses={200: {"content": {"image/png": {}, "application/json": {}}}})
    def similarity_map_route(lib: Lib, doc_id: DocId, n: PageNo, query: str, who: Who,
                             format: Literal["png", "json"] = "png") -> Response:
        """The query's patch-level similarity map on a page (needs a page model): a heat-map PNG
        with one pixel per patch, to stretch over the page image, or ``format=json`` for the
        per-token grids, their MaxSim contributions and the page's visual score."""
        who.require(lib)
        sm = eng.similarity_map(lib, doc_id, n, query, who.scope(lib))
        if format == "json":
            return JSONResponse(sm.to_json())
        return Response(heatmap_png(sm.combined), media_type="image/png",
                        headers={"Cache-Control": "private, max-age=300"})

    # -- search -------------------------------------------------------------------------------

    @app.post("/v1/search", tags=["search"], **typed(api.SearchResponse))
    def search(body: api.SearchRequest, who: Who) -> dict[str, Any]:
        for lib in body.libraries:
            who.require(lib)
        res = eng.search(body.scoped(who.scopes(body.libraries)))
        for reason in res.degraded_reasons:
            metrics.degraded(reason.split(":", 1)[0])
        out = res.to_json()
        for h in out["hits"]:
            h["thumbnail_url"] = (f"/v1/libraries/{h['library_id']}/documents/{h['doc_id']}"
                                  f"/pages/{h['page']}/thumbnail")
        return out

    app.include_router(graph_router(eng, auth))  # /v1/libraries/{lib}/graph/...
    app.include_router(chain_router(eng, auth))  # /v1/libraries/{lib}/glossary, /gaps
    app.include_router(backup_router(eng, auth, settings, upload_dir))  # /v1/backup, /v1/restore
    mcp = mount_mcp(app, auth, stateless=settings.mcp_stateless)  # /mcp: the routes above as MCP tools
    mount_web(app)  # the search page at / (a client of the routes above)
    problem_openapi(app)  # error responses declared as application/problem+json
    return app


async def _read(file: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await file.read(CHUNK):
        yield chunk
