"""RESTRICTED through a sync: a document marked by its sidecar (or ``--meta``) is dropped unread,
never searchable, and nothing that names it is kept, not even in the sync record."""

from __future__ import annotations

from pathlib import Path

import pdfs
from pdfs import Page
from sync_kit import LIB, TOP_ID, doc_ids, found, outcomes, sync, write_pdf, write_sidecar

from ragspine.catalog.sync_record import SyncRecords
from ragspine.engine import Engine

C_NAME = "zqxfilecanary"
C_BODY = "zqxbodycanary"
C_TITLE = "zqxtitlecanary"


def data_files_with(data_dir: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_sidecar_restricted_document_is_never_searchable_nor_named(engine: Engine, folder: Path,
                                                                    data_dir: Path) -> None:
    secret = write_pdf(folder / "sub" / f"{C_NAME}.pdf", f"The {C_BODY} numbers of the merger.")
    write_sidecar(secret, {"sensitivity": " restricted ", "title": C_TITLE})
    r = sync(engine, folder)
    assert r.summary() == "added 4, updated 0, unchanged 0, deleted 0, failed 0"
    o = next(o for o in r.outcomes if o.action.rel == f"sub/{C_NAME}.pdf")
    assert o.detail == "dropped by policy (document is RESTRICTED); nothing indexed"
    dropped = [e for e in SyncRecords(engine.libraries).all(LIB).values() if e.state == "dropped"]
    assert len(dropped) == 1 and (dropped[0].doc_id, dropped[0].path, dropped[0].sha256, dropped[0].keys) == (
        None, None, None, ())
    # (Before any search: the knowledge-gap log keeps the queries that found nothing.)
    engine.store.flush(LIB)
    for needle in (C_NAME, C_BODY, C_TITLE):
        assert data_files_with(data_dir, needle.encode()) == [], needle
    assert found(engine, C_BODY) == set() and found(engine, C_TITLE) == set() and found(engine, "merger") == set()
    assert not any(C_NAME in d for d in doc_ids(engine))
    # Unchanged on the next run (nothing read), and gone with --delete.
    assert sync(engine, folder).summary() == "added 0, updated 0, unchanged 4, deleted 0, failed 0"
    secret.unlink()
    assert sync(engine, folder, delete=True).summary() == "added 0, updated 0, unchanged 3, deleted 1, failed 0"
    assert [e for e in SyncRecords(engine.libraries).all(LIB).values() if e.state == "dropped"] == []


def test_marking_an_indexed_file_restricted_removes_it(engine: Engine, folder: Path) -> None:
    write_pdf(folder / "top.pdf", "Initech zqxlatercanary overview.")
    sync(engine, folder)
    assert found(engine, "zqxlatercanary") == {TOP_ID}
    write_sidecar(folder / "top.pdf", {"sensitivity": "RESTRICTED"})
    r = sync(engine, folder)
    assert outcomes(r)["top.pdf"] == "updated"
    assert found(engine, "zqxlatercanary") == set() and TOP_ID not in doc_ids(engine)
    # Unmarked again: indexed again.
    (folder / "top.pdf.json").unlink()
    r = sync(engine, folder)
    assert outcomes(r)["top.pdf"] == "updated" and found(engine, "zqxlatercanary") == {TOP_ID}


def test_meta_restricted_applies_to_every_file_and_a_sidecar_can_lift_it_per_field(engine: Engine,
                                                                                    folder: Path) -> None:
    write_sidecar(folder / "top.pdf", {"sensitivity": "internal"})
    r = sync(engine, folder, meta={"sensitivity": "RESTRICTED"})
    assert r.summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
    assert doc_ids(engine) == {TOP_ID}
    assert found(engine, "robots") == set() and found(engine, "staplers") == {TOP_ID}


def test_restricted_pages_and_all_pages_restricted(engine: Engine, folder: Path) -> None:
    two = folder / "two.pdf"
    two.write_bytes(pdfs.make_pdf(["open page about kiwis", "page two zqxpagecanary"]))
    write_sidecar(two, {"page_sensitivity": {"2": "RESTRICTED"}})
    stamped = folder / "stamped.pdf"
    stamped.write_bytes(pdfs.make_pdf([Page(["zqxstampcanary everywhere"], header="RESTRICTED")]))
    r = sync(engine, folder)
    assert r.summary() == "added 5, updated 0, unchanged 0, deleted 0, failed 0"
    assert next(o.detail for o in r.outcomes if o.action.rel == "stamped.pdf") == (
        "dropped by policy (all 1 pages RESTRICTED); nothing indexed")
    assert found(engine, "kiwis") == {"two.pdf"} and found(engine, "zqxpagecanary") == set()
    assert found(engine, "zqxstampcanary") == set() and "stamped.pdf" not in doc_ids(engine)
    assert engine.document(LIB, "two.pdf")["pages_dropped"] == [2]
    assert sync(engine, folder).summary() == "added 0, updated 0, unchanged 5, deleted 0, failed 0"
