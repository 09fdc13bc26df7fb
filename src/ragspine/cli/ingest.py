"""``ragspine ingest`` and ``ragspine ocr``: indexing PDFs, and the OCR a two-phase ingest owes.

Only argparse at import time; the engine is imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragspine.cli.common import EXIT_FAILED, _fail, _parse_meta, _settings, _size_threads


def cmd_ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragspine.engine import Engine
    from ragspine.errors import LibraryNotFoundError, RagspineError
    from ragspine.indexing.stages import add as add_stages
    from ragspine.indexing.stages import summary as stage_summary

    meta = _parse_meta(args.meta)
    if args.sensitivity is not None:
        meta["sensitivity"] = args.sensitivity
    paths: list[Path] = []
    for p in args.paths:
        path = Path(p)
        if path.is_dir():
            paths.extend(sorted(path.rglob("*.pdf")))
        elif path.is_file():
            paths.append(path)
        else:
            _fail(f"no such file or directory: {p}")
    if not paths:
        _fail("no PDF files found in the given paths")
    if "doc_id" in meta and len(paths) > 1:
        _fail("--meta doc_id=... names one document, but several files were given")
    if getattr(args, "engine", "local") == "ray":
        return _ingest_ray(_settings(args), args, paths, meta)
    settings = _settings(args)
    _size_threads(settings)
    engine = Engine(settings)
    jobs = args.jobs if args.jobs is not None else engine.ingest_jobs(len(paths))
    failed = added = 0
    stage_times: dict[str, float] = {}
    owed: list[tuple[Path, Any, Any]] = []  # (file, first-phase result, future of its OCR)
    ocr_bar = _OcrBar(tqdm, disable=args.quiet)
    try:
        try:
            engine.library(args.library)
        except LibraryNotFoundError:
            engine.create_library(args.library)
            print(f"created library '{args.library}'", file=sys.stderr)
        def one(path: Path, bar: Any) -> Any:
            """Ingest one file; its result, or the error that refused it."""
            def progress(done: int, total: int) -> None:
                if bar is not None:
                    bar.set_description(path.name[:40], refresh=False)
                    bar.total, bar.n = total, done
                    bar.refresh()

            def ocr_progress(done: int, total: int) -> None:  # before the pages are written
                if bar is not None:
                    bar.set_description(f"OCR {path.name[:36]}", refresh=False)
                    bar.total, bar.n = total, done
                    bar.refresh()

            try:
                r = engine.ingest(args.library, path, dict(meta), progress=progress, ocr_progress=ocr_progress,
                                  defer_ocr=True)
            except RagspineError as exc:
                return exc
            finally:
                if bar is not None:
                    bar.close()
            if r.ocr in ("pending", "failed") and r.doc_id is not None:
                # The pages that need content OCR follow, while the next files are read.
                owed.append((path, r, engine.finish_ocr_later(args.library, r.doc_id, progress=ocr_bar.update_doc(
                    r.doc_id, len(r.ocr_pending_pages)))))
            return r

        def report(path: Path, r: Any) -> int:
            """Print one file's outcome; the pages it added, or -1 when it failed."""
            if isinstance(r, RagspineError):
                print(f"{path}: error: {r.detail}")
                return -1
            pending = f", OCR of pages {r.ocr_pending_pages} follows" if r.ocr in ("pending", "failed") else ""
            pending += f", dense vectors of {r.dense_pending} passages follow" if r.dense == "pending" else ""
            if r.status == "indexed":
                dropped = f", dropped by policy: pages {r.pages_dropped}" if r.pages_dropped else ""
                ocr = f", {r.pages_ocr} read by OCR" if r.pages_ocr else ""
                print(f"{path}: indexed {r.doc_id} v{r.version}: {r.pages_indexed} pages{ocr}, "
                      f"{r.chunks} passages{dropped}{pending} ({r.seconds:.1f}s)")
                return int(r.pages_indexed)
            if r.status == "ocr_pending":
                print(f"{path}: {r.doc_id}: every page needs OCR; all {len(r.ocr_pending_pages)} follow")
                return 0
            if r.status == "unchanged":
                print(f"{path}: unchanged ({r.doc_id} v{r.version}){pending}")
            else:
                print(f"{path}: dropped by policy ({r.pages_total or 'all'} pages not indexed)")
            return 0

        if jobs == 1:
            outcomes = ((path, one(path, tqdm(total=0, desc=path.name[:40], unit="page", leave=False,
                                               disable=args.quiet))) for path in paths)
        else:
            # Documents in parallel (the engine holds the library lock only around each commit);
            # one bar over the files instead of one per file.
            from concurrent.futures import ThreadPoolExecutor, as_completed

            pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="ragspine-ingest")
            futures = {pool.submit(one, path, None): path for path in paths}
            files_bar = tqdm(total=len(paths), desc="files", unit="file", leave=False, disable=args.quiet)

            def done_in_order() -> Any:
                try:
                    for fut in as_completed(futures):
                        files_bar.update(1)
                        yield futures[fut], fut.result()
                finally:
                    files_bar.close()
                    pool.shutdown(wait=True, cancel_futures=True)

            outcomes = done_in_order()
        for path, r in outcomes:
            n = report(path, r)
            if n < 0:
                failed += 1
            else:
                added += n
                add_stages(stage_times, r.stages)
        ocr_failed, ocr_added = _wait_for_ocr(owed, ocr_bar)
        failed += ocr_failed
        added += ocr_added
        if engine.dense_queue.backlog:  # RAGSPINE_DENSE_PHASE=background: the command ends with them in
            if not args.quiet:
                print(f"waiting for the dense vectors of {engine.dense_queue.backlog} documents")
            engine.dense_queue.join()
        if stage_times and not args.quiet:
            print(stage_summary(stage_times))  # which stage bounds this ingest (ragspine.indexing.stages)
        if added and args.optimize:
            _optimize_after_ingest(engine, args.library, added)
    except RagspineError as exc:
        _fail(exc.detail)
    except KeyboardInterrupt:
        engine.close(drain=0.0)  # Ctrl-C: owed OCR stops at its next page (and resumes later), not at its end
        raise
    finally:
        engine.close()
    return EXIT_FAILED if failed else 0


