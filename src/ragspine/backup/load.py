"""Restoring a backup (see :mod:`ragspine.backup`)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ragspine.backup import LibraryCounts, Parts, Report
from ragspine.backup.archive import MEMBER_RE, ArchiveReader, BackupFileError, read_json
from ragspine.backup.dump import NOT_CARRIED, Progress
from ragspine.backup.native import INDEX as NATIVE_INDEX
from ragspine.backup.native import NativeStaging, adopt, check_index, scrub
from ragspine.backup.points import decode
from ragspine.catalog import (
    DENSE_CHUNK,
    LIBRARY_POINT,
    LibraryRecord,
    check_library_name,
    expected_encoders,
    fields_from_record,
    identity,
)
from ragspine.catalog.formats import LIBRARY_FORMAT, check_format
from ragspine.catalog.upgrade import upgrade
from ragspine.catalog.layout import Layout
from ragspine.errors import ConflictError, InvalidRequestError, ModelMismatchError
from ragspine.graph import Contribution
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.store.base import KIND_DOC, DenseField, PointData, Where
from ragspine.store.edge import EdgeStore

logger = logging.getLogger(__name__)

#: A record entry's note of the datatype a field had on the embedded store it was backed up from
#: (int8 page columns become float32 on a Qdrant server).
EMBEDDED_DATATYPE = "embedded_datatype"


@dataclass
class _Plan:
    """One library of the file: where it goes and in what layout."""

    source: str
    target: str
    record: LibraryRecord
    fields: tuple[DenseField, ...]
    vectors: dict[str, str]
    drop: frozenset[str]
    #: Restored from its native copy (the embedded store's files, ragspine.backup.native)
    #: instead of its points: the file has one, this store is embedded, nothing is converted.
    native: bool = False


def restore(parts: Parts, path: Path | str, *, as_name: str | None = None, bm25_only: bool = False,
            progress: Progress | None = None, label: str | None = None) -> Report:
    """Restore every library of the backup at ``path`` (one of them under ``as_name``; errors
    name the file as ``label``, default its name).

    The file is checked whole before anything is written; a library that exists, vectors of
    other models than the configured ones (without ``bm25_only``) or a newer format are refused
    before anything is written too. A failure while writing removes what this restore wrote.
    """
    t0 = time.perf_counter()
    reader = ArchiveReader(path, label)
    header = reader.verify()
    if as_name is not None:
        check_library_name(as_name)
        if len(header.libraries) != 1:
            raise InvalidRequestError(f"--as names one library, and this backup holds {len(header.libraries)} "
                                      f"({', '.join(header.libraries)}); restore them under their own names")
    metas = _library_meta(reader, header)
    plans = {src: _plan(parts, src, as_name or src, metas[src], bm25_only, f"{src}/{NATIVE_INDEX}" in header.sums)
             for src in header.libraries}
    made: list[str] = []
    counts = {src: LibraryCounts(p.target, source=src, vectors=p.vectors) for src, p in plans.items()}
    try:
        for p in plans.values():
            _create(parts, p)
            made.append(p.target)
        _write(parts, reader, header, plans, counts, progress)
        for p in plans.values():
            _finish(parts, p)
    except BaseException:
        for target in made:
            _remove(parts, target)
        raise
    out = Report(list(counts.values()), time.perf_counter() - t0, os.path.getsize(path))
    for c in out.libraries:
        logger.info("restored library %s (from %s): %d documents, %d points, %d thumbnails", c.name, c.source,
                    c.documents, c.points, c.thumbnails)
    return out


def _library_meta(reader: ArchiveReader, header: Any) -> dict[str, dict[str, Any]]:
    """Each library's ``library.json``, read before anything is written (it comes first)."""
    out: dict[str, dict[str, Any]] = {}
    want = {f"{lib}/library.json": lib for lib in header.libraries}
    for name, data in reader.members(header):
        lib = want.get(name)
        if lib is not None:
            meta = read_json(name, data)
            if not isinstance(meta, dict) or not isinstance(meta.get("record"), dict):
                raise BackupFileError(f"backup member {name} has no library record")
            out[lib] = meta
            if len(out) == len(want):
                return out
    missing = sorted(set(header.libraries) - set(out))
    raise BackupFileError(f"the backup lacks the record of library {missing[0]!r}")


