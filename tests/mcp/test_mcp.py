"""The MCP endpoint driven by the SDK's own client, over Streamable HTTP against a live server:
typed tools, citations as REST gives them, one key's scope, RESTRICTED exits, tool errors."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
from mcp_kit import CANARY, KEY_FILTERED
from live_kit import KEY_A, KEY_STAR, LiveServer
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from ragspine.client import Client

T = TypeVar("T")


def over_http(srv: LiveServer, key: str | None, body: Callable[[McpClient], Awaitable[T]]) -> T:
    async def run() -> T:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                McpClient(streamable_http_client(f"{srv.url}/mcp", http_client=http)) as mcp:
            return await body(mcp)

    return asyncio.run(run())


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def test_tools_and_their_typed_inputs(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> Any:
        return await mcp.list_tools()

    tools = {t.name: t for t in over_http(seeded, KEY_STAR, body).tools}
    assert set(tools) == {"search", "get_page", "list_libraries", "list_documents", "graph_neighbors",
                          "graph_paths"}
    search = tools["search"].input_schema
    assert search["required"] == ["query", "libraries"]
    assert search["properties"]["libraries"]["items"]["pattern"] == "^[a-z0-9][a-z0-9_-]{0,62}$"
    assert (search["properties"]["top_k"]["minimum"], search["properties"]["top_k"]["maximum"]) == (1, 50)
    assert search["$defs"]["Filter"]["properties"]["op"]["enum"][:2] == ["eq", "ne"]
    assert tools["search"].output_schema is not None
    assert all(t.annotations.read_only_hint for t in tools.values())


def test_search_cites_as_rest_does(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> Any:
        return await mcp.call_tool("search", {"query": "capacity megawatts", "libraries": ["liba"], "mode": "bm25",
                                              "top_k": 3})

    res = over_http(seeded, KEY_A, body)
    assert not res.is_error
    out = res.structured_content
    with Client(seeded.url, api_key=KEY_A) as rs:
        rest = rs.search("capacity megawatts", "liba", mode="bm25", top_k=3)
    assert [(h["doc_id"], h["page"], h["chunk_id"], h["bbox"], h["score"], h["text"], h["printed_pages"])
            for h in out["hits"]] == [
        (h.doc_id, h.page, h.chunk_id, h.bbox, h.scores["fused"], h.text, h.printed_pages) for h in rest.hits]
    assert out["hits"][0]["page"] == 3
    assert (out["abstained"], out["degraded"], out["mode"]) == (False, False, "bm25")
    thumb = out["hits"][0]["thumbnail_url"]
    assert thumb == f"{seeded.url}/v1/libraries/liba/documents/acme-2023/pages/3/thumbnail"
    r = httpx.get(thumb, headers={"Authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")


def test_get_page_sends_passages_and_the_image(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> Any:
        return await mcp.call_tool("get_page", {"library": "liba", "doc_id": "acme-2023", "page": 3})

    res = over_http(seeded, KEY_A, body)
    assert not res.is_error
    text, image = res.content
    with Client(seeded.url, api_key=KEY_A) as rs:
        page = rs.page("liba", "acme-2023", 3)
        png = rs.thumbnail("liba", "acme-2023", 3)
    for p in page.passages:
        assert f"[{p.chunk_id}] bbox [" in text.text and p.text in text.text
    assert (image.mime_type, base64.b64decode(image.data)) == ("image/png", png)


def test_a_key_sees_only_its_libraries_through_mcp(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> dict[str, Any]:
        return {
            "libraries": await mcp.call_tool("list_libraries", {}),
            "search_b": await mcp.call_tool("search", {"query": "bonobo", "libraries": ["libb"]}),
            "search_ab": await mcp.call_tool("search", {"query": "bonobo", "libraries": ["liba", "libb"]}),
            "docs_b": await mcp.call_tool("list_documents", {"library": "libb"}),
            "page_b": await mcp.call_tool("get_page", {"library": "libb", "doc_id": "globex-b", "page": 1}),
            "resources": await mcp.list_resources(),
        }

    got = over_http(seeded, KEY_A, body)
    assert [lib["name"] for lib in got["libraries"].structured_content["result"]] == ["liba"]
    for name in ("search_b", "search_ab", "docs_b", "page_b"):
        assert got[name].is_error, name
        assert "403 Forbidden: this API key may not use library 'libb'" in text_of(got[name])
        assert "bonobo" not in text_of(got[name])
    assert [r.uri for r in got["resources"].resources] == ["ragspine://liba/acme-2023"]
    # The key that reads everything sees both.
    every = over_http(seeded, KEY_STAR, lambda mcp: mcp.list_resources())
    assert sorted(r.uri for r in every.resources) == ["ragspine://liba/acme-2023", "ragspine://libb/globex-b"]


def test_a_document_resource_is_read_with_the_callers_key(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> tuple[Any, Any, Any]:
        doc = await mcp.read_resource("ragspine://liba/acme-2023")
        page = await mcp.read_resource("ragspine://liba/acme-2023/pages/1")
        try:
            other = await mcp.read_resource("ragspine://libb/globex-b")
        except Exception as exc:  # the SDK raises the server's resource error
            other = exc
        return doc, page, other

    doc, page, other = over_http(seeded, KEY_A, body)
    record = json.loads(doc.contents[0].text)
    assert (record["doc_id"], record["page_numbers"], record["pages_dropped"]) == ("acme-2023", [1, 3], [2])
    assert "Revenue grew to 120 million" in page.contents[0].text
    assert isinstance(other, Exception) and "403" in str(other)


def test_a_keys_filter_holds_through_mcp(seeded: LiveServer) -> None:
    """MCP goes through REST with the caller's key: a key whose filter keeps liba's report out
    finds, lists and reads none of it (the same tools through KEY_A do)."""
    async def body(mcp: McpClient) -> dict[str, Any]:
        out: dict[str, Any] = {
            "search": await mcp.call_tool("search", {"query": "Acme Energy revenue", "libraries": ["liba", "libb"],
                                                     "mode": "bm25"}),
            "docs": await mcp.call_tool("list_documents", {"library": "liba"}),
            "page": await mcp.call_tool("get_page", {"library": "liba", "doc_id": "acme-2023", "page": 1}),
            "libraries": await mcp.call_tool("list_libraries", {}),
            "resources": await mcp.list_resources(),
        }
        try:
            out["resource"] = await mcp.read_resource("ragspine://liba/acme-2023")
        except Exception as exc:  # the SDK raises the server's resource error
            out["resource"] = exc
        return out

    got = over_http(seeded, KEY_FILTERED, body)
    assert got["search"].structured_content["hits"] == [] or all(
        h["library"] == "libb" for h in got["search"].structured_content["hits"])
    assert got["docs"].structured_content["result"] == []
    assert got["page"].is_error and "404" in text_of(got["page"]) and "Revenue" not in text_of(got["page"])
    counts = {x["name"]: x["documents"] for x in got["libraries"].structured_content["result"]}
    assert counts == {"liba": 0, "libb": 1}
    assert [r.uri for r in got["resources"].resources] == ["ragspine://libb/globex-b"]
    assert isinstance(got["resource"], Exception) and "404" in str(got["resource"])
    seen = over_http(seeded, KEY_A, lambda mcp: mcp.call_tool("search", {"query": "Acme Energy revenue",
                                                                          "libraries": ["liba"], "mode": "bm25"}))
    assert seen.structured_content["hits"]  # the positive control: the words are there


def test_no_key_no_mcp(seeded: LiveServer) -> None:
    r = httpx.post(f"{seeded.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"accept": "application/json, text/event-stream"})
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"].startswith("an API key is required")
    r = httpx.post(f"{seeded.url}/mcp", json={}, headers={"Authorization": "Bearer wrong-key"})
    assert r.status_code == 401 and r.json()["detail"] == "the API key is not valid"


def test_restricted_never_comes_out_of_any_tool(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> list[Any]:
        out: list[Any] = []
        for query in (CANARY, f"merger price {CANARY}", "board minutes merger"):
            for mode in ("auto", "bm25", "lexical", "economy", "hybrid"):
                out.append(await mcp.call_tool("search", {"query": query, "libraries": ["liba", "libb"],
                                                          "mode": mode, "top_k": 50}))
        for page in (1, 2, 3, 4):
            out.append(await mcp.call_tool("get_page", {"library": "liba", "doc_id": "acme-2023", "page": page}))
            try:
                out.append(await mcp.read_resource(f"ragspine://liba/acme-2023/pages/{page}"))
            except Exception as exc:
                out.append(str(exc))
        out.append(await mcp.call_tool("list_documents", {"library": "liba"}))
        out.append(await mcp.read_resource("ragspine://liba/acme-2023"))
        out.append(await mcp.list_resources())
        ents = await mcp.call_tool("graph_neighbors", {"library": "liba", "entity": "Acme Energy", "depth": 3})
        out.append(ents)
        out.append(await mcp.call_tool("graph_paths", {"library": "liba", "source": "Acme Energy",
                                                       "target": "Globex"}))
        return out

    outputs = over_http(seeded, KEY_STAR, body)
    dumped = [o if isinstance(o, str) else o.model_dump_json() for o in outputs]
    assert all(CANARY not in d and "merger price" not in d for d in dumped)
    # The page itself is as absent as a page that never was, and the open pages are served.
    get_pages = [o for o in outputs if hasattr(o, "is_error") and o.content and "page" in text_of(o).lower()]
    assert any("no page 2 in document 'acme-2023'" in text_of(o) for o in get_pages)
    assert any("no page 4 in document 'acme-2023'" in text_of(o) for o in get_pages)
    docs = next(o for o in outputs if getattr(o, "structured_content", None) and "result" in o.structured_content
                and o.structured_content["result"] and "pages" in o.structured_content["result"][0])
    assert docs.structured_content["result"][0]["pages"] == [1, 3]
    # A positive control: the open pages' words do come out.
    assert any("capacity additions of 300 megawatts" in d for d in dumped)


def test_graph_tools_cite_every_edge(seeded: LiveServer) -> None:
    async def body(mcp: McpClient) -> tuple[Any, Any]:
        nb = await mcp.call_tool("graph_neighbors", {"library": "liba", "entity": "Acme Energy",
                                                     "relation": ["subsidiary_of"]})
        path = await mcp.call_tool("graph_paths", {"library": "liba", "source": "Acme Energy", "target": "Globex"})
        return nb, path

    nb, path = over_http(seeded, KEY_A, body)
    assert [n["name"] for n in nb.structured_content["neighbors"]] == ["Acme Holdings"]
    edge = nb.structured_content["neighbors"][0]["path"][0]
    assert (edge["relation"], edge["citations_total"]) == ("subsidiary_of", 1)
    p = path.structured_content
    assert (p["found"], p["hops"], [n["name"] for n in p["nodes"]]) == (
        True, 2, ["Acme Energy", "Acme Holdings", "Globex"])
    assert all(e["citations"] for e in p["path"])


@pytest.mark.parametrize(("filters", "expect"), [
    ([{"field": "period", "op": "between", "value": 2020}], "between"),
    ([{"field": "period", "op": "near", "value": 1}], "near"),
])
def test_a_bad_filter_is_a_tool_error(seeded: LiveServer, filters: list[dict[str, Any]], expect: str) -> None:
    async def body(mcp: McpClient) -> Any:
        return await mcp.call_tool("search", {"query": "revenue", "libraries": ["liba"], "filters": filters})

    res = over_http(seeded, KEY_A, body)
    assert res.is_error
    assert expect in text_of(res)


def test_stateless_mode_answers_without_a_session(tmp_path: Any) -> None:
    with LiveServer(tmp_path / "data", mcp_stateless=True) as srv:
        tools = over_http(srv, None, lambda mcp: mcp.list_tools())
        assert "search" in {t.name for t in tools.tools}
        # A second client, on a new connection, needs no session either.
        libs = over_http(srv, None, lambda mcp: mcp.call_tool("list_libraries", {}))
        assert libs.structured_content == {"result": []}
        r = httpx.post(f"{srv.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                       headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 200 and "mcp-session-id" not in r.headers
        assert '"name":"search"' in r.text.replace(" ", "")
    with LiveServer(tmp_path / "data2") as srv:
        r = httpx.post(f"{srv.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                       headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 400 and "session" in r.text.lower()  # a stateful server wants one


def test_an_app_started_twice_serves_mcp_both_times(tmp_path: Any) -> None:
    """The SDK's session manager runs once; each start of the app gets its own."""
    from fastapi.testclient import TestClient
    from serving_kit import clean_settings

    from ragspine.serving.app import create_app

    app = create_app(clean_settings(data_dir=tmp_path / "data", mcp_stateless=True))
    for _ in range(2):
        with TestClient(app) as c:
            r = c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                       headers={"accept": "application/json, text/event-stream"})
            assert r.status_code == 200 and '"name":"search"' in r.text.replace(" ", "")
    # Outside a running app (no lifespan): a clear 503, not a crash.
    r = TestClient(app).post("/mcp", json={})
    assert r.status_code == 503 and "not running" in r.json()["detail"]


