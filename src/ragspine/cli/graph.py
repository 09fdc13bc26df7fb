"""``ragspine graph relations | entities | neighbors | paths | rebuild``.

Only argparse at import time; the engine is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

SettingsFn = Callable[[argparse.Namespace], Any]
FailFn = Callable[[str], NoReturn]


def add_graph_commands(sub: Any, settings: SettingsFn, fail: FailFn) -> None:
    """Add ``graph`` and its subcommands to the ``ragspine`` subparsers ``sub``."""
    g = sub.add_parser("graph", help="relation graph: declare relations, resolve entities, neighbours, paths")
    gs = g.add_subparsers(dest="graph_command", required=True, parser_class=type(g))

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--library", required=True, metavar="NAME")
        p.add_argument("--json", action="store_true", help="print the API's JSON answer")

    p = gs.add_parser("relations", help="declare relations from a CSV or JSON file")
    p.add_argument("file", metavar="FILE", help="CSV (source,relation,target,provenance[,...]) or JSON rows")
    p.add_argument("--merge", action="store_true", help="add to the relations declared before (default: replace)")
    common(p)
    p.set_defaults(func=lambda a: _relations(a, settings, fail))

    p = gs.add_parser("entities", help="resolve a name or alias to entities")
    p.add_argument("query", nargs="?", default="", metavar="Q")
    p.add_argument("--type", default=None, help="only entities of this type")
    p.add_argument("--limit", type=int, default=20)
    common(p)
    p.set_defaults(func=lambda a: _entities(a, settings, fail))

    p = gs.add_parser("neighbors", help="entities near an entity, with the path and citations")
    p.add_argument("entity", metavar="ID", help="entity id (or a name or alias naming one entity)")
    p.add_argument("--relation", default=None, help="relation(s), comma-separated")
    p.add_argument("--depth", type=int, default=1, help="hops, 1 to 3 (default 1)")
    p.add_argument("--direction", default="both", choices=["both", "out", "in"])
    p.add_argument("--limit", type=int, default=100)
    common(p)
    p.set_defaults(func=lambda a: _neighbors(a, settings, fail))

    p = gs.add_parser("paths", help="a shortest path between two entities, every edge cited")
    p.add_argument("source", metavar="FROM")
    p.add_argument("target", metavar="TO")
    p.add_argument("--max-hops", type=int, default=4, help="1 to 6 (default 4)")
    p.add_argument("--relation", default=None, help="relation(s), comma-separated")
    common(p)
    p.set_defaults(func=lambda a: _paths(a, settings, fail))

    p = gs.add_parser("rebuild", help="derive the library's graph again from its documents")
    common(p)
    p.set_defaults(func=lambda a: _rebuild(a, settings, fail))


def run_with_engine(args: argparse.Namespace, settings: SettingsFn, fail: FailFn, work: Callable[[Any], Any]) -> Any:
    """``work(engine)`` on an engine over ``args.library`` (opened first); a ragspine error is one line."""
    from ragspine.engine import Engine
    from ragspine.errors import RagspineError

    engine = Engine(settings(args))
    try:
        engine.library(args.library)
        return work(engine)
    except RagspineError as exc:
        fail(exc.detail)
    finally:
        engine.close()


def _print_json(obj: Any) -> int:
    print(json.dumps(obj, ensure_ascii=False, indent=2))
    return 0


def _cite(c: dict[str, Any]) -> str:
    if c.get("kind") == "declared":
        return f"declared: {c.get('file')} row {c.get('row')} — {c.get('provenance')}"
    where = f"{c.get('doc_id')} v{c.get('version')}"
    if c.get("kind") == "metadata":
        return f"metadata '{c.get('field')}' of {where}"
    tail = f" ({c.get('status')})" if c.get("kind") == "model" else ""
    return f"{c.get('kind')}: {where} p.{c.get('page')} {c.get('chunk_id')}{tail}"


def _print_edges(edges: list[dict[str, Any]], indent: str) -> None:
    for e in edges:
        print(f"{indent}{e['source']} —{e['relation']}→ {e['target']}")
        for c in e["citations"]:
            print(f"{indent}    [{_cite(c)}]")
        more = e["citations_total"] - len(e["citations"])
        if more > 0:
            print(f"{indent}    (+{more} more citations)")


def _relations(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    path = Path(args.file)
    if not path.is_file():
        fail(f"no such file: {args.file}")
    data = path.read_bytes()
    mode = "merge" if args.merge else "replace"
    out = run_with_engine(args, settings, fail, lambda e: e.graph.upload_relations(args.library, data, path.name, mode))
    if args.json:
        return _print_json(out)
    print(f"{path.name}: {out['rows']} rows declared ({mode}); {out['declared']['entities']} declared entities; "
          f"graph of '{args.library}' now has {out['graph']['nodes']} nodes and {out['graph']['edges']} edges")
    return 0


def _entities(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    found = run_with_engine(args, settings, fail,
                 lambda e: e.graph.entities(args.library, args.query, type=args.type, limit=args.limit))
    if args.json:
        return _print_json({"entities": [n.to_json() for n in found]})
    if not found:
        print(f"no entity matches {args.query!r}")
    for n in found:
        aliases = f"  (aliases: {', '.join(n.aliases)})" if n.aliases else ""
        print(f"{n.id}\t{n.name}\t{n.type}{aliases}")
    return 0


def _neighbors(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    out = run_with_engine(args, settings, fail, lambda e: e.graph.neighbors(
        args.library, args.entity, relation=args.relation, depth=args.depth, direction=args.direction,
        limit=args.limit))
    if args.json:
        return _print_json(out)
    ent = out["entity"]
    print(f"{ent['name']} ({ent['id']}, {ent['type']}): {len(out['neighbors'])} neighbours"
          + (" (more not shown; raise --limit)" if out["truncated"] else ""))
    for n in out["neighbors"]:
        print(f"  {n['id']}\t{n['name']}\t{n['type']}\tdepth {n['depth']}")
        _print_edges(n["path"], "      ")
    return 0


def _paths(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    out = run_with_engine(args, settings, fail, lambda e: e.graph.paths(
        args.library, args.source, args.target, max_hops=args.max_hops, relation=args.relation))
    if args.json:
        return _print_json(out)
    a, b = out["from"], out["to"]
    if not out["found"]:
        print(f"no path of at most {out['max_hops']} hops from {a['name']} to {b['name']}")
        return 0
    print(f"{a['name']} → {b['name']}: {out['hops']} hops via " + " → ".join(n["name"] for n in out["nodes"]))
    _print_edges(out["path"], "  ")
    return 0


def _rebuild(args: argparse.Namespace, settings: SettingsFn, fail: FailFn) -> int:
    out = run_with_engine(args, settings, fail, lambda e: e.graph.rebuild(args.library))
    if args.json:
        return _print_json(out)
    print(f"graph of '{args.library}' rebuilt: {out['nodes']} nodes, {out['edges']} edges")
    return 0