def _plan(parts: Parts, source: str, target: str, meta: dict[str, Any], bm25_only: bool,
          has_native: bool = False) -> _Plan:
    try:
        record = LibraryRecord.from_payload(meta["record"])
        fields = fields_from_record(record.encoders)
        layout = Layout.from_json(record.layout)
    except (KeyError, TypeError, ValueError) as exc:
        raise BackupFileError(f"the record of library {source!r} in the backup is malformed: {exc}") from None
    check_format(source, min(record.format_version, LIBRARY_FORMAT))  # newer: refused; older: upgraded after
    if parts.store.has_collection(target):
        raise ConflictError(f"library '{target}' already exists; restore under another name (--as NAME, REST: "
                            "as=NAME) or delete it first (nothing was changed)")
    bm25 = expected_encoders(parts.libraries.bm25)
    for fname, enc in bm25.items():
        if record.encoders.get(fname) != enc:
            raise ModelMismatchError(
                f"library {source!r} in the backup was indexed with BM25 {record.encoders.get(fname)}, and this "
                f"server is configured for {enc} (RAGSPINE_BM25_K1 / RAGSPINE_BM25_B); configure those it was "
                "built with to restore it (nothing was changed)")
    embedded = parts.store.backend == "embedded"
    vectors: dict[str, str] = {}
    drop: set[str] = set()
    for f in fields:
        why = None if bm25_only else _model_problem(parts, f.name, record.encoders[f.name])
        if why is not None:
            raise ModelMismatchError(
                f"library {source!r} in the backup has {f.name} vectors from {why}. Configure that model, or "
                "restore the text channels only with --bm25-only (REST: bm25_only=true); nothing was changed")
        if bm25_only:
            drop.add(f.name)
            vectors[f.name] = "dropped (BM25 only)"
        elif f.datatype == "int8" and not embedded:
            vectors[f.name] = "int8 -> float32 (a Qdrant server keeps no int8 vectors; scores unchanged)"
        elif embedded and record.encoders[f.name].get(EMBEDDED_DATATYPE):
            vectors[f.name] = f"float32 -> {record.encoders[f.name][EMBEDDED_DATATYPE]} (as on the embedded store it came from)"
        else:
            vectors[f.name] = "kept"
    encoders = {k: dict(v) for k, v in record.encoders.items() if k not in drop}
    kept: list[DenseField] = []
    for f in fields:
        if f.name in drop:
            continue
        enc = encoders[f.name]
        if f.datatype == "int8" and not embedded:
            # float32 holds the dequantized codes exactly; the note takes them back to int8 on a
            # later restore into an embedded store, so a round trip through a server is exact.
            f = replace(f, datatype="float32")
            enc["datatype"], enc[EMBEDDED_DATATYPE] = "float32", "int8"
        elif embedded and enc.get(EMBEDDED_DATATYPE):
            f = replace(f, datatype=enc.pop(EMBEDDED_DATATYPE))
            enc["datatype"] = f.datatype
        kept.append(f)
    # The layout follows the library, as far as this store can have it (an embedded target has no
    # shards or copies to set).
    native = has_native and embedded and not drop and encoders == record.encoders
    record = replace(record, name=target, encoders=encoders, restoring=True,
                     layout=layout.on(parts.store.backend).to_json() if record.layout else {})
    return _Plan(source, target, record, tuple(kept), vectors, frozenset(drop), native)


def _model_problem(parts: Parts, field: str, have: dict[str, Any]) -> str | None:
    """Why vectors of ``field`` written by ``have`` cannot go into a library of this server
    (None: the same model, revision and dimension is loaded)."""
    slot = "dense" if field == DENSE_CHUNK else "page"
    model = parts.models.dense if slot == "dense" else parts.models.page
    made = f"{have.get('model')} (revision {have.get('revision')}, dim {have.get('dim')})"
    if model is None:
        err = parts.models.errors.get(slot)
        loads = f"its {slot} model failed to load ({err})" if err else \
            f"it loads no {slot} model (RAGSPINE_{'DENSE' if slot == 'dense' else 'PAGE'}_MODEL)"
        return f"{made}, and this server cannot check them: {loads}"
    ident = identity(model)
    if any(have.get(k) != ident[k] for k in ("model", "revision", "dim")):
        return f"{made}, and this server loads {ident['model']} (revision {ident['revision']}, dim {ident['dim']})"
    return None


