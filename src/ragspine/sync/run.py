"""Run one sync of a folder into a library through an :class:`~ragspine.engine.Engine`.

Order of writes, which is what makes a run crash-safe (kill it anywhere, run it again, and the
end state is that of one clean run):

1. before a file is ingested, its record entry is written as ``claimed`` with the content key
   about to be committed (and the one committed before) and flushed to disk: the index never
   holds a document of this root that the record does not name, so ``--delete`` can always
   clean it up, and a document replaced by anyone else is never mistaken for it;
2. the ingest commits atomically (a crash leaves the previous version, repaired on the next
   open) as ``ragspine ingest`` does it, in two phases with the content OCR deferred;
3. the entry becomes ``indexed`` (or ``dropped``, or ``failed`` for bytes that cannot be
   indexed). Lost in a crash, the next run finds the manifest already holding the claimed key
   and only rewrites the entry (``touch``), or tries the failed file once more.

A RESTRICTED document is dropped by the engine first (an earlier version of ours deleted) and
recorded after, with nothing that names it. A gone file's document is deleted before its entry
is forgotten. Deletions run after every ingest, and never in a run that found no PDF at all.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar

from ragspine.catalog.sync_record import SyncedFile, SyncRecords, sync_point
from ragspine.errors import (
    DocumentError,
    DocumentNotFoundError,
    InvalidRequestError,
    LibraryNotFoundError,
    RagspineError,
)
from ragspine.sync.files import LocalFile, file_sha256, read_bytes, scan
from ragspine.sync.plan import Action, plan_file, plan_gone

if TYPE_CHECKING:
    from ragspine.engine import Engine
    from ragspine.indexing import IngestResult

#: The counters of the summary line, in its order.
COUNTERS = ("added", "updated", "unchanged", "deleted", "failed")
#: The status each kind of action reports: a counter of the summary, or one of its own.
_STATUS = {"add": "added", "update": "updated", "unchanged": "unchanged", "touch": "unchanged",
           "delete": "deleted", "forget": "deleted", "fail": "failed", "defer": "deferred", "keep": "kept",
           "spare": "spared"}


class RootError(InvalidRequestError):
    """The folder to sync does not exist or is not a folder (nothing is synced or deleted)."""

    type = "sync-root"
    title = "Sync folder not found"


@dataclass
class Outcome:
    """What happened to one file (``status`` is the counter it went to, or ``deferred``,
    ``kept``, ``spared``)."""

    action: Action
    status: str
    detail: str = ""
    result: IngestResult | None = None


@dataclass
class SyncReport:
    root: str
    library: str
    dry_run: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    #: Lines for the user about the run as a whole (an empty folder, files kept without --delete).
    notes: list[str] = field(default_factory=list)
    #: Documents whose content OCR follows: (relative path, first-phase result, its future).
    owed: list[tuple[Path, Any, Future[Any]]] = field(default_factory=list)
    pages_added: int = 0
    seconds: float = 0.0

    def count(self, counter: str) -> int:
        return sum(1 for o in self.outcomes if o.status == counter)

    @property
    def failed(self) -> int:
        return self.count("failed")

    def summary(self) -> str:
        """``added 3, updated 1, unchanged 44, deleted 2, failed 0``."""
        return ", ".join(f"{c} {self.count(c)}" for c in COUNTERS)


@dataclass
class SyncOptions:
    delete: bool = False
    dry_run: bool = False
    #: Metadata for every file (a sidecar overrides it field by field).
    meta: dict[str, Any] = field(default_factory=dict)
    #: ``--watch``: files modified less than this many seconds ago wait for a later round.
    settle_s: float | None = None
    #: Wall clock in ns (tests move it).
    now_ns: Callable[[], int] = time.time_ns


#: Called with (files done, files in all, relative path of the next file).
FileProgress = Callable[[int, int, str], None]


def sync_folder(
    engine: Engine,
    library: str,
    root: Path,
    options: SyncOptions | None = None,
    *,
    on_file: FileProgress | None = None,
    on_pages: Callable[[int, int], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    ocr_progress: Callable[[str, int], Any] | None = None,
) -> SyncReport:
    """Make ``library`` hold the PDFs under ``root`` (see the module docstring)."""
    opts = options or SyncOptions()
    t0 = time.perf_counter()
    if not root.is_dir():
        raise RootError(f"folder {root} does not exist or is not a folder; nothing synced, nothing deleted")
    root = root.resolve()
    root_key = str(root)
    report = SyncReport(root_key, library, opts.dry_run)
    try:
        engine.library(library)
        exists = True
    except LibraryNotFoundError:
        exists = False
        if not opts.dry_run:
            engine.create_library(library)
            report.notes.append(f"created library '{library}'")
    records = SyncRecords(engine.libraries)
    everything = records.all(library) if exists else {}
    mine = {pid: r for pid, r in everything.items() if r.root == root_key}
    others: dict[str, list[tuple[str, SyncedFile]]] = {}
    for pid, r in everything.items():
        if r.root != root_key and r.doc_id is not None:
            others.setdefault(r.doc_id, []).append((pid, r))
    manifest = {e["doc_id"]: e for e in engine.libraries.doc_entries(library)} if exists else {}

    def key_of(f: LocalFile, sha: str) -> str:
        return engine.indexer.content_key(sha, f.metadata())

    def sha_of(f: LocalFile) -> str:
        return file_sha256(f.path)

    unreadable: list[str] = []
    files = scan(root, opts.meta, unreadable)
    for u in unreadable:
        report.notes.append(f"folder {u or '(the root)'} could not be listed: its files are neither synced nor "
                            "deleted this run")
    now = opts.now_ns()
    settle_ns = int(opts.settle_s * 1e9) if opts.settle_s else 0
    actions = [plan_file(f, mine.get(pid), manifest.get(f.doc_id), others.get(f.doc_id, []), root=root_key,
                         sha_of=sha_of, key_of=key_of, root_exists=lambda r: Path(r).is_dir(),
                         young=settle_ns > 0 and 0 <= now - max(f.mtime_ns, f.changed_ns) < settle_ns)
               for f in files for pid in [_pid(root_key, f)]]
    present = {a.pid for a in actions}
    gone = [(pid, r) for pid, r in sorted(mine.items(), key=lambda x: x[1].path or "") if pid not in present]
    if not files:
        report.notes.append(f"no PDF files under {root_key}" + (
            f"; nothing deleted (an empty or unmounted folder is never taken for {len(gone)} removed files)"
            if opts.delete and gone else ""))
    else:
        actions += [plan_gone(pid, r, manifest.get(r.doc_id) if r.doc_id else None, delete=opts.delete,
                              unreadable=unreadable)
                    for pid, r in gone]
    kept = sum(1 for a in actions if a.kind == "keep")
    if kept:
        report.notes.append(f"{kept} documents whose files are gone were kept (--delete removes them)")
    runner = _Runner(engine, library, root_key, records, opts.dry_run, on_pages, ocr_progress, report)
    for i, a in enumerate(actions):
        if on_file is not None:
            on_file(i, len(actions), a.rel or "(a RESTRICTED file)")
        outcome = runner.run(a)
        report.outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    if on_file is not None:
        on_file(len(actions), len(actions), "")
    report.seconds = time.perf_counter() - t0
    return report


def _pid(root_key: str, f: LocalFile) -> str:
    return sync_point(root_key, f.doc_id)


class _Runner:
    """Carries out one action (or, in a dry run, says what it would do)."""

    def __init__(self, engine: Engine, library: str, root: str, records: SyncRecords, dry_run: bool,
                 on_pages: Callable[[int, int], None] | None, ocr_progress: Callable[[str, int], Any] | None,
                 report: SyncReport) -> None:
        self.engine, self.library, self.root, self.records = engine, library, root, records
        self.dry_run, self.on_pages, self.ocr_progress, self.report = dry_run, on_pages, ocr_progress, report

    def run(self, a: Action) -> Outcome:
        status = _STATUS[a.kind]
        do = self._DO.get(a.kind)
        if do is None:  # fail, defer, keep: nothing to write
            return Outcome(a, status, a.reason)
        if self.dry_run:
            return Outcome(a, status, a.reason or _WOULD[a.kind])
        try:
            return do(self, a, status)
        except RagspineError as exc:
            return Outcome(a, "failed", exc.detail)
        except OSError as exc:
            return Outcome(a, "failed", f"cannot be read: {exc}")

    # -- per kind --------------------------------------------------------------------------

    def _unchanged(self, a: Action, status: str) -> Outcome:
        if a.owes_ocr and a.doc_id is not None:
            self._owe(a, None)
            return Outcome(a, status, "OCR still owed; it follows")
        return Outcome(a, status)

    def _touch(self, a: Action, status: str) -> Outcome:
        f = a.file
        assert f is not None
        if a.restricted:
            self.records.put(self.library, a.pid, self._entry(f, None, "dropped", ()))
        else:
            self.records.put(self.library, a.pid, self._entry(f, a.sha256, "indexed", (str(a.key),)))
        self._release(a)
        return self._unchanged(a, status)

    def _add(self, a: Action, status: str) -> Outcome:
        f = a.file
        assert f is not None and a.doc_id is not None
        meta = {**(f.meta or {}), "doc_id": a.doc_id}
        if a.restricted:
            # Dropped unread by the engine (an earlier version of ours goes), then recorded.
            r = self.engine.ingest(self.library, b"", meta, filename=None, defer_ocr=True)
            self.records.put(self.library, a.pid, self._entry(f, None, "dropped", ()))
            self._release(a)
            return Outcome(a, status, "dropped by policy (document is RESTRICTED); nothing indexed", r)
        data, size, mtime_ns = read_bytes(f.path)
        sha = hashlib.sha256(data).hexdigest()
        f = LocalFile(f.rel, f.path, f.doc_id, size, mtime_ns, f.meta, f.meta_sha)
        key = a.key if sha == a.sha256 else self.engine.indexer.content_key(sha, f.metadata())
        claim = self._entry(f, sha, "claimed", tuple(dict.fromkeys((*a.keys, str(key)))))
        self.records.put(self.library, a.pid, claim, durable=True)
        self._release(a)
        try:
            r = self.engine.ingest(self.library, data, meta, filename=Path(f.rel).name, progress=self.on_pages,
                                   defer_ocr=True)
        except DocumentError as exc:  # these bytes cannot be indexed: remembered, not read again unchanged
            self.records.put(self.library, a.pid, claim.with_(state="failed", error=exc.detail))
            return Outcome(a, "failed", exc.detail)
        if r.status == "dropped_by_policy" and r.ocr not in ("pending", "failed"):
            self.records.put(self.library, a.pid, self._entry(f, None, "dropped", ()))
            return Outcome(a, status, f"dropped by policy (all {r.pages_total} pages RESTRICTED); nothing indexed", r)
        self.records.put(self.library, a.pid, claim.with_(state="indexed", keys=(str(key),)))
        if r.status == "unchanged":
            status = "unchanged"  # (a run that died after the commit) the claim only needed settling
        self.report.pages_added += int(r.pages_indexed or 0) if r.status == "indexed" else 0
        if r.ocr in ("pending", "failed"):
            self._owe(a, r)
        return Outcome(a, status, _describe(r), r)

    def _delete(self, a: Action, status: str) -> Outcome:
        assert a.doc_id is not None
        try:
            self.engine.delete_document(self.library, a.doc_id)
        except DocumentNotFoundError:
            pass  # gone meanwhile: only the record is left to forget
        self.records.forget(self.library, [a.pid])
        return Outcome(a, status, f"deleted {a.doc_id}")

    def _forget(self, a: Action, status: str) -> Outcome:
        self.records.forget(self.library, [a.pid])
        return Outcome(a, status, "nothing of it was in the index")

    def _spare(self, a: Action, status: str) -> Outcome:
        self.records.forget(self.library, [a.pid])
        return Outcome(a, status, a.reason)

    _DO: ClassVar[dict[str, Callable[[_Runner, Action, str], Outcome]]] = {
        "unchanged": _unchanged, "touch": _touch, "add": _add, "update": _add, "delete": _delete,
        "forget": _forget, "spare": _spare}

    # -- helpers ---------------------------------------------------------------------------

    def _entry(self, f: LocalFile, sha: str | None, state: Any, keys: tuple[str, ...]) -> SyncedFile:
        dropped = state == "dropped"
        return SyncedFile(root=self.root, doc_id=None if dropped else f.doc_id, path=None if dropped else f.rel,
                          size=f.size, mtime_ns=f.mtime_ns, meta_sha=f.meta_sha, sha256=None if dropped else sha,
                          state=state, keys=keys)

    def _release(self, a: Action) -> None:
        """Forget the vanished root's entry this file took its document over from."""
        if a.adopt is not None:
            self.records.forget(self.library, [a.adopt])

    def _owe(self, a: Action, first: IngestResult | None) -> None:
        assert a.doc_id is not None
        entry = self.engine.libraries.doc_entry(self.library, a.doc_id) or {}
        pages = list(entry.get("ocr_pending_pages") or [])
        progress = self.ocr_progress(a.doc_id, len(pages)) if self.ocr_progress is not None else None
        fut = self.engine.finish_ocr_later(self.library, a.doc_id, progress=progress)
        if first is None:  # an unchanged document: its first phase is what the manifest says
            first = SimpleNamespace(version=entry.get("active_version"), pages_indexed=entry.get("pages_indexed") or 0,
                                    ocr_pending_pages=pages)  # type: ignore[assignment]
        self.report.owed.append((Path(a.rel or a.doc_id), first, fut))


_WOULD = {"add": "would be added", "update": "would be re-ingested", "unchanged": "", "touch": "",
          "delete": "would be deleted", "forget": "its record would be forgotten", "spare": ""}


def _describe(r: IngestResult) -> str:
    if r.status == "unchanged":
        return f"{r.doc_id} v{r.version} already in the index"
    if r.status == "ocr_pending":
        return f"{r.doc_id}: every page needs OCR; all {len(r.ocr_pending_pages)} follow"
    dropped = f", dropped by policy: pages {r.pages_dropped}" if r.pages_dropped else ""
    pending = f", OCR of pages {r.ocr_pending_pages} follows" if r.ocr in ("pending", "failed") else ""
    return f"{r.doc_id} v{r.version}: {r.pages_indexed} pages, {r.chunks} passages{dropped}{pending} ({r.seconds:.1f}s)"
