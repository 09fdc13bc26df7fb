"""``ragspine glossary`` and ``ragspine gaps``: a library's glossary and knowledge-gap log.

Only argparse at import time; the engine is imported when a command runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ragspine.cli.graph import run_with_engine as _run

SettingsFn = Callable[[argparse.Namespace], Any]
FailFn = Callable[[str], NoReturn]


def add_chain_commands(sub: Any, settings: SettingsFn, fail: FailFn) -> None:
    p = sub.add_parser("glossary", help="a library's metric glossary (synonyms for query rewriting)")
    p.add_argument("--library", required=True, metavar="NAME")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--upload", metavar="FILE", help="replace the glossary with this CSV (term,synonyms[,kind]) or JSON")
    g.add_argument("--delete", action="store_true", help="remove the glossary")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer")
    p.set_defaults(func=lambda a: _glossary(a, settings, fail))

    p = sub.add_parser("gaps", help="queries a library could not answer, most asked first")
    p.add_argument("--library", required=True, metavar="NAME")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--delete", metavar="GAP_ID", help="clear one gap")
    g.add_argument("--clear", action="store_true", help="clear every gap")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true", help="print the API's JSON answer")
    p.set_defaults(func=lambda a: _gaps(a, settings, fail))


def _glossary(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    if args.upload:
        path = Path(args.upload)
        if not path.is_file():
            fail(f"no such file: {path}")
        data = path.read_bytes()
        out = _run(args, settings, fail, lambda e: e.glossaries.upload(args.library, data, path.name))
        if args.json:
            print(json.dumps(out, ensure_ascii=False, indent=2))
        else:
            print(f"library {args.library}: glossary {out['file']} with {out['terms']} terms")
        return 0
    if args.delete:
        _run(args, settings, fail, lambda e: e.glossaries.delete(args.library))
        print(f"library {args.library}: glossary removed")
        return 0
    out = _run(args, settings, fail, lambda e: e.glossaries.get(args.library))
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    print(f"library {args.library}: glossary {out['file']}, {out['terms']} terms")
    for entry in out["entries"]:
        print(f"  {entry['term']} = {' | '.join(entry['synonyms'])}  ({entry['kind']})")
    return 0


def _gaps(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    if args.delete:
        _run(args, settings, fail, lambda e: e.gaps.delete(args.library, args.delete))
        print(f"library {args.library}: gap {args.delete} cleared")
        return 0
    if args.clear:
        n = _run(args, settings, fail, lambda e: e.gaps.clear(args.library))
        print(f"library {args.library}: {n} gaps cleared")
        return 0
    gaps = _run(args, settings, fail, lambda e: e.gaps.list(args.library, args.limit))
    if args.json:
        print(json.dumps({"gaps": gaps}, ensure_ascii=False, indent=2))
        return 0
    if not gaps:
        print(f"library {args.library}: no knowledge gaps recorded")
    for g in gaps:
        last = dt.datetime.fromtimestamp(g["last_seen"], tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        flt = f"  filters {json.dumps(g['filters'], ensure_ascii=False)}" if g["filters"] else ""
        print(f"{g['hit_count']:>5}×  {g['query']}{flt}  (last {last} UTC; {g['reason']}; {g['gap_id']})")
    return 0
