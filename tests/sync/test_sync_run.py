"""One sync through an engine: added / updated / unchanged / deleted / failed, and every guard
of ``delete`` (what this root did not create is never deleted or replaced)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pdfs
import pytest
from sync_kit import A_ID, B_ID, LIB, TOP_ID, doc_ids, found, outcomes, state, sync, write_pdf, write_sidecar

from ragspine.catalog.sync_record import SyncRecords
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import StoreError
from ragspine.sync import RootError


def test_first_sync_adds_and_second_changes_nothing(engine: Engine, folder: Path) -> None:
    r = sync(engine, folder)
    assert r.summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
    assert doc_ids(engine) == {A_ID, B_ID, TOP_ID}
    assert found(engine, "robots") == {A_ID} and found(engine, "flood") == {B_ID}
    rec = SyncRecords(engine.libraries).all(LIB)
    root = str(folder.resolve())
    assert sorted((e.root, e.path, e.doc_id, e.state) for e in rec.values()) == [
        (root, "a/report.pdf", A_ID, "indexed"), (root, "b/report.pdf", B_ID, "indexed"),
        (root, "top.pdf", TOP_ID, "indexed")]
    entries = {e["doc_id"]: e for e in engine.libraries.doc_entries(LIB)}
    for e in rec.values():
        assert e.keys == (entries[e.doc_id]["content_key"],)
        st = (folder / str(e.path)).stat()
        assert (e.size, e.mtime_ns) == (st.st_size, st.st_mtime_ns)
    before = state(engine)

    calls: list[str] = []
    real = engine.ingest
    engine.ingest = lambda *a, **k: calls.append("ingest") or real(*a, **k)  # type: ignore[method-assign]
    r2 = sync(engine, folder)
    assert r2.summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"
    assert calls == [] and state(engine) == before


def test_unchanged_skips_without_reading_a_byte(engine: Engine, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sync(engine, folder)
    import ragspine.sync.run as run_mod

    def no_hashing(path: Path) -> str:
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(run_mod, "file_sha256", no_hashing)
    assert sync(engine, folder).summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"


def test_touched_file_is_hashed_not_reingested(engine: Engine, folder: Path) -> None:
    sync(engine, folder)
    top = folder / "top.pdf"
    st = top.stat()
    os.utime(top, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    v = engine.document(LIB, TOP_ID)["version"]
    r = sync(engine, folder)
    assert r.summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"
    assert engine.document(LIB, TOP_ID)["version"] == v
    rec = next(e for e in SyncRecords(engine.libraries).all(LIB).values() if e.doc_id == TOP_ID)
    assert rec.mtime_ns == st.st_mtime_ns + 5_000_000_000  # the record follows the new stat


def test_new_bytes_and_new_sidecar_are_updates(engine: Engine, folder: Path) -> None:
    sync(engine, folder)
    write_pdf(folder / "a" / "report.pdf", "Acme revenue now talks about submarines.")
    write_sidecar(folder / "top.pdf", {"entity": "initech", "period": 2024})
    r = sync(engine, folder)
    assert r.summary() == "added 0, updated 2, unchanged 1, deleted 0, failed 0"
    assert outcomes(r) == {"a/report.pdf": "updated", "b/report.pdf": "unchanged", "top.pdf": "updated"}
    assert found(engine, "submarines") == {A_ID} and found(engine, "robots") == set()
    assert engine.document(LIB, TOP_ID)["metadata"] == {"entity": "initech", "period": 2024}
    assert engine.document(LIB, A_ID)["version"] == 2
    # A --meta change is a metadata change of every file; the sidecar still wins its fields.
    r = sync(engine, folder, meta={"entity": "all", "topic": "finance"})
    assert r.summary() == "added 0, updated 3, unchanged 0, deleted 0, failed 0"
    assert engine.document(LIB, TOP_ID)["metadata"] == {"entity": "initech", "period": 2024, "topic": "finance"}
    assert engine.document(LIB, B_ID)["metadata"] == {"entity": "all", "topic": "finance"}


def test_corrupt_file_fails_alone_and_is_not_read_again_until_it_changes(engine: Engine, folder: Path) -> None:
    (folder / "broken.pdf").write_bytes(pdfs.GARBAGE_AFTER_MAGIC)
    write_sidecar(write_pdf(folder / "sidecar-bad.pdf", "never read"), "{oops")
    r = sync(engine, folder)
    assert r.summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 2"
    fails = {o.action.rel: o.detail for o in r.outcomes if o.status == "failed"}
    assert fails["broken.pdf"].startswith("the PDF is corrupt and cannot be opened")
    assert fails["sidecar-bad.pdf"].startswith("sidecar sidecar-bad.pdf.json is not valid JSON")
    assert doc_ids(engine) == {A_ID, B_ID, TOP_ID}
    # Its claim is recorded (so --delete could clean up after it) as failed, never as indexed.
    rec = {e.path: (e.state, e.error) for e in SyncRecords(engine.libraries).all(LIB).values()}
    assert rec["broken.pdf"] == ("failed", fails["broken.pdf"]) and "sidecar-bad.pdf" not in rec
    # Unchanged, it still fails (exit status 1), but is not parsed again.
    calls: list[str] = []
    real = engine.ingest
    engine.ingest = lambda *a, **k: calls.append("ingest") or real(*a, **k)  # type: ignore[method-assign]
    r = sync(engine, folder)
    assert r.summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 2" and calls == []
    assert next(o.detail for o in r.outcomes if o.action.rel == "broken.pdf") == (
        fails["broken.pdf"] + " (not read again until the file, its metadata or the settings change)")
    write_pdf(folder / "broken.pdf", "Repaired at last.")
    (folder / "sidecar-bad.pdf.json").unlink()
    r = sync(engine, folder)
    assert outcomes(r) == {"a/report.pdf": "unchanged", "b/report.pdf": "unchanged", "broken.pdf": "added",
                           "sidecar-bad.pdf": "added", "top.pdf": "unchanged"}
    assert found(engine, "repaired") == {"broken.pdf"}


def test_a_passing_failure_is_retried_on_the_next_run(engine: Engine, folder: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = engine.ingest

    def busy(library: str, source: object, meta: dict[str, object], **kw: object) -> object:
        if meta["doc_id"] == TOP_ID:
            raise StoreError("the store did not answer")
        return real(library, source, meta, **kw)

    monkeypatch.setattr(engine, "ingest", busy)
    r = sync(engine, folder)
    assert r.summary() == "added 2, updated 0, unchanged 0, deleted 0, failed 1"
    assert {e.path: e.state for e in SyncRecords(engine.libraries).all(LIB).values()}["top.pdf"] == "claimed"
    monkeypatch.undo()
    assert sync(engine, folder).summary() == "added 1, updated 0, unchanged 2, deleted 0, failed 0"


def test_delete_removes_only_what_this_root_created(engine: Engine, folder: Path, tmp_path: Path) -> None:
    sync(engine, folder)
    # Uploaded documents (REST and Engine.ingest are the same call), one named like a synced id.
    engine.ingest(LIB, pdfs.make_pdf(["Uploaded memo about zebras."]), {"doc_id": "memo"})
    # Another root synced into the same library.
    other = tmp_path / "other"
    write_pdf(other / "elsewhere.pdf", "Other root talks about giraffes.")
    assert sync(engine, other).summary() == "added 1, updated 0, unchanged 0, deleted 0, failed 0"
    shutil.rmtree(folder / "a")
    (folder / "top.pdf").unlink()
    r = sync(engine, folder, delete=True)
    assert r.summary() == "added 0, updated 0, unchanged 1, deleted 2, failed 0"
    assert doc_ids(engine) == {B_ID, "memo", "elsewhere.pdf"}
    assert found(engine, "zebras") == {"memo"} and found(engine, "giraffes") == {"elsewhere.pdf"}
    # The other root with --delete and its file gone spares this root's and the upload.
    (other / "elsewhere.pdf").unlink()
    write_pdf(other / "placeholder.pdf", "keeps the folder non-empty")
    assert sync(engine, other, delete=True).summary() == "added 1, updated 0, unchanged 0, deleted 1, failed 0"
    assert doc_ids(engine) == {B_ID, "memo", "placeholder.pdf"}


def test_without_delete_gone_files_are_kept_and_said(engine: Engine, folder: Path) -> None:
    sync(engine, folder)
    (folder / "top.pdf").unlink()
    r = sync(engine, folder)
    assert r.summary() == "added 0, updated 0, unchanged 2, deleted 0, failed 0"
    assert r.notes == ["1 documents whose files are gone were kept (--delete removes them)"]
    assert TOP_ID in doc_ids(engine)
    assert sync(engine, folder, delete=True).summary() == "added 0, updated 0, unchanged 2, deleted 1, failed 0"
    assert TOP_ID not in doc_ids(engine)


def test_a_document_replaced_by_an_upload_is_spared(engine: Engine, folder: Path) -> None:
    sync(engine, folder)
    engine.ingest(LIB, pdfs.make_pdf(["An upload replaced it with walrus facts."]), {"doc_id": TOP_ID})
    # While its file is there the sync does not overwrite it ...
    write_pdf(folder / "top.pdf", "The file changed too.")
    r = sync(engine, folder)
    assert outcomes(r)["top.pdf"] == "failed"
    assert found(engine, "walrus") == {TOP_ID}
    # ... and once the file is gone it is not deleted either; the record forgets it.
    (folder / "top.pdf").unlink()
    r = sync(engine, folder, delete=True)
    assert r.summary() == "added 0, updated 0, unchanged 2, deleted 0, failed 0"
    assert [o.status for o in r.outcomes if o.action.doc_id == TOP_ID] == ["spared"]
    assert found(engine, "walrus") == {TOP_ID}
    assert TOP_ID not in {e.doc_id for e in SyncRecords(engine.libraries).all(LIB).values()}


def test_ids_taken_by_uploads_or_live_roots_fail_the_file(engine: Engine, folder: Path, tmp_path: Path) -> None:
    engine.create_library(LIB)
    engine.ingest(LIB, pdfs.make_pdf(["An upload called top.pdf about otters."]), {"doc_id": TOP_ID})
    r = sync(engine, folder)
    assert r.summary() == "added 2, updated 0, unchanged 0, deleted 0, failed 1"
    assert next(o.detail for o in r.outcomes if o.action.rel == "top.pdf") == (
        "document top.pdf is already in the library and was not created by a sync of this folder (an upload, "
        "or replaced since); it is left alone: rename the file or delete that document")
    assert found(engine, "otters") == {TOP_ID}
    twin = tmp_path / "twin"
    shutil.copytree(folder / "a", twin / "a")
    r = sync(engine, twin)
    assert r.summary() == "added 0, updated 0, unchanged 0, deleted 0, failed 1"
    assert r.outcomes[0].detail == f"document {A_ID} belongs to the sync of {folder.resolve()}; it is left alone"


def test_a_moved_folder_adopts_its_documents_without_reingesting(engine: Engine, folder: Path, tmp_path: Path) -> None:
    sync(engine, folder)
    versions = {d["doc_id"]: d["version"] for d in engine.documents(LIB)}
    moved = tmp_path / "moved"
    folder.rename(moved)
    r = sync(engine, moved, delete=True)
    assert r.summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"
    assert {d["doc_id"]: d["version"] for d in engine.documents(LIB)} == versions
    assert {e.root for e in SyncRecords(engine.libraries).all(LIB).values()} == {str(moved.resolve())}


def test_vanished_or_empty_root_deletes_nothing(engine: Engine, folder: Path) -> None:
    sync(engine, folder)
    hidden = folder.parent / "hidden"
    folder.rename(hidden)
    with pytest.raises(RootError, match=r"does not exist or is not a folder; nothing synced, nothing deleted"):
        sync(engine, folder, delete=True)
    folder.mkdir()  # an empty folder (an unmounted share looks like this)
    r = sync(engine, folder, delete=True)
    assert r.summary() == "added 0, updated 0, unchanged 0, deleted 0, failed 0"
    assert r.notes == [(f"no PDF files under {folder.resolve()}; nothing deleted (an empty or unmounted folder "
                        "is never taken for 3 removed files)")]
    assert doc_ids(engine) == {A_ID, B_ID, TOP_ID}
    assert len(SyncRecords(engine.libraries).all(LIB)) == 3


def test_dry_run_changes_nothing(engine: Engine, folder: Path) -> None:
    r = sync(engine, folder, dry_run=True)
    assert r.summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
    assert engine.list_libraries() == []  # not even the library is created
    sync(engine, folder)
    before = state(engine)
    write_pdf(folder / "a" / "report.pdf", "Changed words.")
    write_pdf(folder / "new.pdf", "A new file.")
    (folder / "top.pdf").unlink()
    r = sync(engine, folder, dry_run=True, delete=True)
    assert r.summary() == "added 1, updated 1, unchanged 1, deleted 1, failed 0"
    assert {o.action.rel: o.detail for o in r.outcomes} == {
        "a/report.pdf": "would be re-ingested", "b/report.pdf": "", "new.pdf": "would be added",
        "top.pdf": "would be deleted"}
    assert state(engine) == before


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
def test_the_record_works_on_the_server_backend(settings: Settings, folder: Path) -> None:
    """The same sync on the Qdrant server store (its in-process double): adds, skips, and spares."""
    from qdrant_client import QdrantClient

    from ragspine.store.server import ServerStore

    engine = Engine(settings, store=ServerStore(QdrantClient(":memory:")))
    try:
        assert sync(engine, folder).summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
        engine.ingest(LIB, pdfs.make_pdf(["Uploaded memo about zebras."]), {"doc_id": "memo"})
        assert sync(engine, folder).summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"
        (folder / "top.pdf").unlink()
        assert sync(engine, folder, delete=True).summary() == "added 0, updated 0, unchanged 2, deleted 1, failed 0"
        assert doc_ids(engine) == {A_ID, B_ID, "memo"}
        assert sorted(e.path for e in SyncRecords(engine.libraries).all(LIB).values()) == [
            "a/report.pdf", "b/report.pdf"]
    finally:
        engine.close()


def test_an_unchanged_file_whose_ocr_is_owed_gets_it_finished(engine: Engine, folder: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import Future

    sync(engine, folder)
    entry = engine.libraries.doc_entry(LIB, TOP_ID)
    assert entry is not None
    engine.libraries.put_doc_entry(LIB, {**entry, "ocr": "failed", "ocr_pending_pages": [1]})  # as a dead process leaves it
    queued: list[tuple[str, str]] = []

    def finish_ocr_later(library: str, doc_id: str, progress: object = None, done: object = None) -> Future[None]:
        queued.append((library, doc_id))
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    monkeypatch.setattr(engine, "finish_ocr_later", finish_ocr_later)
    r = sync(engine, folder)
    assert r.summary() == "added 0, updated 0, unchanged 3, deleted 0, failed 0"
    assert queued == [(LIB, TOP_ID)]
    assert [(str(p), first.version, first.ocr_pending_pages) for p, first, _ in r.owed] == [
        ("top.pdf", entry["active_version"], [1])]
    assert next(o.detail for o in r.outcomes if o.action.rel == "top.pdf") == "OCR still owed; it follows"


def test_a_different_file_never_takes_over_an_absent_folders_document(engine: Engine, tmp_path: Path) -> None:
    """Another folder (an unmounted share) is gone for now; a file at the same relative path
    here with other content fails, and the share's document is untouched when it comes back."""
    share, home = tmp_path / "share", tmp_path / "home"
    write_pdf(share / "report.pdf", "The share's report about wombats.")
    write_pdf(home / "report.pdf", "The home copy is about koalas.")
    assert sync(engine, share).summary() == "added 1, updated 0, unchanged 0, deleted 0, failed 0"
    away = tmp_path / "unmounted"
    share.rename(away)
    r = sync(engine, home, delete=True)
    assert r.summary() == "added 0, updated 0, unchanged 0, deleted 0, failed 1"
    [fail] = [o for o in r.outcomes if o.status == "failed"]
    assert "which is not there now, and this file differs from what it indexed" in fail.action.reason
    assert found(engine, "wombats") == {"report.pdf"} and found(engine, "koalas") == set()
    away.rename(share)
    assert sync(engine, share).summary() == "added 0, updated 0, unchanged 1, deleted 0, failed 0"


def test_a_folder_that_cannot_be_listed_deletes_nothing(engine: Engine, folder: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    sync(engine, folder)
    before = doc_ids(engine)
    real = os.scandir
    blocked = str(folder / "a")

    def scandir(path: object = ".") -> object:
        if str(path) == blocked:
            raise PermissionError(13, "Permission denied", blocked)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    r = sync(engine, folder, delete=True)
    assert doc_ids(engine) == before
    assert "folder a could not be listed: its files are neither synced nor deleted this run" in r.notes
    failed = [o for o in r.outcomes if o.status == "failed"]
    assert failed and all("could not be listed" in o.action.reason for o in failed)
