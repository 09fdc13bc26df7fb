"""Writing a backup (see :mod:`ragspine.backup`)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import IO, Any

from ragspine.backup import LibraryCounts, Parts, Report
from ragspine.backup.archive import ArchiveWriter
from ragspine.backup.native import NativeCopy
from ragspine.backup.points import (
    BATCH_POINTS,
    BATCH_VECTOR_BYTES,
    encode,
    vector_bytes,
)
from ragspine.catalog import fields_from_record
from ragspine.catalog.claims import KIND_OCR_CLAIM
from ragspine.catalog.layout import Layout
from ragspine.catalog.leases import KIND_LEASE
from ragspine.catalog.libraries import KIND_CLOCK
from ragspine.indexing.ocr_phase import OPEN_STATES
from ragspine.policy import is_restricted, point_restricted
from ragspine.store.base import (
    KIND_CHUNK,
    KIND_DOC,
    KIND_LIBRARY,
    KIND_PAGE,
    PointData,
    Where,
)

logger = logging.getLogger(__name__)

#: Points a backup never carries: the writer lease, the OCR claims and the manifest clock belong
#: to the running replicas (a restore starts them afresh: a restored document whose OCR is owed
#: is free to claim), the record travels in ``library.json``, and a graph kept in the collection
#: (cluster mode) travels as ``graph.json.gz``, as every graph does.
NOT_CARRIED = frozenset({KIND_LEASE, KIND_OCR_CLAIM, KIND_CLOCK, KIND_LIBRARY, "graph_src", "graph_meta"})
#: Manifest fields that describe a write in flight (never part of a consistent copy).
IN_FLIGHT = ("staging_version", "retiring_version")

Progress = Callable[[str, int, int], None]


def pending_member(key: str) -> str:
    """The member name of a pending PDF's content key (the key is a digest already; bounded)."""
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def backup(parts: Parts, names: list[str], out: IO[bytes], progress: Progress | None = None, *,
           native: bool = True) -> Report:
    """Write a backup of ``names`` to ``out``. Each library is copied under its write lock:
    consistent on its own (libraries of one file are copied one after the other)."""
    t0 = time.perf_counter()
    for name in names:
        parts.libraries.open(name)  # unknown, older format, being restored: refused before any byte
    writer = ArchiveWriter(out, names)
    report = Report([_library(parts, writer, name, progress, native) for name in names])
    writer.close()
    report.seconds, report.bytes = time.perf_counter() - t0, writer.bytes
    return report


def _library(parts: Parts, writer: ArchiveWriter, name: str, progress: Progress | None,
             with_native: bool = True) -> LibraryCounts:
    counts = LibraryCounts(name)
    libs, store = parts.libraries, parts.store
    with libs.lock(name):  # no commit, retirement, delete or re-weight until the copy is done
        rec = libs.open(name)
        shown = [e for e in libs.doc_entries(name) if not is_restricted((e.get("meta") or {}).get("sensitivity"))]
        entries = [e for e in shown if e.get("active_version")]
        active = {e["doc_id"]: int(e["active_version"]) for e in entries}
        # Documents whose OCR is owed, live or not yet (every page a scan): their PDFs go along.
        owed = [e for e in shown if e.get("ocr") in OPEN_STATES]
        docs = set(active) | {e["doc_id"] for e in owed}
        total = store.count(name, Where())
        writer.add_json(f"{name}/library.json", {
            "record": rec.to_payload(), "backend": store.backend,
            "fields": [f.name for f in fields_from_record(rec.encoders)],
        })
        pages: set[tuple[str, int]] = set()
        # The embedded store's files go along, built from the carried points alone: a restore
        # onto the embedded store copies them instead of rebuilding the index (backup.native).
        native = (NativeCopy(name, Layout.from_json(rec.layout).spec(fields_from_record(rec.encoders)))
                  if with_native and store.backend == "embedded" else None)
        try:
            counts.points = _points(writer, store, name, active, docs, pages, native, total, progress)
            if native is not None:
                counts.native_files = native.write(writer, name)
        finally:
            if native is not None:
                native.close()
        counts.documents = len(docs)
        counts.graph_sources = _graph(parts, writer, name)
        for e in entries:
            doc, version = e["doc_id"], active[e["doc_id"]]
            for n in e.get("page_numbers") or []:
                path = parts.thumbnails.path(name, doc, version, int(n))
                if (doc, int(n)) in pages and path.is_file():  # the thumbnail exit: its page point went
                    writer.add(f"{name}/thumbnails/{doc}/p{int(n)}.png", path.read_bytes())
                    counts.thumbnails += 1
        for e in owed:
            counts.pending_ocr += _pending(parts, writer, name, str(e.get("content_key")))
    logger.info("backup of library %s: %d documents, %d points, %d thumbnails", name, counts.documents,
                counts.points, counts.thumbnails)
    return counts