def _create(parts: Parts, p: _Plan) -> None:
    """The collection and the record, marked restoring: readers refuse the library until the end.
    No lock yet (a writer lease lives in the collection made here): a second creator of the
    name fails in ``create_collection``. A native restore makes its collection when its files
    are in place (:func:`_adopt`)."""
    if p.native:
        return
    parts.store.create_collection(p.target, Layout.from_json(p.record.layout).spec(p.fields))
    parts.libraries.save(p.record)


def _write(parts: Parts, reader: ArchiveReader, header: Any, plans: dict[str, _Plan],
           counts: dict[str, LibraryCounts], progress: Progress | None) -> None:
    batch_rows: dict[str, Any] = {}
    versions: dict[str, dict[str, int]] = {src: {} for src in plans}
    pending: dict[str, dict[str, Any]] = {}  # member stem -> {'pdf': bytes, 'json': sidecar}
    staged: dict[str, NativeStaging] = {}
    try:
        _members(parts, reader, header, plans, counts, progress, batch_rows, versions, pending, staged)
    finally:
        for st in staged.values():
            st.remove()


def _members(parts: Parts, reader: ArchiveReader, header: Any, plans: dict[str, _Plan],
             counts: dict[str, LibraryCounts], progress: Progress | None, batch_rows: dict[str, Any],
             versions: dict[str, dict[str, int]], pending: dict[str, dict[str, Any]],
             staged: dict[str, NativeStaging]) -> None:
    for name, data in reader.members(header):
        m = MEMBER_RE.match(name)
        assert m is not None  # verify() checked every name
        src = m.group("lib")
        p, c = plans[src], counts[src]
        rest = name[len(src) + 1:]
        if rest == "library.json":
            continue
        if rest.startswith("native/"):
            if not p.native:
                continue  # restored from its points (another backend, models dropped)
            if rest == NATIVE_INDEX:
                if src in staged:
                    raise BackupFileError(f"backup member {name} appears twice")
                staged[src] = NativeStaging(parts.store.root, p.target,  # type: ignore[attr-defined]
                                            check_index(name, read_json(name, data)))
                continue
            st = staged.get(src)
            if st is None:
                raise BackupFileError(f"backup member {name} comes before its file list")
            st.put(int(m.group("native")), data, name)
            if st.complete:
                _adopt(parts, p, c, st, versions[src])
                if progress is not None:
                    progress(p.target, c.points, 0)
            continue
        if rest.startswith("points/") and p.native:
            continue  # the native copy holds them, indexed
        if rest.startswith("points/") and rest.endswith(".json.gz"):
            batch_rows[src] = read_json(name, data)
        elif rest.startswith("points/"):
            rows = batch_rows.pop(src, None)
            if rows is None:
                raise BackupFileError(f"backup member {name} comes without its point list")
            points = [pt for pt in decode(name, rows, data) if pt.payload.get("kind") not in NOT_CARRIED
                      and not point_restricted(pt.payload)]
            for pt in points:
                for f in p.drop:
                    pt.dense.pop(f, None)
                if pt.payload.get("kind") == KIND_DOC:
                    c.documents += 1
                    version = pt.payload.get("active_version")
                    if version is not None:
                        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                            raise BackupFileError(f"backup member {name}: document {pt.payload.get('doc_id')!r} "
                                                  f"has no valid active version ({version!r})")
                        versions[src][str(pt.payload.get("doc_id"))] = version
            with parts.libraries.lock(p.target):
                parts.store.upsert(p.target, points)
            c.points += len(points)
            if progress is not None:
                progress(p.target, c.points, 0)
        elif rest == "graph.json.gz":
            c.graph_sources = _graph(parts, p.target, name, read_json(name, data))
        elif rest.startswith("thumbnails/"):
            doc, page = m.group("doc"), int(rest.rsplit("/p", 1)[1][:-4])
            version = versions[src].get(doc)
            if version is None:
                raise BackupFileError(f"backup member {name} is the thumbnail of a document the backup lacks")
            dest = parts.thumbnails.path(p.target, doc, version, page)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            c.thumbnails += 1
        else:  # a pending PDF and its sidecar, in either order
            stem, ext = name.rsplit(".", 1)
            got = pending.setdefault(stem, {})
            got[ext] = read_json(name, data) if ext == "json" else data
            if len(got) == 2:
                info = pending.pop(stem)["json"]
                if not isinstance(info, dict) or not isinstance(info.get("key"), str) \
                        or not isinstance(info.get("meta"), dict):
                    raise BackupFileError(f"backup member {stem}.json does not describe its PDF")
                parts.pending.put(p.target, info["key"], got["pdf"], info["meta"], info.get("filename"))
                c.pending_ocr += 1
    if pending:
        raise BackupFileError(f"backup member {sorted(pending)[0]} lacks its PDF or its description")
    for src, p in plans.items():
        if p.native and not parts.store.has_collection(p.target):
            raise BackupFileError(f"the native copy of library {src!r} in the backup is incomplete")


