"""``ragspine`` command line: ingest | search | eval | serve | demo | libraries.

Heavy modules are imported inside each subcommand so ``ragspine --help`` stays instant, and
every expected failure ends as one line on stderr with a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragspine.cli.common import (  # noqa: F401  (EXIT_* and _fail are part of this module's face)
    EXIT_FAILED,
    EXIT_USAGE,
    _fail,
    _Parser,
    _positive_int,
    _settings,
    _size_threads,
)
from ragspine.cli.ingest import add_ocr_command, cmd_ingest
from ragspine.cli.libraries import add_libraries_command

# -- subcommands -------------------------------------------------------------------------------


def cmd_search(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ragspine.engine import Engine
    from ragspine.errors import RagspineError
    from ragspine.retrieval.search import SearchRequest
    from ragspine.store.predicates import parse_predicate_text

    try:
        filters = [vars(parse_predicate_text(f)) for f in args.filter]
        for f in filters:  # back to JSON form for the request
            if isinstance(f["value"], tuple):
                f["value"] = list(f["value"])
        req = SearchRequest(
            query=args.query,
            libraries=args.library,
            filters=filters,
            mode=args.mode,
            top_k=args.top_k,
            rerank=args.rerank,
            allow_unfiltered_fallback=args.allow_unfiltered_fallback,
            rewrite=args.rewrite,
            corrective=args.corrective,
            postprocess=_steps(args.postprocess),
        )
    except RagspineError as exc:
        _fail(exc.detail)
    except ValidationError as exc:
        err = exc.errors()[0]
        _fail(f"{'.'.join(str(x) for x in err['loc']) or 'request'}: {err['msg']}")
    # One query per process: building the in-memory BM25 index would cost more than it saves.
    engine = Engine(_settings(args).model_copy(update={"lexical_index": "store"}))
    try:
        res = engine.search(req)
    except RagspineError as exc:
        _fail(exc.detail)
    finally:
        engine.close()
    if args.json:
        print(json.dumps(res.to_json(), ensure_ascii=False, indent=2))
        return 0
    if res.degraded:
        print(f"(degraded: {'; '.join(res.degraded_reasons)})")
    if res.queries and len(res.queries) > 1:
        print("(searched: " + " | ".join(q["query"] for q in res.queries) + ")")
    if res.abstained and res.corrective:
        print(f"abstained: {res.corrective['reason']}")
    elif not res.hits:
        print("no hits" + (" (try removing a filter)" if req.filters else ""))
    for i, h in enumerate(res.hits, 1):
        text = " ".join(h.text.split())
        via = f" found by queries {','.join(str(x + 1) for x in h.found_by)}" if h.found_by else ""
        printed = f" (printed {'–'.join(map(str, h.printed_pages))})" if h.printed_pages else ""
        print(f"{i:>3}. [{h.library_id}] {h.title} — p.{h.page}{printed} ({h.doc_id}, {h.chunk_id}) "
              f"fused={h.scores['fused']:.4f}{via}")
        print(f"     {text[:200]}{'…' if len(text) > 200 else ''}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ragspine.errors import RagspineError
    from ragspine.evaluation import ChainFlags, evaluate

    if not Path(args.dataset).is_dir():
        _fail(f"no such dataset folder: {args.dataset}")
    settings = _settings(args)
    if args.ocr is not None:
        settings = settings.model_copy(update={"ocr": args.ocr})
    if args.mode == "hybrid" and not settings.page_model and not settings.dense_model:
        from ragspine.models.registry import DEFAULT_DENSE_MODEL

        # Hybrid needs a model channel; on a machine without a page model that is dense text.
        settings = settings.model_copy(update={"dense_model": DEFAULT_DENSE_MODEL})
        print(f"eval --mode hybrid: no RAGSPINE_PAGE_MODEL or RAGSPINE_DENSE_MODEL set; using the dense "
              f"model {DEFAULT_DENSE_MODEL} (BM25 + dense)", file=sys.stderr)
    _size_threads(settings)
    try:
        steps = tuple(_steps(args.postprocess))
        chain = (ChainFlags(args.rewrite, args.corrective, steps)
                 if args.rewrite is not None or args.corrective or steps else None)
        result = evaluate(
            settings, Path(args.dataset), split=args.split, mode=args.mode,
            progress=not args.json, limit_queries=args.limit, chain=chain,
        )
    except RagspineError as exc:
        _fail(exc.detail)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        for k, v in result.items():
            if k in ("by_evidence_type", "by_document_type"):
                for t, r in v.items():
                    print(f"{'ndcg@10':>14}: {r['ndcg@10']:.4f}  {t} ({r['queries']} queries)")
                continue
            if k == "abstention":
                for kind, r in v.items():
                    rate = "-" if r["rate"] is None else f"{r['rate']:.1%}"
                    print(f"{'abstained':>14}: {r['abstained']}/{r['queries']} ({rate}) {kind}")
                continue
            print(f"{k:>14}: {v:.4f}" if isinstance(v, float) else f"{k:>14}: {v}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if getattr(args, "engine", "local") == "ray":
        return _serve_ray(settings, args)

    return _run_server(settings, args)


def _run_server(settings: Any, args: argparse.Namespace, engine: Any = None) -> int:
    import uvicorn

    from ragspine.serving.app import create_app

    from ragspine.serving.auth import KeysError

    try:
        app = create_app(settings, engine, close_engine=True)  # the caller's engine is closed at shutdown too
    except KeysError as exc:
        _fail(f"bad API keys (RAGSPINE_API_KEYS or RAGSPINE_API_KEYS_FILE): {exc}")
    print(f"ragspine serving on http://{args.host}:{args.port} (data dir {settings.data_dir})",
          file=sys.stderr)
    # On SIGTERM, open requests get a few seconds (a 'wait=true' upload's job goes on without its
    # request); the ingest jobs then get RAGSPINE_DRAIN_SECONDS in the app's shutdown. Ctrl-C
    # (SIGINT) is someone at a terminal: the OCR second phases stop at their next page at once
    # (the next start finishes them) instead of draining. (uvicorn.run, less what it does for
    # reload and several workers, which ragspine does not use, to see which signal it was.)
    import signal

    from uvicorn.config import STARTUP_FAILURE

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if sig == signal.SIGINT:
                app.state.interrupted = True
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                                   timeout_graceful_shutdown=5))
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:  # as uvicorn.run: the port is taken, or the app did not start
        sys.exit(STARTUP_FAILURE)
    return 0


def _serve_ray(settings: Any, args: argparse.Namespace) -> int:
    """The same API on Ray Serve (local Ray, or RAGSPINE_RAY_ADDRESS), until Ctrl-C / SIGTERM."""
    import signal
    import threading

    from ragspine.errors import MissingExtraError, RagspineError

    try:
        from ragspine.serving import ray_app
    except MissingExtraError as exc:
        _fail(exc.detail)
    stop = threading.Event()
    try:
        ray_app.init_ray(settings)
        # After ray.init, which installs handlers of its own, and before the deploy (the API can
        # answer before serve.run returns): ours shut Serve and Ray down in order.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        ray_app.start_local(settings, args.host, args.port)
        print(f"ragspine serving on http://{args.host}:{args.port} with Ray Serve (data dir "
              f"{settings.data_dir}; Ctrl-C stops)", file=sys.stderr)
        while not stop.wait(0.5):
            pass
    except RagspineError as exc:
        _fail(exc.detail, EXIT_FAILED)
    except RuntimeError as exc:  # Serve could not deploy: its first line says which deployment
        _fail(f"Ray Serve: {str(exc).strip().splitlines()[0]}", EXIT_FAILED)
    finally:
        ray_app.stop_local()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ragspine.demo import DEMO_LIBRARY, build_demo_corpus, demo_queries
    from ragspine.engine import Engine
    from ragspine.errors import LibraryNotFoundError

    settings = _settings(args)
    engine = Engine(settings)
    owed = []
    # The generated PDFs (RESTRICTED pages included) live in a temporary folder only: what
    # the data dir keeps is what the index build let through (and, until its OCR is read, the
    # bytes of a document whose OCR is owed: ragspine.indexing.ocr_phase).
    try:
        with tempfile.TemporaryDirectory(prefix="ragspine-demo-") as tmp:
            try:
                engine.library(DEMO_LIBRARY)
            except LibraryNotFoundError:
                engine.create_library(DEMO_LIBRARY)
            for doc in build_demo_corpus(Path(tmp)):
                # Two phases: the text layer answers at once, the charts' OCR follows.
                r = engine.ingest(DEMO_LIBRARY, doc.path, doc.metadata, defer_ocr=True,
                                  defer_dense=engine.defer_dense(serving=True))
                if r.status == "dropped_by_policy":
                    what = "dropped by policy (document is RESTRICTED)"
                else:
                    what = f"{r.status}, {r.pages_indexed} pages"
                    if r.pages_dropped:
                        what += f", pages {r.pages_dropped} dropped by policy"
                    if r.dense == "pending":
                        what += f"; dense vectors of {r.dense_pending} passages follow in the background"
                    if r.ocr in ("pending", "failed") and r.doc_id is not None:
                        what += f"; OCR of pages {r.ocr_pending_pages} follows in the background"
                        owed.append(engine.finish_ocr_later(DEMO_LIBRARY, r.doc_id))
                print(f"demo: {doc.path.name}: {what}", file=sys.stderr)
        from ragspine.demo.corpus import demo_relations_csv

        g = engine.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), "demo-relations.csv")
        print(f"demo: relations: {g['rows']} declared; graph has {g['graph']['nodes']} nodes, "
              f"{g['graph']['edges']} edges", file=sys.stderr)
        base = f"http://{args.host}:{args.port}"
        print("\nTry these while the server runs:\n")
        for q in demo_queries():
            body = json.dumps({"libraries": [DEMO_LIBRARY], "top_k": 3, **q}, ensure_ascii=False)
            print(f"  curl -s {base}/v1/search -H 'Content-Type: application/json' -d '{body}'\n")
        if args.no_serve:
            for fut in owed:
                fut.result()
            engine.dense_queue.join()
            return 0
        return _run_server(settings, args, engine)  # the same engine: its OCR goes on while it serves
    finally:
        engine.close()


# -- parser ------------------------------------------------------------------------------------

POST_STEPS = ("mmr", "lost_in_middle")  # ragspine.retrieval.search.POST_STEPS, without importing it


def _steps(text: str | None) -> list[str]:
    steps = [s.strip() for s in (text or "").split(",") if s.strip()]
    bad = [s for s in steps if s not in POST_STEPS]
    if bad:
        _fail(f"--postprocess takes {', '.join(POST_STEPS)} (comma-separated), got {', '.join(bad)}")
    return steps


def _chain_flags(s: argparse.ArgumentParser) -> None:
    """The query chain's per-request switches (search and eval)."""
    s.add_argument("--rewrite", action=argparse.BooleanOptionalAction, default=None,
                   help="also search the glossary and alias variants of the query (default: RAGSPINE_REWRITE)")
    s.add_argument("--corrective", action="store_true",
                   help="grade the answer; drop filters (with --allow-unfiltered-fallback) or rewrite when it is "
                   "weak, abstain when it stays weak")
    s.add_argument("--postprocess", default=None, metavar="STEPS",
                   help="after rerank: mmr and/or lost_in_middle, comma-separated, in order")