class _OcrBar:
    """One progress bar over the pages every owed OCR reads (documents report separately)."""

    def __init__(self, tqdm: Any, *, disable: bool) -> None:
        import threading

        self._tqdm, self._disable = tqdm, disable
        self._bar: Any = None
        self._done: dict[str, int] = {}
        self._total: dict[str, int] = {}
        self._lock = threading.Lock()

    def update_doc(self, doc_id: str, pages: int) -> Any:
        with self._lock:
            self._total[doc_id], self._done[doc_id] = pages, 0

        def progress(done: int, total: int) -> None:
            with self._lock:
                self._done[doc_id], self._total[doc_id] = done, total
                if self._bar is not None:
                    self._bar.total, self._bar.n = sum(self._total.values()), sum(self._done.values())
                    self._bar.refresh()
        return progress

    def start(self) -> None:
        with self._lock:
            self._bar = self._tqdm(total=sum(self._total.values()), initial=sum(self._done.values()),
                                   desc="OCR", unit="page", leave=False, disable=self._disable)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _wait_for_ocr(owed: list[tuple[Path, Any, Any]], bar: _OcrBar) -> tuple[int, int]:
    """Wait for the second phase of every document that owed OCR; print each outcome. The
    number that failed, and the pages the new versions added."""
    from ragspine.errors import RagspineError

    if not owed:
        return 0, 0
    pages = sum(len(r.ocr_pending_pages) for _, r, _ in owed)
    print(f"reading {pages} pages of {len(owed)} documents by OCR...", file=sys.stderr)
    bar.start()
    failed = added = 0
    try:
        for path, first, fut in owed:
            try:
                r = fut.result()
            except RagspineError as exc:
                kept = f"v{first.version} stays searchable; " if first.version else ""
                print(f"{path}: OCR failed: {exc.detail} ({kept}'ragspine ocr --resume' retries)")
                failed += 1
                continue
            if r is None:
                continue  # superseded meanwhile
            dropped = f", dropped by policy: pages {r.pages_dropped}" if r.pages_dropped else ""
            print(f"{path}: OCR done: {r.doc_id} v{r.version}: {r.pages_indexed} pages, {r.pages_ocr} read by OCR, "
                  f"{r.chunks} passages{dropped} ({r.seconds:.1f}s)")
            added += max(0, int(r.pages_indexed) - int(first.pages_indexed))
    finally:
        bar.close()
    return failed, added