def _adopt(parts: Parts, p: _Plan, c: LibraryCounts, st: NativeStaging, versions: dict[str, int]) -> None:
    """A native copy's files, all written: opened in their scratch data dir, scrubbed as the
    point path filters (RESTRICTED and bookkeeping points out), given the library's record
    (marked restoring), checked against the record's vector fields, then moved into place."""
    try:
        scratch = EdgeStore(st.data_dir)
    except Exception as exc:  # noqa: BLE001  (whatever Qdrant Edge makes of hostile files)
        raise BackupFileError(f"the native copy of library {p.source!r} cannot be opened: {exc}") from None
    try:
        try:
            have = scratch.dense_fields(p.target)
            if scrub(scratch, p.target, _not_restored, ["kind", "sensitivity", CLASSIFICATION]):
                scratch.optimize(p.target)  # vacuumed: a scrubbed point leaves no bytes in the files
        except Exception as exc:  # noqa: BLE001
            raise BackupFileError(f"the native copy of library {p.source!r} cannot be read: {exc}") from None
        want = {f.name for f in p.fields}
        if set(have) != want:
            raise BackupFileError(f"the native copy of library {p.source!r} has vector fields {sorted(have)}, "
                                  f"its record {sorted(want)}")
        scratch.upsert(p.target, [PointData(LIBRARY_POINT, p.record.to_payload())])
        for r in scratch.scroll(p.target, Where(kind=KIND_DOC), fields=["doc_id", "active_version"]):
            version = r.payload.get("active_version")
            c.documents += 1
            if version is not None:
                if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                    raise BackupFileError(f"the native copy of library {p.source!r}: document "
                                          f"{r.payload.get('doc_id')!r} has no valid active version ({version!r})")
                versions[str(r.payload.get("doc_id"))] = version
        c.points = scratch.count(p.target, Where()) - 1  # the record is not a point of the backup
    finally:
        scratch.close()
    adopt(st, parts.store.root)  # type: ignore[attr-defined]
    c.native_files = len(st.files)


def _not_restored(payload: dict[str, Any]) -> bool:
    return payload.get("kind") in NOT_CARRIED or point_restricted(payload)


def _graph(parts: Parts, target: str, name: str, body: Any) -> int:
    sources = body.get("sources") if isinstance(body, dict) else None
    if not isinstance(sources, dict):
        raise BackupFileError(f"backup member {name} holds no graph sources")
    bad = next((k for k, v in sources.items() if not isinstance(v, dict)), None)
    if bad is not None:
        raise BackupFileError(f"backup member {name}: graph source {bad!r} is not an object")
    try:
        changes: dict[str, Contribution | None] = {
            str(k): Contribution.from_json(v) for k, v in sources.items()}
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BackupFileError(f"backup member {name}: a graph source is malformed ({exc})") from None
    with parts.graphs.locked(target):
        parts.graphs.replace_sources(target, changes)
    return len(changes)


def _finish(parts: Parts, p: _Plan) -> None:
    """Older formats upgraded, vacuum and index (a native copy came indexed), then the record
    unmarked: the library opens."""
    libs = parts.libraries
    with libs.lock(p.target):
        if p.record.format_version < LIBRARY_FORMAT:
            upgrade(libs, p.target)
        if not p.native:
            parts.store.optimize(p.target)
        rec = libs.get(p.target)
        rec.restoring = False
        libs.save(rec)
        libs.manifest_changed(p.target)


def _remove(parts: Parts, target: str) -> None:
    """Take back what a failed restore wrote (each part on its own: one failing leaves the rest)."""
    for undo in (lambda: parts.libraries.drop(target), lambda: parts.graphs.drop(target),
                 lambda: parts.thumbnails.remove_library(target), lambda: parts.pending.remove_library(target)):
        try:
            undo()
        except Exception:  # the restore's own error is the one to report
            logger.exception("restore of library %s: could not remove part of what it wrote", target)