def test_resources_are_listed_in_pages(seeded: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """With more documents than a page, the list comes in pages linked by cursors (the seeded
    server runs in this process, so the page size can be made 1)."""
    from ragspine.serving import mcp_server

    monkeypatch.setattr(mcp_server, "RESOURCES_PAGE", 1)

    async def body(mcp: McpClient) -> list[Any]:
        pages, cursor = [], None
        while True:
            res = await mcp.list_resources(cursor=cursor)
            pages.append([r.uri for r in res.resources])
            cursor = res.next_cursor
            if cursor is None:
                return pages

    assert over_http(seeded, KEY_STAR, body) == [["ragspine://liba/acme-2023"], ["ragspine://libb/globex-b"]]


def test_a_tool_says_when_the_server_cannot_be_reached() -> None:
    from ragspine.client import AsyncClient
    from ragspine.serving.mcp_server import RagspineMCP

    mcp = RagspineMCP(lambda h: AsyncClient("http://127.0.0.1:9", headers=h), public_url="http://127.0.0.1:9")

    async def body() -> Any:
        async with McpClient(mcp) as client:
            return await client.call_tool("list_libraries", {})

    res = asyncio.run(body())
    assert res.is_error and "cannot reach the ragspine server at http://127.0.0.1:9" in text_of(res)