def add_ocr_command(sub: Any) -> None:
    s = sub.add_parser("ocr", help="finish the OCR that two-phase ingests still owe (pending or failed)")
    s.add_argument("--resume", action="store_true", required=True,
                   help="read the pages of every document whose OCR is pending or failed")
    s.add_argument("--library", metavar="NAME", default=None, help="only this library (default: all)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_ocr)


def cmd_ocr(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragspine.engine import Engine
    from ragspine.errors import RagspineError

    settings = _settings(args)
    _size_threads(settings)
    engine = Engine(settings)
    try:
        names = [args.library] if args.library else engine.list_libraries()
        bar = _OcrBar(tqdm, disable=args.quiet)
        owed: list[tuple[Path, Any, Any]] = []
        for name in names:
            engine.library(name)
            for d in engine.indexer.deferred.owed_entries(name):
                pages = list(d.get("ocr_pending_pages") or [])
                fut = engine.finish_ocr_later(name, d["doc_id"], progress=bar.update_doc(d["doc_id"], len(pages)))
                first = argparse.Namespace(version=d.get("active_version"), pages_indexed=d.get("pages_indexed") or 0,
                                           ocr_pending_pages=pages)
                owed.append((Path(f"{name}/{d['doc_id']}"), first, fut))
        if not owed:
            print("no OCR owed" + (f" in library '{args.library}'" if args.library else ""))
            return 0
        failed, _ = _wait_for_ocr(owed, bar)
    except RagspineError as exc:
        _fail(exc.detail)
    except KeyboardInterrupt:
        engine.close(drain=0.0)  # Ctrl-C: owed OCR stops at its next page (and resumes later), not at its end
        raise
    finally:
        engine.close()
    return EXIT_FAILED if failed else 0


#: A CLI ingest that wrote at least this share of a library's pages builds its search indexes
#: at the end (Engine.optimize_library): a bulk load, where nobody searches this process.
OPTIMIZE_SHARE = 0.1


def _optimize_after_ingest(engine: Any, library: str, added: int) -> None:
    total = sum(d["pages_indexed"] or 0 for d in engine.documents(library))
    if added < OPTIMIZE_SHARE * total:
        print(f"search indexes of '{library}' not rebuilt: {added} of its {total} pages are new "
              f"(run `ragspine libraries --optimize {library}` after a bulk ingest)", file=sys.stderr)
        return
    print(f"building the search indexes of '{library}' ({total} pages)...", file=sys.stderr)
    seconds = engine.optimize_library(library)
    print(f"search indexes of '{library}' built in {seconds:.1f} s", file=sys.stderr)


def _ingest_ray(settings: Any, args: argparse.Namespace, paths: list[Path], meta: dict[str, Any]) -> int:
    """Bulk ingest on Ray Data (render on CPU tasks, encode on an actor pool, write in order)."""
    from ragspine.errors import MissingExtraError, RagspineError

    if args.encoders < 1 or (args.batch_size is not None and args.batch_size < 1):
        _fail("--encoders and --batch-size must be at least 1")
    try:
        from ragspine.serving.ray_ingest import bulk_ingest
    except MissingExtraError as exc:
        _fail(exc.detail)
    try:
        r = bulk_ingest(settings, args.library, paths, meta, encoders=args.encoders,
                        batch_size=args.batch_size, progress=not args.quiet)
    except RagspineError as exc:
        _fail(exc.detail, EXIT_FAILED)
    print(f"{r.indexed} indexed, {r.unchanged} unchanged, {r.dropped} dropped by policy, "
          f"{r.failed} failed; {r.pages_encoded} pages encoded; {r.wall_s:.1f} s in all, "
          f"{r.pipeline_s:.1f} s in the pipeline")
    if r.pages_encoded:
        ratio = r.end_to_end_pages_per_s / max(r.encoder_only_pages_per_s, 1e-9)
        print(f"pages/s end to end {r.end_to_end_pages_per_s:.2f}, encoder-only "
              f"{r.encoder_only_pages_per_s:.2f} (ratio {ratio:.2f}); "
              f"encoders busy {100 * r.encoder_busy_fraction:.0f}% of the time")
    return EXIT_FAILED if r.failed else 0