def build_parser() -> argparse.ArgumentParser:
    from ragspine import __version__

    p = _Parser(prog="ragspine", description="Multimodal retrieval for chart-heavy PDF reports.")
    p.add_argument("--version", action="version", version=f"ragspine {__version__}")
    p.add_argument("--data-dir", help="data directory (default: $RAGSPINE_DATA_DIR or ./.ragspine)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("ingest", help="index PDF files (or folders of PDFs) into a library")
    s.add_argument("paths", nargs="+", metavar="PATH")
    s.add_argument("--library", required=True, metavar="NAME")
    s.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="document metadata, repeatable (values parsed as JSON when they can be)")
    s.add_argument("--sensitivity", metavar="LEVEL", help="document sensitivity (RESTRICTED is not indexed)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                   help="documents ingested at once (default: 2 with OCR on and several files, else 1; the "
                   "library is locked only around each commit)")
    s.add_argument("--optimize", action=argparse.BooleanOptionalAction, default=True,
                   help="build the library's search indexes at the end when this run wrote at least a tenth "
                   "of its pages (default: on)")
    s.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="'local' (this process) or 'ray' (Ray Data: parse and render on CPU tasks, "
                   "encode on an actor pool; needs ragspine[serve])")
    s.add_argument("--encoders", type=int, default=1, metavar="N",
                   help="--engine ray: page-encoder actors (each holds the model)")
    s.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="--engine ray: pages per encoder call (default RAGSPINE_RAY_PAGE_BATCH_SIZE)")
    s.set_defaults(func=cmd_ingest)
    add_ocr_command(sub)
    from ragspine.cli.sync import add_sync_command  # argparse only, like ingest

    add_sync_command(sub)
    from ragspine.cli.backup import add_backup_commands
    from ragspine.cli.mcp import add_mcp_command

    add_mcp_command(sub)
    add_backup_commands(sub)

    s = sub.add_parser("search", help="search one or more libraries")
    s.add_argument("query")
    s.add_argument("--library", action="append", required=True, metavar="NAME",
                   help="library to search, repeatable")
    s.add_argument("--mode", default="auto", choices=["auto", "hybrid", "vector", "bm25", "lexical", "economy"])
    s.add_argument("--top-k", type=int, default=10)
    s.add_argument("--filter", action="append", default=[], metavar="'FIELD OP VALUE'",
                   help="metadata predicate, repeatable; OP is eq ne in nin gt gte lt lte between")
    s.add_argument("--allow-unfiltered-fallback", action="store_true",
                   help="when filters match nothing, search without them (the answer says so)")
    s.add_argument("--rerank", action="store_true",
                   help="rerank the fused hits with RAGSPINE_RERANKER (cross-encoder or ColBERT)")
    _chain_flags(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("eval", help="evaluate retrieval on a BEIR or page-level PDF dataset")
    s.add_argument("dataset", metavar="DATASET_DIR")
    s.add_argument("--split", default="dev")
    s.add_argument("--mode", default="bm25", choices=["auto", "hybrid", "vector", "bm25", "lexical", "economy"])
    s.add_argument("--limit", type=int, default=None, help="evaluate only the first N queries")
    s.add_argument("--ocr", choices=["auto", "full", "off"], default=None,
                   help="OCR of text in pixels while indexing a PDF dataset (default: RAGSPINE_OCR)")
    _chain_flags(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_eval)

    for name, helptext in (("serve", "run the REST API"), ("demo", "build, ingest and serve the demo corpus")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--port", type=int, default=8000)
        s.add_argument("--engine", default="local", choices=["local", "ray"],
                       help="serving engine: 'local' (one process) or 'ray' (Ray Serve deployments; "
                       "needs ragspine[serve])")
        if name == "demo":
            s.add_argument("--no-serve", action="store_true", help="build and ingest, then exit")
        s.set_defaults(func=cmd_demo if name == "demo" else cmd_serve)

    add_libraries_command(sub)

    from ragspine.cli.chain import (
        add_chain_commands,  # argparse only; the engine loads per command
    )
    from ragspine.cli.graph import add_graph_commands

    add_graph_commands(sub, _settings, _fail)
    add_chain_commands(sub, _settings, _fail)
    return p


#: Import names of the server's packages (``ragspine[server]``): the base install carries only
#: what the client needs, and every command runs the server's code.
SERVER_IMPORTS = ("numpy", "pydantic_settings", "fitz", "qdrant_edge", "fastapi", "mcp")


def missing_server_packages() -> list[str]:
    import importlib.util

    return [name for name in SERVER_IMPORTS if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = missing_server_packages()
    if missing:
        _fail(f"ragspine {args.command} needs the server's packages (missing: {', '.join(missing)}): "
              "pip install 'ragspine[server]'")
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from ragspine.errors import RagspineError

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except RagspineError as exc:  # a command's own expected failure (a held data dir): one line
        _fail(exc.detail, EXIT_FAILED)

