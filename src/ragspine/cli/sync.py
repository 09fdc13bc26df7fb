"""``ragspine sync DIR --library L [--delete] [--watch] [--dry-run] [--meta JSON]``: keep a library
equal to a folder of PDFs (:mod:`ragspine.sync`).

Only argparse at import time; the engine (and watchdog, for ``--watch``) load when it runs.
Each file's outcome is one line on stdout (unchanged files print nothing), then the summary
``added 3, updated 1, unchanged 44, deleted 2, failed 0``; exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ragspine.cli.common import EXIT_FAILED, _fail, _settings
from ragspine.cli.ingest import _OcrBar, _optimize_after_ingest, _wait_for_ocr


def add_sync_command(sub: Any) -> None:
    s = sub.add_parser("sync", help="keep a library equal to a folder of PDFs (new, changed and removed files)")
    s.add_argument("dir", metavar="DIR", help="the folder; a file's document id comes from its path under it")
    s.add_argument("--library", required=True, metavar="NAME")
    s.add_argument("--delete", action="store_true",
                   help="delete the documents of files that are gone (only those this folder's sync created)")
    s.add_argument("--dry-run", action="store_true", help="print what would happen and change nothing")
    s.add_argument("--watch", action="store_true",
                   help="sync, then sync again after each burst of changes, until Ctrl-C")
    s.add_argument("--quiet-seconds", type=float, default=2.0, metavar="S",
                   help="--watch: seconds without changes before a round, and the age a file must reach to be "
                   "read (default 2)")
    s.add_argument("--meta", default=None, metavar="JSON",
                   help="metadata for every file, a JSON object with the fields of an upload's metadata; a sidecar "
                   "<file>.pdf.json overrides it field by field")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.add_argument("--optimize", action=argparse.BooleanOptionalAction, default=True,
                   help="build the library's search indexes at the end when a run wrote at least a tenth of its "
                   "pages (default: on)")
    s.set_defaults(func=cmd_sync)


def _meta(text: str | None) -> dict[str, Any]:
    from ragspine.sync.files import check_meta

    if text is None:
        return {}
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"--meta is not valid JSON: {exc.msg} (column {exc.colno})")
    if not isinstance(meta, dict):
        _fail(f"--meta must be a JSON object of metadata fields, got {type(meta).__name__}")
    try:
        check_meta(meta, "--meta")
    except ValueError as exc:
        _fail(str(exc))
    return meta


def cmd_sync(args: argparse.Namespace) -> int:
    if args.watch and args.dry_run:
        _fail("--dry-run and --watch do not go together (a dry run changes nothing, so a watch would repeat it)")
    if args.quiet_seconds < 0:
        _fail(f"--quiet-seconds must be at least 0, got {args.quiet_seconds}")
    meta = _meta(args.meta)
    root = Path(args.dir)
    if not root.is_dir():
        _fail(f"no such folder: {args.dir} (nothing synced, nothing deleted)")

    from ragspine.engine import Engine
    from ragspine.errors import RagspineError
    from ragspine.sync import SyncOptions

    settings = _settings(args)
    try:
        engine = Engine(settings)
    except RagspineError as exc:
        _fail(exc.detail)
    options = SyncOptions(delete=args.delete, dry_run=args.dry_run, meta=meta,
                          settle_s=args.quiet_seconds if args.watch else None)
    try:
        if not args.watch:
            return _round(engine, args, root, options)[0]
        return _watch(engine, args, root, options)
    except KeyboardInterrupt:
        engine.close(drain=0.0)  # Ctrl-C: owed OCR stops at its next page (and resumes later), not at its end
        raise
    finally:
        engine.close()


def _round(engine: Any, args: argparse.Namespace, root: Path, options: Any, *,
           in_watch: bool = False) -> tuple[int, Any]:
    """One sync with its progress bar, lines and summary: the exit status it earns, and its
    report (None when the folder could not be synced at all, in a watch)."""
    from tqdm import tqdm

    from ragspine.errors import RagspineError
    from ragspine.sync import sync_folder

    bars: list[Any] = []
    ocr_bar = _OcrBar(tqdm, disable=args.quiet)

    def on_file(done: int, total: int, rel: str) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc="sync", unit="file", leave=False, disable=args.quiet))
        bar = bars[0]
        bar.total, bar.n = total, done
        bar.set_description(rel[-40:] or "sync", refresh=False)
        bar.set_postfix_str("", refresh=False)
        bar.refresh()

    def on_pages(done: int, total: int) -> None:
        if bars:
            bars[0].set_postfix_str(f"page {done}/{total}")

    def on_outcome(o: Any) -> None:
        if o.status == "unchanged" and not o.detail:
            return
        name = o.action.rel or "(a RESTRICTED file)"
        line = f"{name}: {o.status}" + (f": {o.detail}" if o.detail else "")
        if options.dry_run:
            line = f"{name}: {o.detail or o.status}" if o.status != "failed" else f"{name}: would fail: {o.detail}"
        (bars[0].write if bars else print)(line)

    try:
        report = sync_folder(engine, args.library, root, options, on_file=on_file, on_pages=on_pages,
                             on_outcome=on_outcome, ocr_progress=ocr_bar.update_doc)
    except RagspineError as exc:
        if in_watch:  # (the folder vanished meanwhile): say so, and keep watching
            print(f"ragspine: error: {exc.detail}", file=sys.stderr)
            return EXIT_FAILED, None
        _fail(exc.detail)
    finally:
        for bar in bars:
            bar.close()
    for note in report.notes:
        print(note, file=sys.stderr)
    ocr_failed = 0
    if report.owed:
        ocr_failed, added = _wait_for_ocr(report.owed, ocr_bar)
        report.pages_added += added
    prefix = "dry run (nothing changed): " if options.dry_run else ""
    print(f"{prefix}{report.summary()}" + (f"; OCR failed for {ocr_failed}" if ocr_failed else ""))
    if report.pages_added and args.optimize and not options.dry_run:
        _optimize_after_ingest(engine, args.library, report.pages_added)
    return (EXIT_FAILED if report.failed or ocr_failed else 0), report


def _watch(engine: Any, args: argparse.Namespace, root: Path, options: Any) -> int:
    from ragspine.sync.watch import watch

    status = [0]

    def run_once() -> bool:
        """One round; whether it deferred a file still being written (another round follows)."""
        status[0], report = _round(engine, args, root, options, in_watch=True)
        return report is not None and report.count("deferred") > 0

    def ready() -> None:
        print(f"watching {root.resolve()} (Ctrl-C stops)", file=sys.stderr)

    try:
        watch(root, run_once, quiet_s=args.quiet_seconds, on_ready=ready)
    except KeyboardInterrupt:
        print("stopped watching", file=sys.stderr)
    return status[0]
