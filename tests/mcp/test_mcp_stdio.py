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
