"""Text that exists only as pixels: scans, raster charts and RESTRICTED stamps, through the real
OCR engine (PP-OCRv4 via rapidocr-onnxruntime, shipped in its wheel) and the real ingest path.

The PDFs are drawn in the tests (``scans.py``). Expected positions are where the tests drew the
text; OCR boxes are compared with a tolerance of a line height.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
import pytest

import pdfs
import scans
from scans import RED, Line, ScanPage
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import NoTextError, NotFoundError
from ragspine.models.base import EncodedPage
from ragspine.models.modelset import ModelSet

LIB = "scans"
CANARY = "zqxstampcanary"


class SpyPageEncoder:
    """A page model that records every image it is given (its size and a digest) and answers
    a small fixed multivector."""

    model_id, revision, dim = "test/spy-page-encoder", "1", 16

    def __init__(self) -> None:
        self.images: list[tuple[int, int]] = []

    def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
        out = []
        for im in images:
            self.images.append(im.size)
            arr = np.asarray(im, dtype=np.float32)  # (h, w, 3)
            v = np.tile(arr.mean(axis=(0, 1))[:1], (8, 16)).astype(np.float32) + np.eye(8, 16, dtype=np.float32)
            out.append(EncodedPage(v / np.linalg.norm(v, axis=1, keepdims=True), np.ones(8, dtype=bool), (2, 4)))
        return out

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.eye(2, 16, dtype=np.float32) for _ in texts]


def _engine(data_dir: Path, models: ModelSet | None = None, **kw: Any) -> Engine:
    return Engine(Settings(data_dir=data_dir, **kw), models=models)


@pytest.fixture
def eng(data_dir: Path) -> Iterator[Engine]:
    e = _engine(data_dir)
    e.create_library(LIB)
    yield e
    e.close()


def _files_containing(root: Path, needle: str) -> list[Path]:
    raw = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and raw in p.read_bytes()]


def test_a_scanned_report_as_a_librarys_first_document_is_searchable(eng: Engine) -> None:
    pdf = scans.scan_pdf([
        ScanPage([Line("Harbour traffic grew strongly", y=200), Line("Container volumes doubled", y=240)]),
        ScanPage([Line("Dredging finished early", y=300), Line("The new quay opened in spring", y=340)]),
    ])
    res = eng.ingest(LIB, pdf, {"doc_id": "scan"})
    assert (res.status, res.pages_indexed, res.pages_ocr) == ("indexed", 2, 2)
    assert res.chunks >= 2
    out = eng.search({"query": "quay opened spring", "libraries": [LIB], "mode": "bm25", "top_k": 3})
    hit = out.hits[0]
    assert (hit.page, hit.text_source) == (2, "ocr")
    assert "quay" in hit.text.lower()
    page = json.dumps(eng.document(LIB, "scan"))
    assert '"pages_indexed": 2' in page
    # The passage box covers where the lines were drawn: baselines 300 and 340 pt, 18 pt type,
    # from x = 72 pt; one line height (18 pt) of tolerance.
    x0, y0, x1, y1 = hit.bbox
    assert 72 - 18 <= x0 <= 72 + 18 and 300 - 2 * 18 <= y0 <= 300 and 340 <= y1 <= 340 + 18
    assert x1 > 72 + 150
    assert eng.thumbnail(LIB, "scan", 2).is_file()


def test_a_text_less_document_is_a_clear_error_and_nothing_is_kept(data_dir: Path) -> None:
    eng = _engine(data_dir, ocr="off")
    try:
        eng.create_library(LIB)
        eng.ingest(LIB, pdfs.make_pdf(["Harbour traffic grew strongly this year."]), {"doc_id": "text"})
        scan = scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])] * 2)
        with pytest.raises(NoTextError, match="no text layer and OCR is off"):
            eng.ingest(LIB, scan, {"doc_id": "scan"})
        assert [d["doc_id"] for d in eng.documents(LIB)] == ["text"]
        assert eng.search({"query": "harbour", "libraries": [LIB], "mode": "bm25"}).hits[0].doc_id == "text"
        # As the library's first document too (the BM25 statistics had no average length).
        eng.create_library("fresh")
        with pytest.raises(NoTextError):
            eng.ingest("fresh", scan, {"doc_id": "scan"})
        assert eng.documents("fresh") == []
    finally:
        eng.close()


def test_a_photo_with_no_words_is_refused_too(eng: Engine) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=400, height=300)
    rng = np.random.default_rng(0)
    arr = (rng.random((60, 80, 1)) * 40 + 100).astype(np.uint8).repeat(3, axis=2)  # (h, w, 3) grey noise
    page.insert_image(page.rect, pixmap=pymupdf.Pixmap(pymupdf.csRGB, 80, 60, arr.tobytes(), False))
    with pytest.raises(NoTextError, match="OCR found no text"):
        eng.ingest(LIB, doc.tobytes(), {"doc_id": "photo"})
    assert eng.documents(LIB) == []


def test_a_scan_without_ocr_is_indexed_visual_only_in_a_page_model_library(data_dir: Path) -> None:
    spy = SpyPageEncoder()
    eng = _engine(data_dir, ModelSet(page=spy), ocr="off", page_render_dpi=36)
    try:
        eng.create_library(LIB)
        res = eng.ingest(LIB, scans.scan_pdf([ScanPage([Line("Container volumes", y=240)])]), {"doc_id": "scan"})
        assert (res.status, res.pages_indexed, res.chunks, res.pages_ocr) == ("indexed", 1, 0, 0)
        assert len(spy.images) == 1
        out = eng.search({"query": "anything", "libraries": [LIB], "mode": "vector"})
        assert [h.page for h in out.hits] == [1]
    finally:
        eng.close()


def test_a_stamp_in_pixels_drops_the_page_before_the_encoder_sees_it(data_dir: Path) -> None:
    spy = SpyPageEncoder()
    # gap_log off: a canary typed as a query is the user's own text, which the gap log keeps by
    # design (tests/chain/test_query_chain.py shows it keeps nothing else); this sweep is about
    # the page's content.
    eng = _engine(data_dir, ModelSet(page=spy), page_render_dpi=36, gap_log=False)
    try:
        eng.create_library(LIB)
        bodies = ["Harbour traffic grew strongly this year.", f"Secret tender {CANARY} for the new terminal.",
                  "Dredging finished early and the quay opened."]
        # Page 2's only classification mark: a red stamp picture in its header band.
        res = eng.ingest(LIB, scans.stamped_pdf(bodies, {2: (380, 18, 560, 50)}), {"doc_id": "stamped"})
        assert (res.status, res.pages_dropped, res.pages_indexed) == ("indexed", [2], 2)
        assert len(spy.images) == 2  # pages 1 and 3 only
        for mode in ("bm25", "vector", "hybrid"):
            out = eng.search({"query": f"{CANARY} tender", "libraries": [LIB], "mode": mode, "top_k": 10})
            assert all(h.page != 2 and CANARY not in h.text for h in out.hits), mode
        with pytest.raises(NotFoundError):
            eng.thumbnail(LIB, "stamped", 2)
        assert _files_containing(Path(eng.settings.data_dir), CANARY) == []
    finally:
        eng.close()
    assert _files_containing(data_dir, CANARY) == []  # after close: every file flushed


@pytest.mark.parametrize(
    ("line", "dropped"),
    [
        (Line("RESTRICTED", x=200, y=450, size=40, color=RED), True),  # a stamp across the middle
        (Line("RESTRICTED", x=60, y=600, size=40, color=RED, rotate=90), True),  # turned 90 degrees
        (Line("Classification: Restricted", x=72, y=420, size=16), True),  # a label anywhere
        (Line("Unrestricted access to the quay", x=72, y=40, size=16), False),  # in the header band
        (Line("restricted stock units vested in the year under review", x=72, y=420, size=12), False),
    ],
)
def test_stamps_on_scans(eng: Engine, line: Line, dropped: bool) -> None:
    pdf = scans.scan_pdf([ScanPage([Line("Quarterly harbour figures", y=200), line])])
    res = eng.ingest(LIB, pdf, {"doc_id": "scan"})
    assert (res.pages_dropped == [1]) is dropped, res


def test_text_in_a_raster_chart_is_searchable(eng: Engine) -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(72, 72, 523, 200), "Annual report. Our fleet grew in every region.", fontsize=11)
    chart = scans.picture([Line("Smartphone shipments by region", x=20, y=40, size=20),
                           Line("Europe  Asia  Americas", x=40, y=260, size=16)], (420, 300), 150)
    page.insert_image(pymupdf.Rect(90, 260, 510, 560), pixmap=chart)  # 25 % of the page
    res = eng.ingest(LIB, doc.tobytes(), {"doc_id": "chart"})
    assert res.pages_ocr == 1
    out = eng.search({"query": "smartphone shipments", "libraries": [LIB], "mode": "bm25"})
    assert out.hits and out.hits[0].text_source == "ocr"
    assert "shipments" in out.hits[0].text.lower()
    x0, y0, x1, y1 = out.hits[0].bbox
    assert 90 <= x0 and y0 >= 260 and y1 <= 560  # inside the chart picture
    # The text layer's own passage is cited as such.
    assert eng.search({"query": "fleet grew", "libraries": [LIB], "mode": "bm25"}).hits[0].text_source == "pdf"


def test_born_digital_pages_cost_no_ocr(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.indexing import ocr as stage

    def refuse() -> Any:
        raise AssertionError("the OCR engine was loaded for a page that needs none")

    monkeypatch.setattr(stage, "_engine", refuse)
    eng = _engine(data_dir)
    try:
        eng.create_library(LIB)
        doc = pymupdf.open(stream=pdfs.make_pdf(["Harbour traffic grew strongly.", "Dredging finished."]))
        for i in range(200):  # hundreds of tiny images (icons) on page 1: no region
            doc[0].insert_image(pymupdf.Rect(20 + (i % 20) * 25, 600 + (i // 20) * 20, 40 + (i % 20) * 25,
                                             615 + (i // 20) * 20), pixmap=scans.picture([], (10, 10), 72))
        res = eng.ingest(LIB, doc.tobytes(), {"doc_id": "plain"})
        assert (res.status, res.pages_ocr) == ("indexed", 0)
    finally:
        eng.close()


def test_hostile_images_are_bounded(eng: Engine) -> None:
    # One huge picture (8000 x 8000 px) on a page: the OCR render is capped, the ingest works.
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    big = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 8000, 8000), False)
    big.clear_with(255)
    page.insert_image(page.rect, pixmap=big)
    page.insert_text((72, 400), "Harbour traffic grew", fontsize=40)  # drawn over it as text
    res = eng.ingest(LIB, doc.tobytes(), {"doc_id": "huge"})
    assert res.status == "indexed"
    # CMYK and grey scans are read like RGB ones.
    for cs, name in ((pymupdf.csCMYK, "cmyk"), (pymupdf.csGRAY, "gray")):
        d = pymupdf.open()
        p = d.new_page(width=595, height=842)
        p.insert_image(p.rect, pixmap=scans.picture([Line("Container volumes doubled", y=240)], colorspace=cs))
        r = eng.ingest(LIB, d.tobytes(), {"doc_id": name})
        assert r.pages_ocr == 1, name
        hits = eng.search({"query": "container volumes", "libraries": [LIB], "mode": "bm25",
                           "filters": [{"field": "doc_id", "op": "eq", "value": name}]}).hits
        assert hits and hits[0].text_source == "ocr", name


def test_a_scan_stored_sideways_is_read_upright(eng: Engine) -> None:
    pdf = scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)], rotation=90)])
    res = eng.ingest(LIB, pdf, {"doc_id": "sideways"})
    assert res.pages_ocr == 1
    assert eng.search({"query": "container volumes", "libraries": [LIB], "mode": "bm25"}).hits


def test_ocr_settings_are_part_of_what_makes_a_document_unchanged(data_dir: Path) -> None:
    scan = scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])])
    eng = _engine(data_dir, ocr="auto")
    try:
        eng.create_library(LIB)
        assert eng.ingest(LIB, scan, {"doc_id": "s"}).status == "indexed"
        assert eng.ingest(LIB, scan, {"doc_id": "s"}).status == "unchanged"
    finally:
        eng.close()
    eng = _engine(data_dir, ocr="full")
    try:
        assert eng.ingest(LIB, scan, {"doc_id": "s"}).status == "indexed"  # read again, other settings
    finally:
        eng.close()


def test_a_jpeg2000_scan_is_read(eng: Engine) -> None:
    import io

    from PIL import Image

    pix = scans.picture([Line("Container volumes doubled", y=240)], dpi=120)
    im = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    buf = io.BytesIO()
    im.save(buf, "JPEG2000")
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    xref = page.insert_image(page.rect, stream=buf.getvalue())
    assert doc.extract_image(xref)["ext"] == "jpx"  # stored as a JPX image (JPXDecode)
    res = eng.ingest(LIB, doc.tobytes(), {"doc_id": "jpx"})
    assert res.pages_ocr == 1
    hit = eng.search({"query": "container volumes", "libraries": [LIB], "mode": "bm25"}).hits[0]
    assert (hit.doc_id, hit.text_source) == ("jpx", "ocr")


def test_ocr_on_worker_processes_reads_what_the_ingest_thread_reads(tmp_path: Path) -> None:
    pdf = scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)]),
                          ScanPage([Line("Dredging finished early", y=300)]),
                          ScanPage([Line("RESTRICTED", x=200, y=450, size=40, color=RED)])])
    got = []
    for workers in (1, 2):
        eng = _engine(tmp_path / f"w{workers}", ocr_workers=workers)
        try:
            eng.create_library(LIB)
            res = eng.ingest(LIB, pdf, {"doc_id": "scan"})
            assert (res.pages_ocr, res.pages_dropped) == (2, [3])
            pool = eng.indexer.ocr_pool
            assert (pool is not None and pool.started) is (workers == 2)  # the pool really ran
            got.append([(h.page, h.text, [round(x, 3) for x in h.bbox]) for h in
                        eng.search({"query": "container dredging", "libraries": [LIB], "mode": "bm25"}).hits])
        finally:
            eng.close()
    assert got[0] == got[1] and len(got[0]) == 2
