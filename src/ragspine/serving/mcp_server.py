"""The MCP endpoint: ragspine's search, pages, documents and relation graph as tools and
resources for agents, on the official ``mcp`` SDK.

Every tool and resource is one call of the REST API made with :mod:`ragspine.client`, carrying
the caller's API key: to the same app in process (``httpx.ASGITransport``, for ``/mcp`` and for
``ragspine mcp`` on a data dir) or to a server by URL (``ragspine mcp --url``). So the key's
library scope, every RESTRICTED exit, the request checks and the error messages are the REST
API's own; nothing here searches or checks permissions a second time. A REST error becomes a
tool error (``isError``) that names the problem, as ``status title: detail``.

The tools' outputs are concise on purpose (an agent pays for every token): a hit is its
citation, its fused score and its passage; per-channel scores, timings and document metadata
stay on REST.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ListResourcesResult, Resource, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from ragspine import __version__, api
from ragspine.api.names import DOC_ID_PATTERN, LIBRARY_NAME_PATTERN
from ragspine.client import ApiError, AsyncClient
from ragspine.graph import DEFAULT_MAX_HOPS, MAX_PATH_HOPS
from ragspine.serving.auth import Auth

T = TypeVar("T")

#: Headers of an MCP request that carry an API key to the REST API.
KEY_HEADERS = ("authorization", "x-api-key")
#: The most hits one search tool call returns (an agent's context is small).
MAX_TOOL_HITS = 50
#: Resources listed per ``resources/list`` page (the cursor is the offset of the next).
RESOURCES_PAGE = 200
#: A URI per document, and one per page.
DOC_URI = "ragspine://{library}/{doc_id}"
PAGE_URI = "ragspine://{library}/{doc_id}/pages/{page}"
INSTRUCTIONS = (
    "ragspine searches collections of PDF reports (annual reports, statistical bulletins, papers, "
    "slides) in English and Chinese. Start with list_libraries, then search; every hit cites a "
    "document, a 1-based page, a bounding box (PDF points, origin top-left) and a chunk id. Quote "
    "them when you answer. get_page gives a page's passages and its image. 'abstained' means the "
    "library holds nothing good enough: say so instead of guessing. 'degraded' means a model was "
    "down and the answer came from the text channels only."
)

LibraryName = Annotated[str, Field(pattern=LIBRARY_NAME_PATTERN, description="a library name")]
DocId = Annotated[str, Field(pattern=DOC_ID_PATTERN, description="a document id")]
#: Builds the REST client for a request: given the API-key headers of the caller.
Rest = Callable[[Mapping[str, str]], AsyncClient]


class Filter(BaseModel):
    """A metadata condition: ``{"field": "period", "op": "gte", "value": 2022}``."""

    field: str = Field(description="doc_id, page, or a metadata field (entity, period, topic, language...)")
    op: Literal["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between"]
    value: Any = Field(description="a value; a list for in, nin and between ([low, high])")


class ToolHit(BaseModel):
    doc_id: str
    library: str
    title: str
    page: int
    bbox: list[float]
    chunk_id: str
    score: float | None
    text: str
    thumbnail_url: str | None = None
    #: The numbers printed on the page where they are not its place ("page 8" is its 12th page).
    printed_pages: list[int] = Field(default_factory=list)


class SearchResult(BaseModel):
    hits: list[ToolHit]
    mode: str
    degraded: bool
    degraded_reasons: list[str]
    abstained: bool


class LibraryInfo(BaseModel):
    name: str
    documents: int
    pages: int


class DocumentInfo(BaseModel):
    doc_id: str
    title: str | None
    pages: list[int]
    ocr: str
    uri: str
    metadata: dict[str, Any]


def _hit(h: api.Hit, base: str | None) -> ToolHit:
    return ToolHit(doc_id=h.doc_id, library=h.library_id, title=h.title, page=h.page, bbox=h.bbox,
                   chunk_id=h.chunk_id, score=h.scores.get("fused"), text=h.text,
                   thumbnail_url=f"{base}{h.thumbnail_url}" if base and h.thumbnail_url else None,
                   printed_pages=list(h.printed_pages))


def _page_text(p: api.Page) -> str:
    lines = [f"{p.title or p.doc_id} ({p.library_id}/{p.doc_id}), page {p.page} "
             f"({p.width} x {p.height} pt)"]
    for c in p.passages:
        box = ", ".join(f"{v:.1f}" for v in c.bbox)
        lines.append(f"[{c.chunk_id}] bbox [{box}]: {c.text}")
    return "\n".join(lines)


def _http_request(ctx: Context[Any, Any] | None) -> Any:
    """The HTTP request an MCP message came in (Streamable HTTP), or None (stdio, in process)."""
    if ctx is None:
        return None
    try:
        return getattr(ctx.request_context, "request", None)
    except ValueError:  # a context outside any request
        return None


class RagspineMCP(MCPServer):
    """The server, with ``resources/list`` answered per caller: the documents of the libraries
    the caller's key may read (the SDK's own list is static, the same for every caller)."""

    def __init__(self, rest: Rest, fixed_headers: Mapping[str, str] | None = None,
                 public_url: str | None = None) -> None:
        # The SDK's constructor configures the root logger (basicConfig with a rich handler,
        # level INFO) when it has no handler yet; a library must not, so it is put back.
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        super().__init__("ragspine", version=__version__, instructions=INSTRUCTIONS)
        root.handlers[:], root.level = handlers, level
        self._rest = rest
        self._fixed = dict(fixed_headers or {})
        self._public_url = public_url
        _register(self)

    def credentials(self, ctx: Context[Any, Any] | None) -> dict[str, str]:
        """The API-key headers of the MCP request (Streamable HTTP), else the fixed ones (stdio)."""
        request = _http_request(ctx)
        headers = request.headers if request is not None else None
        if headers:
            return {k: v for k, v in ((k, headers.get(k)) for k in KEY_HEADERS) if v}
        return dict(self._fixed)

    def public_url(self, ctx: Context[Any, Any] | None) -> str | None:
        """Where the agent reaches the REST API (for thumbnail URLs): the server the MCP request
        came to, the ``--url`` of a stdio bridge, or None (stdio on a data dir: no HTTP server;
        ``get_page`` sends the image itself)."""
        base = getattr(_http_request(ctx), "base_url", None)
        return str(base).rstrip("/") if base is not None else self._public_url

    async def rest_call(self, ctx: Context[Any, Any] | None, call: Callable[[AsyncClient], Awaitable[T]],
                        *, resource: bool = False) -> T:
        import httpx

        client = self._rest(self.credentials(ctx))
        error = ResourceError if resource else ToolError
        try:
            return await call(client)
        except ApiError as exc:
            raise error(str(exc)) from None
        except httpx.TimeoutException as exc:
            raise error(f"the ragspine server at {client.url} did not answer in time ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise error(f"cannot reach the ragspine server at {client.url}: {exc}") from None
        finally:
            await client.aclose()

    async def _handle_list_resources(self, ctx: Any, params: Any) -> ListResourcesResult:
        context = Context(request_context=ctx, mcp_server=self)

        cursor = getattr(params, "cursor", None)
        start = int(cursor) if cursor and cursor.isdigit() else 0

        async def documents(rs: AsyncClient) -> list[Resource]:
            out = []
            for lib in await rs.libraries():
                try:
                    docs = await rs.documents(lib.name)
                except ApiError:  # a library that cannot be read now (an old format): the others are listed
                    continue
                for d in docs:
                    out.append(Resource(uri=DOC_URI.format(library=lib.name, doc_id=d.doc_id),
                                        name=f"{lib.name}/{d.doc_id}", title=d.title or d.doc_id,
                                        description=f"{len(d.page_numbers)} pages indexed",
                                        mime_type="application/json"))
            return out

        try:
            every = await self.rest_call(context, documents, resource=True)
        except ResourceError:
            return ListResourcesResult(resources=[])  # no key, or a key that reads nothing
        # Pages of RESOURCES_PAGE: an agent's client fetches the next with the cursor it is given.
        end = start + RESOURCES_PAGE
        return ListResourcesResult(resources=every[start:end], next_cursor=str(end) if end < len(every) else None)


def _register(mcp: RagspineMCP) -> None:
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @mcp.tool(annotations=read_only)
    async def search(
        query: Annotated[str, Field(min_length=1, max_length=4096, description="the question, any language")],
        libraries: Annotated[list[LibraryName], Field(min_length=1, max_length=64)],
        ctx: Context[Any, Any],
        mode: Literal["auto", "hybrid", "vector", "bm25", "lexical", "economy"] = "auto",
        filters: list[Filter] | None = None,
        top_k: Annotated[int, Field(ge=1, le=MAX_TOOL_HITS)] = 10,
        rerank: bool = False,
    ) -> SearchResult:
        """Search report libraries; each hit cites document, page, bbox and chunk."""

        async def call(rs: AsyncClient) -> SearchResult:
            res = await rs.search(query, libraries, mode=mode, top_k=top_k, rerank=rerank,
                                  filters=[f.model_dump() for f in filters or []])
            base = mcp.public_url(ctx)
            return SearchResult(hits=[_hit(h, base) for h in res.hits], mode=res.mode,
                                degraded=res.degraded, degraded_reasons=res.degraded_reasons,
                                abstained=res.abstained)

        return await mcp.rest_call(ctx, call)

    @mcp.tool(annotations=read_only, structured_output=False)
    async def get_page(library: LibraryName, doc_id: DocId, page: Annotated[int, Field(ge=1)],
                       ctx: Context[Any, Any], image: bool = True) -> list[Any]:
        """A page's passages (chunk id, bbox, text) and, with image, its thumbnail."""

        async def call(rs: AsyncClient) -> list[Any]:
            p = await rs.page(library, doc_id, page)
            out: list[Any] = [TextContent(type="text", text=_page_text(p))]
            if image:
                try:
                    out.append(Image(data=await rs.thumbnail(library, doc_id, page), format="png"))
                except ApiError as exc:  # the passages stand on their own
                    out.append(TextContent(type="text", text=f"(no page image: {exc})"))
            return out

        return await mcp.rest_call(ctx, call)

    @mcp.tool(annotations=read_only)
    async def list_libraries(ctx: Context[Any, Any]) -> list[LibraryInfo]:
        """The libraries this key may search, with their document and page counts."""

        async def call(rs: AsyncClient) -> list[LibraryInfo]:
            return [LibraryInfo(name=lib.name, documents=lib.documents, pages=lib.pages)
                    for lib in await rs.libraries()]

        return await mcp.rest_call(ctx, call)

    @mcp.tool(annotations=read_only)
    async def list_documents(library: LibraryName, ctx: Context[Any, Any]) -> list[DocumentInfo]:
        """A library's documents: id, title, indexed pages, OCR state, metadata."""

        async def call(rs: AsyncClient) -> list[DocumentInfo]:
            return [DocumentInfo(doc_id=d.doc_id, title=d.title, pages=d.page_numbers, ocr=d.ocr,
                                 uri=DOC_URI.format(library=library, doc_id=d.doc_id), metadata=d.metadata)
                    for d in await rs.documents(library)]

        return await mcp.rest_call(ctx, call)

    @mcp.tool(annotations=read_only)
    async def graph_neighbors(
        library: LibraryName, entity: Annotated[str, Field(min_length=1, max_length=256)], ctx: Context[Any, Any],
        relation: Annotated[list[str] | None, Field(description="subsidiary_of, peer_of, derived_from, "
                                                    "mentions, co_occurs_with")] = None,
        depth: Annotated[int, Field(ge=1, le=3)] = 1,
        direction: Literal["both", "out", "in"] = "both",
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> api.GraphNeighbors:
        """Entities related to one (subsidiaries, peers, derivations), each edge cited."""
        return await mcp.rest_call(ctx, lambda rs: rs.neighbors(library, entity, relation=relation, depth=depth,
                                                                 direction=direction, limit=limit))

    @mcp.tool(annotations=read_only)
    async def graph_paths(
        library: LibraryName, source: Annotated[str, Field(min_length=1, max_length=256)],
        target: Annotated[str, Field(min_length=1, max_length=256)], ctx: Context[Any, Any],
        max_hops: Annotated[int, Field(ge=1, le=MAX_PATH_HOPS)] = DEFAULT_MAX_HOPS,
        relation: list[str] | None = None,
    ) -> api.GraphPaths:
        """A shortest chain of relations between two entities, each edge cited."""
        return await mcp.rest_call(ctx, lambda rs: rs.paths(library, source, target, max_hops=max_hops,
                                                             relation=relation))

    @mcp.resource(DOC_URI, mime_type="application/json", title="A document")
    async def document_resource(library: str, doc_id: str, ctx: Context[Any, Any]) -> str:
        """A document's record: title, pages indexed, OCR state, metadata."""
        doc = await mcp.rest_call(ctx, lambda rs: rs.document(library, doc_id), resource=True)
        return doc.model_dump_json()

    @mcp.resource(PAGE_URI, mime_type="text/plain", title="A page's passages")
    async def page_resource(library: str, doc_id: str, page: str, ctx: Context[Any, Any]) -> str:
        """A page's passages with their chunk ids and bboxes."""
        if not page.isdigit():
            raise ResourceError(f"page must be a 1-based page number, got {page!r}")
        p = await mcp.rest_call(ctx, lambda rs: rs.page(library, doc_id, int(page)), resource=True)
        return _page_text(p)


# -- the /mcp route of the REST app ---------------------------------------------------------------

def in_process(app: Any) -> Rest:
    """REST clients that call ``app`` itself, in this event loop (no socket)."""
    import httpx

    transport = httpx.ASGITransport(app=app)
    return lambda headers: AsyncClient("http://ragspine.local", transport=transport, headers=headers)


def mount_mcp(app: Any, auth: Auth, *, stateless: bool) -> McpEndpoint:
    """Serve MCP over Streamable HTTP at ``/mcp`` of ``app`` (the FastAPI app), behind the API
    keys: a request without a valid key is refused (401) before the SDK sees it, and each tool
    call carries the key on to the REST API, which scopes it. ``stateless``: every request
    stands alone (no session id), so any of several replicas can answer it. The app's lifespan
    runs ``endpoint.running()``."""
    from starlette.routing import Route

    endpoint = McpEndpoint(RagspineMCP(in_process(app)), auth, stateless)
    app.router.routes.append(Route("/mcp", endpoint=endpoint, include_in_schema=False))
    return endpoint


class McpEndpoint:
    """The ``/mcp`` route: the API-key check, then the SDK's Streamable HTTP session manager of
    the app's current lifespan (the SDK's manager runs once, and an app may be started again:
    each start gets a new one)."""

    def __init__(self, mcp: RagspineMCP, auth: Auth, stateless: bool) -> None:
        self.mcp = mcp
        self.auth = auth
        self.stateless = stateless
        self._manager: Any = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from mcp.server.transport_security import TransportSecuritySettings

        # DNS-rebinding protection (Host/Origin allow-lists) is off, as for the REST routes
        # beside it: the endpoint is reached through whatever host name the deployment gives
        # the server, and API keys guard it as they guard REST.
        self.mcp.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=self.stateless,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        manager = self.mcp.session_manager
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from fastapi import HTTPException
        from starlette.requests import Request

        try:
            self.auth(Request(scope))
        except HTTPException as exc:
            await _problem(send, exc.status_code, "unauthorized", "Unauthorized", str(exc.detail))
            return
        manager = self._manager
        if manager is None:
            await _problem(send, 503, "service-unavailable", "Service unavailable",
                           "the MCP endpoint is not running (the server is starting or stopping)")
            return
        await manager.handle_request(scope, receive, send)


async def _problem(send: Any, status: int, kind: str, title: str, detail: str) -> None:
    from ragspine.serving.openapi import PROBLEM

    body = json.dumps({"type": f"/problems/{kind}", "title": title, "status": status, "detail": detail}).encode()
    headers = [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
