"""Two-phase ingest (ragspine.indexing.ocr_phase): a document's pages that need no content OCR go
live first, the rest follow as a new version; RESTRICTED stamps in pixels are found before any
page they mark goes live; a failed or interrupted phase 2 leaves phase 1 live and is resumed.

Real OCR engine (PP-OCRv4), real ingest path, embedded store. Documents are drawn here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest

import scans
from scans import RED, Line, ScanPage
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import DocumentError
from ragspine.indexing import ocr as stage
from ragspine.indexing.pipeline import Indexer
from ragspine.ocr import OcrError

LIB = "phases"
BODY_1 = "Harbour traffic grew strongly across every terminal this year."
BODY_2 = "Dredging of the outer channel finished two months early."
SCANNED = "Container volumes doubled"
CANARY = "zqxheldcanary"


def _engine(data_dir: Path, **kw: Any) -> Engine:
    return Engine(Settings(data_dir=data_dir, **kw))


@pytest.fixture
def eng(data_dir: Path) -> Iterator[Engine]:
    e = _engine(data_dir)
    e.create_library(LIB)
    yield e
    e.close()


def _report(*, scanned: list[Line] | None = None, chart_lines: list[Line] | None = None,
            band_stamp: bool = False) -> bytes:
    """Page 1: born-digital text (with a chart picture of ``chart_lines`` covering a third of the
    page, and a stamp-sized "RESTRICTED" picture in its header band, when asked). Page 2:
    born-digital text. Page 3: a scan of ``scanned`` lines (no text layer)."""
    doc = pymupdf.open()
    p1 = doc.new_page(width=595, height=842)
    p1.insert_textbox(pymupdf.Rect(72, 120, 523, 200), BODY_1, fontsize=11)
    if chart_lines is not None:
        p1.insert_image(pymupdf.Rect(72, 300, 523, 620), pixmap=scans.picture(chart_lines, (451, 320), 150))
    if band_stamp:
        stamp = scans.picture([Line("RESTRICTED", 6, 28, 22, RED)], (150, 36), 200)
        p1.insert_image(pymupdf.Rect(400, 20, 550, 56), pixmap=stamp)  # 0.9 % of the page, in the top band
    p2 = doc.new_page(width=595, height=842)
    p2.insert_textbox(pymupdf.Rect(72, 120, 523, 200), BODY_2, fontsize=11)
    pdf = pymupdf.open(stream=scans.scan_pdf([ScanPage(scanned or [Line(SCANNED, y=240)])]))
    doc.insert_pdf(pdf)
    return doc.tobytes()


def _pages(eng: Engine, query: str) -> list[tuple[str, int]]:
    return [(h.doc_id, h.page) for h in eng.search({"query": query, "libraries": [LIB], "mode": "bm25"}).hits]


def test_text_layer_pages_go_live_first_and_the_scan_follows_as_a_new_version(eng: Engine) -> None:
    pdf = _report()
    first = eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True)
    assert (first.status, first.version, first.ocr, first.ocr_pending_pages) == ("indexed", 1, "pending", [3])
    assert (first.pages_total, first.pages_indexed, first.pages_ocr) == (3, 2, 0)
    assert _pages(eng, "harbour traffic terminal") == [("r", 1)]
    assert _pages(eng, "container volumes") == []  # page 3 is not live before its OCR
    doc = eng.document(LIB, "r")
    assert (doc["ocr"], doc["ocr_pending_pages"], doc["page_numbers"]) == ("pending", [3], [1, 2])
    with pytest.raises(Exception):
        eng.thumbnail(LIB, "r", 3)  # not even a thumbnail of a held page
    assert list((eng.settings.data_dir / "ocr-pending" / LIB).glob("*.pdf"))  # the bytes wait for phase 2

    second = eng.indexer.finish_ocr(LIB, "r")
    assert second is not None
    assert (second.status, second.version, second.ocr, second.pages_indexed, second.pages_ocr) == (
        "indexed", 2, "done", 3, 1)
    hit = eng.search({"query": "container volumes", "libraries": [LIB], "mode": "bm25"}).hits[0]
    assert (hit.doc_id, hit.page, hit.text_source) == ("r", 3, "ocr")
    assert eng.document(LIB, "r")["ocr"] == "done"
    assert eng.thumbnail(LIB, "r", 3).is_file()
    assert not list((eng.settings.data_dir / "ocr-pending" / LIB).glob("*"))  # nothing left behind
    assert eng.indexer.finish_ocr(LIB, "r") is None  # nothing owed any more
    # Same bytes again: unchanged, now that the OCR is done.
    assert eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True).status == "unchanged"


def test_a_document_with_nothing_to_defer_is_ingested_in_one_phase(eng: Engine) -> None:
    born = pymupdf.open()
    born.new_page().insert_text((72, 100), BODY_1, fontsize=11)
    res = eng.ingest(LIB, born.tobytes(), {"doc_id": "text"}, defer_ocr=True)
    assert (res.ocr, res.version) == ("none", 1)
    only_scans = scans.scan_pdf([ScanPage([Line(SCANNED, y=240)])])
    # Nothing could go live first: the whole document is owed, and the call returns at once.
    res = eng.ingest(LIB, only_scans, {"doc_id": "scan"}, defer_ocr=True)
    assert (res.status, res.ocr, res.version, res.ocr_pending_pages) == ("ocr_pending", "pending", None, [1])
    assert [d["doc_id"] for d in eng.documents(LIB)] == ["text"] and _pages(eng, "container") == []
    assert eng.ingest(LIB, only_scans, {"doc_id": "scan"}, defer_ocr=True).status == "ocr_pending"  # again
    done = eng.indexer.finish_ocr(LIB, "scan")
    assert done is not None and (done.status, done.version, done.ocr, done.pages_ocr) == ("indexed", 1, "done", 1)
    assert _pages(eng, "container volumes") == [("scan", 1)]
    # Without defer_ocr a scan is read in the call, in one phase.
    res = eng.ingest(LIB, scans.scan_pdf([ScanPage([Line("Dredging finished", y=240)])]), {"doc_id": "s2"})
    assert (res.status, res.version, res.ocr) == ("indexed", 1, "done")


def test_a_stamp_in_a_band_image_drops_its_page_in_the_first_phase(eng: Engine) -> None:
    res = eng.ingest(LIB, _report(band_stamp=True), {"doc_id": "r"}, defer_ocr=True)
    assert (res.ocr, res.pages_dropped, res.pages_indexed) == ("pending", [1], 1)
    # The first phase read one page's images: page 1's band stamp (page 3, the scan, waits).
    assert res.ocr_pages_read == 1 and res.ocr_seconds > 0
    assert _pages(eng, "harbour traffic terminal") == []
    assert eng.indexer.finish_ocr(LIB, "r").pages_dropped == [1]  # type: ignore[union-attr]
    assert _pages(eng, "harbour traffic terminal") == []


def _stamped_chart() -> list[Line]:
    # A chart picture whose only classification mark is a stamp in its middle, with a canary.
    return [Line(f"Terminal throughput {CANARY}", x=20, y=60, size=16),
            Line("RESTRICTED", x=120, y=200, size=30, color=RED)]


def _searchable_between_commits(eng: Engine) -> list[tuple[str, int]]:
    """Ingest the stamped-chart report in two phases; what a search found right after the
    first commit (the second phase runs after that search)."""
    first = eng.ingest(LIB, _report(chart_lines=_stamped_chart()), {"doc_id": "r"}, defer_ocr=True)
    assert first.ocr == "pending"
    between = _pages(eng, "harbour traffic terminal")
    second = eng.indexer.finish_ocr(LIB, "r")
    assert second is not None and second.pages_dropped == [1]  # phase 2 reads the stamp either way
    assert _pages(eng, "harbour traffic terminal") == []
    assert _pages(eng, CANARY) == []
    return between


def test_stamp_before_live_a_page_with_unread_pixels_is_never_live_before_its_ocr(eng: Engine) -> None:
    assert _searchable_between_commits(eng) == []


def test_stamp_before_live_guard_disabled_the_stamped_page_is_searchable_between_commits(
    eng: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The guard firing: without it, page 1 goes live on its text layer before its chart is read.
    monkeypatch.setattr(Indexer, "_hold_unread", staticmethod(lambda deferred: []))
    assert _searchable_between_commits(eng) == [("r", 1)]


def test_a_failed_second_phase_leaves_the_first_live_and_is_resumed(
    eng: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pdf = _report()
    eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True)
    real = stage._engine

    class Broken:
        backend = "onnxruntime"
        name = "broken"

        def recognize(self, image: Any) -> list[Any]:
            raise OcrError("the engine crashed")

    monkeypatch.setattr(stage, "_engine", lambda backend="auto", threads=None, device="cpu": Broken())
    with pytest.raises(OcrError, match="the engine crashed"):
        eng.indexer.finish_ocr(LIB, "r")
    assert eng.document(LIB, "r")["ocr"] == "failed"
    assert _pages(eng, "harbour traffic terminal") == [("r", 1)]  # phase 1 still live
    # The same bytes again: not "unchanged" but owed; deferred, it answers pending for the caller.
    again = eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True)
    assert (again.status, again.ocr) == ("unchanged", "failed")
    monkeypatch.setattr(stage, "_engine", real)
    futures = eng.resume_ocr(LIB)
    assert list(futures) == [(LIB, "r")]
    assert futures[(LIB, "r")].result(timeout=120).version == 2
    assert eng.document(LIB, "r")["ocr"] == "done"
    assert _pages(eng, "container volumes") == [("r", 3)]


def test_an_interrupted_second_phase_reads_failed_in_the_next_process_and_resumes(data_dir: Path) -> None:
    a = _engine(data_dir)
    a.create_library(LIB)
    a.ingest(LIB, _report(), {"doc_id": "r"}, defer_ocr=True)
    a.close()  # the process ends before phase 2 ran
    b = _engine(data_dir)
    try:
        assert b.document(LIB, "r")["ocr"] == "failed"
        assert _pages(b, "harbour traffic terminal") == [("r", 1)]
        b.resume_ocr()[(LIB, "r")].result(timeout=120)
        assert (b.document(LIB, "r")["ocr"], _pages(b, "container volumes")) == ("done", [("r", 3)])
    finally:
        b.close()


def test_workers_dying_in_the_second_phase_fail_it_and_the_first_stays_live(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import ocr_engines

    monkeypatch.setenv("OCR_TEST_DIR", str(tmp_path))
    eng = _engine(data_dir, ocr_workers=2, ocr_worker_nice=0)
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, _report(), {"doc_id": "r"}, defer_ocr=True)
        assert eng.indexer.ocr_pool is not None and not eng.indexer.ocr_pool.started  # phase 1 read nothing
        eng.indexer.ocr_pool.factory = ocr_engines.dying
        with pytest.raises(OcrError, match=r"died 2 times while reading pages \[3\]"):
            eng.indexer.finish_ocr(LIB, "r")
        assert eng.document(LIB, "r")["ocr"] == "failed"
        assert _pages(eng, "harbour traffic terminal") == [("r", 1)]
        eng.indexer.ocr_pool.factory = ocr_engines.file_driven  # a pool that reads again
        res = eng.indexer.finish_ocr(LIB, "r")
        assert res is not None and (res.version, res.ocr) == (2, "done")
        assert ("r", 3) in _pages(eng, "harbour")  # the stand-in engine's line on the scan
    finally:
        eng.close()


def test_a_newer_version_supersedes_an_owed_second_phase(eng: Engine) -> None:
    eng.ingest(LIB, _report(), {"doc_id": "r"}, defer_ocr=True)
    newer = pymupdf.open()
    newer.new_page().insert_text((72, 100), "A corrected edition about dredging.", fontsize=11)
    assert eng.ingest(LIB, newer.tobytes(), {"doc_id": "r"}).version == 2
    assert eng.indexer.finish_ocr(LIB, "r") is None  # nothing owed: the new version owes no OCR
    assert eng.document(LIB, "r")["version"] == 2
    assert not list((eng.settings.data_dir / "ocr-pending" / LIB).glob("*"))


def test_deleting_a_document_whose_ocr_is_owed_removes_the_kept_bytes(eng: Engine) -> None:
    eng.ingest(LIB, _report(), {"doc_id": "r"}, defer_ocr=True)
    folder = eng.settings.data_dir / "ocr-pending" / LIB
    assert list(folder.glob("*.pdf"))
    eng.delete_document(LIB, "r")
    assert not list(folder.glob("*"))


def test_lost_kept_bytes_fail_the_second_phase_with_a_clear_error(eng: Engine) -> None:
    pdf = _report()
    eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True)
    for f in (eng.settings.data_dir / "ocr-pending" / LIB).glob("*"):
        f.unlink()
    with pytest.raises(DocumentError, match="kept for its OCR is gone from the data dir; ingest it again"):
        eng.indexer.finish_ocr(LIB, "r")
    assert eng.document(LIB, "r")["ocr"] == "failed"
    # Ingesting the same bytes keeps them again, and the OCR can finish.
    assert eng.ingest(LIB, pdf, {"doc_id": "r"}, defer_ocr=True).ocr == "failed"
    assert eng.indexer.finish_ocr(LIB, "r").ocr == "done"  # type: ignore[union-attr]


def test_a_document_owed_whole_to_its_ocr_can_be_deleted_before_its_ocr_runs(eng: Engine) -> None:
    from ragspine.errors import DocumentNotFoundError

    only_scans = scans.scan_pdf([ScanPage([Line(SCANNED, y=240)])])
    assert eng.ingest(LIB, only_scans, {"doc_id": "scan"}, defer_ocr=True).status == "ocr_pending"
    key = eng.indexer.libraries.doc_entry(LIB, "scan")["content_key"]  # type: ignore[index]
    assert eng.indexer.pending.has(LIB, key)
    eng.delete_document(LIB, "scan")
    # Gone: its kept bytes, its entry, what it owed; a second phase finds nothing to do.
    assert not eng.indexer.pending.has(LIB, key)
    assert eng.indexer.libraries.doc_entry(LIB, "scan") is None and eng.indexer.deferred.owed(LIB) == []
    assert eng.indexer.finish_ocr(LIB, "scan") is None
    assert _pages(eng, "container volumes") == []
    with pytest.raises(DocumentNotFoundError):
        eng.delete_document(LIB, "scan")
