"""``ragspine mcp`` over stdio, as a desktop agent starts it: on a data dir, and bridging to a
running server with a key; a data dir that a server holds is refused with a line that says
what to do."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pdfs
import pytest
from live_kit import KEY_A, LiveServer
from mcp import Client as McpClient
from mcp import StdioServerParameters
from serving_kit import clean_settings, ragspine_command

from ragspine.engine import Engine

pytestmark = pytest.mark.integration


def _env(data_dir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env["RAGSPINE_DENSE_MODEL"] = "none"
    if data_dir is not None:
        env["RAGSPINE_DATA_DIR"] = str(data_dir)
    return env


def _stdio(args: list[str], env: dict[str, str], body: Any) -> Any:
    cmd = ragspine_command()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", *args], env=env)

    async def run() -> Any:
        async with McpClient(params) as mcp:
            return await body(mcp)

    return asyncio.run(run())


def test_stdio_on_a_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    eng = Engine(clean_settings(data_dir=data))
    try:
        eng.create_library("desk")
        eng.ingest("desk", pdfs.make_pdf(["Cover.", "Quokka population rose by 12 percent."]),
                   {"doc_id": "survey"})
    finally:
        eng.close()

    async def body(mcp: McpClient) -> tuple[Any, Any]:
        return (await mcp.call_tool("list_libraries", {}),
                await mcp.call_tool("search", {"query": "quokka", "libraries": ["desk"], "mode": "bm25"}))

    libs, hits = _stdio([], _env(data), body)
    assert libs.structured_content == {"result": [{"name": "desk", "documents": 1, "pages": 2}]}
    top = hits.structured_content["hits"][0]
    assert (top["doc_id"], top["page"], top["chunk_id"]) == ("survey", 2, "survey/p2/c0")
    assert top["thumbnail_url"] is None  # no HTTP server: get_page sends the image itself


def test_stdio_bridges_to_a_server_with_a_key(tmp_path: Path) -> None:
    from live_kit import KEY_STAR

    from ragspine.client import Client

    with LiveServer(tmp_path / "srv", api_keys=f"{KEY_A}=liba;{KEY_STAR}=*") as srv:
        with Client(srv.url, api_key=KEY_STAR) as rs:
            for lib in ("liba", "libb"):
                rs.create_library(lib)
                rs.upload(lib, pdfs.make_pdf([f"{lib} wombat figures"]), metadata={"doc_id": f"{lib}-doc"}, wait=True)

        async def body(mcp: McpClient) -> tuple[Any, Any]:
            return (await mcp.call_tool("list_libraries", {}),
                    await mcp.call_tool("search", {"query": "wombat", "libraries": ["liba"]}))

        libs, hits = _stdio(["--url", srv.url, "--api-key", KEY_A], _env(), body)
        assert [lib["name"] for lib in libs.structured_content["result"]] == ["liba"]
        top = hits.structured_content["hits"][0]
        assert top["doc_id"] == "liba-doc"
        assert top["thumbnail_url"] == f"{srv.url}/v1/libraries/liba/documents/liba-doc/pages/1/thumbnail"


def test_a_data_dir_held_by_a_server_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "held"
    with LiveServer(data) as srv:
        from ragspine.client import Client

        with Client(srv.url) as rs:
            rs.create_library("busy")
            rs.upload("busy", pdfs.make_pdf(["a page"]), wait=True)
        cmd = ragspine_command()
        r = subprocess.run([*cmd, "mcp"], env=_env(data), capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "is in use by another ragspine process" in lines[0]
    assert "run 'ragspine mcp --url http://HOST:PORT'" in lines[0]
    assert r.stdout == ""  # nothing but MCP messages ever goes to stdout


def test_in_process_with_the_sdks_client(tmp_path: Path) -> None:
    """The MCP server object driven in process by the SDK's client (no transport at all), over
    an app with API keys: the fixed key of a stdio bridge scopes what it sees."""
    from fastapi.testclient import TestClient

    from live_kit import KEY_STAR

    from ragspine.serving.app import create_app
    from ragspine.serving.mcp_server import RagspineMCP, in_process

    app = create_app(clean_settings(data_dir=tmp_path / "data", api_keys=f"{KEY_A}=liba;{KEY_STAR}=*"))
    with TestClient(app) as c:
        for lib in ("liba", "libb"):
            assert c.post("/v1/libraries", json={"name": lib}, headers={"X-API-Key": KEY_STAR}).status_code == 201
        mcp = RagspineMCP(in_process(app), fixed_headers={"X-API-Key": KEY_A})

        async def body() -> tuple[Any, Any]:
            async with McpClient(mcp) as client:
                return (await client.call_tool("list_libraries", {}),
                        await client.call_tool("list_documents", {"library": "libb"}))

        libs, docs_b = asyncio.run(body())
    assert [lib["name"] for lib in libs.structured_content["result"]] == ["liba"]
    assert docs_b.is_error and "403" in docs_b.content[0].text


def test_over_http_against_ragspine_serve(tmp_path: Path) -> None:
    """The real server process: its /mcp answers the SDK's client."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from serving_kit import serve_process

    from ragspine.client import Client

    with serve_process(tmp_path / "data") as url:
        with Client(url) as rs:
            rs.create_library("served")
            rs.upload("served", pdfs.make_pdf(["Platypus exports doubled."]), metadata={"doc_id": "p1"}, wait=True)

        async def body() -> Any:
            async with httpx2.AsyncClient(timeout=60) as http, \
                    McpClient(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
                return await mcp.call_tool("search", {"query": "platypus", "libraries": ["served"]})

        res = asyncio.run(body())
    hit = res.structured_content["hits"][0]
    assert (hit["doc_id"], hit["page"], hit["chunk_id"]) == ("p1", 1, "p1/p1/c0")
    assert hit["thumbnail_url"] == f"{url}/v1/libraries/served/documents/p1/pages/1/thumbnail"
