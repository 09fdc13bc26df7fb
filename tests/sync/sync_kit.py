"""Helpers of the folder sync tests: writing PDFs and sidecars, and the end state of a library
(what a sync is judged by: documents, their content keys, the sync record, what search finds)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pdfs
from ragspine.catalog.sync_record import SyncRecords
from ragspine.engine import Engine
from ragspine.sync import SyncOptions, SyncReport, sync_folder

LIB = "lib"
#: The ids of the ``folder`` fixture's files (ragspine.sync.files.doc_id_for, worked out once).
A_ID = "a_report-00c9fc2b3cf0.pdf"
B_ID = "b_report-ac7aaa56e8ae.pdf"
TOP_ID = "top.pdf"


def write_pdf(path: Path, *texts: str, mtime_ns: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pdfs.make_pdf(list(texts)))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def write_sidecar(pdf: Path, meta: Any) -> Path:
    side = pdf.with_name(pdf.name + ".json")
    side.write_text(meta if isinstance(meta, str) else json.dumps(meta), encoding="utf-8")
    return side


def sync(engine: Engine, root: Path, **kw: Any) -> SyncReport:
    return sync_folder(engine, LIB, root, SyncOptions(**kw))


def outcomes(report: SyncReport) -> dict[str, str]:
    """relative path -> status, for every file the run looked at."""
    return {str(o.action.rel): o.status for o in report.outcomes}


def doc_ids(engine: Engine) -> set[str]:
    return {d["doc_id"] for d in engine.documents(LIB)}


def found(engine: Engine, query: str) -> set[str]:
    res = engine.search({"query": query, "libraries": [LIB], "mode": "bm25", "top_k": 50})
    return {h.doc_id for h in res.hits}


def state(engine: Engine) -> dict[str, Any]:
    """A library's end state, version numbers aside (a run that died mid-write burns one)."""
    docs = {e["doc_id"]: (e.get("content_key"), e.get("pages_indexed"), e.get("chunks"), e.get("title"),
                          json.dumps(e.get("meta"), sort_keys=True), e.get("ocr", "none"))
            for e in engine.libraries.doc_entries(LIB) if e.get("active_version")}
    record = sorted(((r.root, r.doc_id, r.path, r.size, r.mtime_ns, r.meta_sha, r.sha256, r.state, r.keys)
                     for r in SyncRecords(engine.libraries).all(LIB).values()), key=repr)
    staged = [e["doc_id"] for e in engine.libraries.doc_entries(LIB) if e.get("staging_version")]
    return {"docs": docs, "record": record, "staged": staged}