def _points(writer: ArchiveWriter, store: Any, name: str, active: dict[str, int], docs: set[str],
            pages: set[tuple[str, int]], native: NativeCopy | None, total: int, progress: Progress | None) -> int:
    """Write the carried points in batches (and feed them to the native copy); returns how many.
    ``pages`` collects the (doc, page) of every page point written."""
    batch: list[PointData] = []
    size = seq = seen = written = 0
    offset: Any = None

    def flush() -> None:
        nonlocal seq, batch, size, written
        _flush(writer, name, seq, batch)
        if native is not None:
            native.add(batch)
        written += len(batch)
        seq, batch, size = seq + 1, [], 0

    while True:
        got, offset = store.scroll_points(name, Where(), offset=offset, limit=256)
        seen += len(got)
        for p in got:
            kept = _carried(p, active, docs)
            if kept is None:
                continue
            if kept.payload.get("kind") == KIND_PAGE:
                pages.add((kept.payload["doc_id"], int(kept.payload["page"])))
            batch.append(kept)
            size += vector_bytes(kept)
            if len(batch) >= BATCH_POINTS or size >= BATCH_VECTOR_BYTES:
                flush()
        if progress is not None:
            progress(name, seen, total)
        if offset is None:
            break
    if batch:
        flush()
    return written


def _carried(p: PointData, active: dict[str, int], docs: set[str]) -> PointData | None:
    """The point as the backup carries it, or None: only what a reader of the library sees
    (and the entries of documents whose OCR is owed)."""
    kind = p.payload.get("kind")
    if kind in NOT_CARRIED:
        return None
    if kind == KIND_DOC:
        if p.payload.get("doc_id") not in docs:
            return None  # a first version still being written, a tombstone, or RESTRICTED
        return PointData(p.id, {**p.payload, **dict.fromkeys(IN_FLIGHT)})
    if kind in (KIND_CHUNK, KIND_PAGE):
        pl = p.payload
        if pl.get("state") != "live" or active.get(pl.get("doc_id")) != pl.get("version") or point_restricted(pl):
            return None  # staged, an old version not yet retired, or RESTRICTED (never stored; checked anyway)
    return p


def _flush(writer: ArchiveWriter, name: str, seq: int, batch: list[PointData]) -> None:
    rows, arrays = encode(batch)
    writer.add_json(f"{name}/points/{seq:06d}.json.gz", rows)
    writer.add(f"{name}/points/{seq:06d}.npz", arrays)


def _graph(parts: Parts, writer: ArchiveWriter, name: str) -> int:
    graphs = parts.graphs
    if not graphs.exists(name):
        return 0  # built from the manifest on first use after the restore, as for any library without one
    with graphs.locked(name):  # a relations upload takes only this lock
        sources: dict[str, Any] = {}
        for key in graphs.source_keys(name):
            c = graphs.contribution(name, key)
            if c is not None:
                sources[key] = c.to_json()
    writer.add_json(f"{name}/graph.json.gz", {"sources": sources})
    return len(sources)


def _pending(parts: Parts, writer: ArchiveWriter, name: str, key: str) -> int:
    got = parts.pending.get(name, key)
    if got is None:
        return 0  # already gone: the restored entry says failed, and a new upload finishes it
    data, meta, filename = got
    member = pending_member(key)
    writer.add_json(f"{name}/pending/{member}.json", {"key": key, "meta": meta, "filename": filename})
    writer.add(f"{name}/pending/{member}.pdf", data)
    return 1
