"""``ragspine mcp``: the MCP tools over stdio, for desktop agents (Claude Desktop, IDEs).

With ``--url`` every tool call goes to that running server's REST API with ``--api-key``
(or ``$RAGSPINE_API_KEY``). Without it the command opens the data dir itself and answers from
it in this process: that needs the data dir to itself (one process per data dir), so a data
dir a server holds is refused with a line that says to use ``--url``. Nothing but MCP messages goes to stdout.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ragspine.cli.common import EXIT_FAILED, _fail, _settings

API_KEY_ENV = "RAGSPINE_API_KEY"


def add_mcp_command(sub: Any) -> None:
    s = sub.add_parser("mcp", help="serve the MCP tools over stdio (for a desktop agent)")
    s.add_argument("--url", metavar="URL", help="a running ragspine server (default: open the data dir here)")
    s.add_argument("--api-key", metavar="KEY", default=None,
                   help=f"the key for --url (default: ${API_KEY_ENV}); it scopes the libraries the agent sees")
    s.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if args.url:
        return _serve_remote(args.url, headers)
    return _serve_local(args, headers)


def _serve_remote(url: str, headers: dict[str, str]) -> int:
    import httpx

    from ragspine.client import AsyncClient
    from ragspine.serving.mcp_server import RagspineMCP

    base = url.rstrip("/")
    try:
        r = httpx.get(f"{base}/healthz", timeout=10)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {base}: {exc}", EXIT_FAILED)
    if r.status_code != 200:
        _fail(f"{base}/healthz answered {r.status_code}: is it a ragspine server?", EXIT_FAILED)
    RagspineMCP(lambda h: AsyncClient(base, headers=h), fixed_headers=headers, public_url=base).run("stdio")
    return 0


def _serve_local(args: argparse.Namespace, headers: dict[str, str]) -> int:
    from ragspine.engine import Engine
    from ragspine.errors import DataDirInUseError
    from ragspine.serving.app import create_app
    from ragspine.serving.mcp_server import RagspineMCP, in_process

    settings = _settings(args)
    try:
        engine = Engine(settings)
    except DataDirInUseError as exc:
        _fail(f"{exc.detail}: run 'ragspine mcp --url http://HOST:PORT' to go through it", EXIT_FAILED)
    from ragspine.serving.auth import KeysError

    try:
        try:
            app = create_app(settings, engine=engine)
        except KeysError as exc:
            _fail(f"bad API keys (RAGSPINE_API_KEYS or RAGSPINE_API_KEYS_FILE): {exc}")
        RagspineMCP(in_process(app), fixed_headers=headers).run("stdio")
    finally:
        engine.close()
    return 0
