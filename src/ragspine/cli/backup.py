"""``ragspine backup`` and ``ragspine restore``: a library (or all of them) to one file and back.

On a data dir no server holds, the command opens it itself; with ``--url`` it goes through a
running server's REST API (``GET /v1/libraries/{lib}/backup``, ``POST /v1/restore``) with
``--api-key`` (or ``$RAGSPINE_API_KEY``), which must be allowed every library. A data dir a
server holds is refused with a line that says to use ``--url``: the server takes the backup
under its own write locks, consistent while it keeps serving.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragspine.cli.common import EXIT_FAILED, _fail, _settings

API_KEY_ENV = "RAGSPINE_API_KEY"


def add_backup_commands(sub: Any) -> None:
    s = sub.add_parser("backup", help="back up a library (or --all) to one file",
                       description="ragspine backup LIB FILE, or ragspine backup --all FILE")
    s.add_argument("args", nargs="+", metavar="LIB FILE", help="the library and the file to write")
    s.add_argument("--all", action="store_true", help="every library, into one file (then give only FILE)")
    s.add_argument("--points-only", action="store_true",
                   help="leave out the embedded store's own files: a faster backup, and a restore that "
                        "rebuilds the index (the default backup lets a restore copy it)")
    _remote(s)
    s.set_defaults(func=cmd_backup)
    s = sub.add_parser("restore", help="restore the libraries of a backup file")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--as", dest="as_name", metavar="NAME", help="restore the backup's one library under this name")
    s.add_argument("--bm25-only", action="store_true",
                   help="keep BM25 only: for a backup whose vectors came from models not configured here")
    _remote(s)
    s.set_defaults(func=cmd_restore)


def _remote(s: argparse.ArgumentParser) -> None:
    s.add_argument("--url", metavar="URL", help="a running ragspine server (default: open the data dir here)")
    s.add_argument("--api-key", metavar="KEY", default=None,
                   help=f"the key for --url (default: ${API_KEY_ENV}); it must be allowed every library")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _counts(c: dict[str, Any]) -> str:
    return (f"{c['documents']} documents, {c['points']} points, {c['thumbnails']} thumbnails, "
            f"{c['graph_sources']} graph sources, {c['pending_ocr']} with OCR owed")


def cmd_backup(args: argparse.Namespace) -> int:
    if args.all:
        if len(args.args) != 1:
            _fail("with --all give only the FILE to write (every library goes into it)")
        names, dest = None, Path(args.args[0])
    else:
        if len(args.args) != 2:
            _fail("give the library and the file: ragspine backup LIB FILE (or --all FILE)")
        names, dest = [args.args[0]], Path(args.args[1])
    if not dest.parent.is_dir():
        _fail(f"cannot write {dest}: folder {dest.parent} does not exist")
    t0 = time.perf_counter()
    if args.url:
        size = _remote_call(args, lambda c: c.backup(dest, names[0] if names else None, native=not args.points_only))
        print(f"backed up {'every library' if names is None else names[0]} through {args.url} -> {dest} "
              f"({_mb(size)}) in {time.perf_counter() - t0:.1f} s")
        return 0
    engine = _engine(args)
    part = dest.with_name(dest.name + ".part")
    try:
        names = names or engine.list_libraries()
        if not names:
            _fail("there is no library to back up", EXIT_FAILED)
        with open(part, "wb") as fh:
            report = engine.backup(names, fh, native=not args.points_only)
        part.replace(dest)
    finally:
        part.unlink(missing_ok=True)
        engine.close()
    for c in report.to_json()["libraries"]:
        print(f"backed up {c['name']}: {_counts(c)}")
    print(f"-> {dest} ({_mb(report.bytes)}) in {report.seconds:.1f} s")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    src = Path(args.file)
    if not src.is_file():
        _fail(f"no backup file {src}")
    if args.url:
        out = _remote_call(args, lambda c: c.restore(src, as_name=args.as_name, bm25_only=args.bm25_only)
                           ).model_dump(by_alias=True)
    else:
        engine = _engine(args)
        try:
            out = engine.restore(src, as_name=args.as_name, bm25_only=args.bm25_only).to_json()
        finally:
            engine.close()
    for c in out["libraries"]:
        changed = {f: v for f, v in c["vectors"].items() if v != "kept"}
        note = "; " + ", ".join(f"{f}: {v}" for f, v in changed.items()) if changed else ""
        print(f"restored {c['from']} as {c['name']}: {_counts(c)}{note}")
    print(f"<- {src} ({_mb(out['bytes'])}) in {out['seconds']:.1f} s")
    return 0


def _remote_call(args: argparse.Namespace, call: Callable[[Any], Any]) -> Any:
    """``call(client)`` on a client of ``--url``; the server's error, or why it could not be
    reached, as one line."""
    import httpx

    from ragspine.client import ApiError, Client

    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    try:
        with Client(args.url, api_key=key) as client:
            return call(client)
    except ApiError as exc:
        _fail(f"{args.url} answered {exc}", EXIT_FAILED)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {args.url}: {exc}", EXIT_FAILED)


def _engine(args: argparse.Namespace) -> Any:
    from ragspine.engine import Engine
    from ragspine.errors import DataDirInUseError

    try:
        return Engine(_settings(args))
    except DataDirInUseError as exc:
        _fail(f"{exc.detail}: back up or restore through it with --url http://HOST:PORT", EXIT_FAILED)
