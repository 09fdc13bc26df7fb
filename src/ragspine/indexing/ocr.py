"""OCR during ingest: text that exists only as pixels (scans, slides exported as images, raster
charts, stamps) joins the page's text before the RESTRICTED policy reads it.

It runs right after parsing and before the policy, so a page whose only classification mark is
a stamp in its pixels is dropped like any other RESTRICTED page: before rendering for the page
model, thumbnails, BM25 or the graph. What is read depends on ``RAGSPINE_OCR``:

* ``auto`` (default): pages whose text layer is (nearly) empty, raster images that cover at
  least ``RAGSPINE_OCR_MIN_IMAGE_FRACTION`` of a page, and images that reach into the marker
  bands (stamps). A born-digital page without such images costs one plan (about a millisecond).
* ``full``: every page. ``off``: none.

OCR lines keep their boxes in PDF points: each becomes a text block (``source="ocr"``) after the
text layer's, so passages, bboxes and highlights work as for born-digital text, and hits say
``text_source: "ocr"``. Pages are read on the calling thread, or on the render worker
processes (``RAGSPINE_RENDER_WORKERS``) when there are some; identical renders are read once per
document (:class:`ragspine.ocr.OcrCache`). Nothing here logs page text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import pymupdf

from ragspine.config import Settings
from ragspine.indexing.pdf import PARAGRAPH_SEP, PageContent, ParsedPDF, TextBlock
from ragspine.indexing.render import RenderProcesses
from ragspine.ocr import OcrCache, PageOcr, RapidOcrEngine, ocr_page, plan_page

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
#: Pages per task sent to a worker process.
_PAGES_PER_TASK = 2


@dataclass(frozen=True)
class OcrOptions:
    """What ``RAGSPINE_OCR*`` says, in a form worker processes receive (picklable)."""

    mode: str  # auto | full | off
    dpi: int
    min_text_chars: int
    min_image_fraction: float
    band: float  # the policy's marker band: stamps there are read in auto mode

    @classmethod
    def from_settings(cls, s: Settings) -> "OcrOptions":
        return cls(s.ocr, s.ocr_dpi, s.ocr_min_text_chars, s.ocr_min_image_fraction, s.marker_band)

    def key(self) -> list[Any]:
        """What changes the text a document is indexed with (part of its content key)."""
        if self.mode == "off":
            return ["off"]
        return [self.mode, self.dpi, self.min_text_chars, self.min_image_fraction, self.band]


@dataclass
class OcrReport:
    """What OCR did for one document (counts only: no text)."""

    pages: int = 0  # pages with at least one region read
    lines: int = 0
    seconds: float = 0.0


# One engine per process: the ONNX sessions load once (about a second) and are reused.
_ENGINE: RapidOcrEngine | None = None
_ENGINE_LOCK = threading.Lock()


def _engine() -> RapidOcrEngine:
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = RapidOcrEngine()
        return _ENGINE


def _read(page: pymupdf.Page, opts: OcrOptions, cache: OcrCache) -> PageOcr:
    return ocr_page(page, _engine(), mode=opts.mode, dpi=opts.dpi,  # type: ignore[arg-type]
                    min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction,
                    band=opts.band, cache=cache)


_WORKER_DOCS: dict[str, tuple[pymupdf.Document, OcrCache]] = {}


def ocr_pages_worker(key: str, source: bytes | str, numbers: list[int], opts: OcrOptions) -> dict[int, PageOcr]:
    """In a worker process: OCR of the 1-based pages ``numbers``. The worker keeps the last
    documents it opened (by ``key``) and a cache per document."""
    got = _WORKER_DOCS.get(key)
    if got is None:
        while len(_WORKER_DOCS) >= 2:
            _WORKER_DOCS.pop(next(iter(_WORKER_DOCS)))[0].close()
        doc = (pymupdf.open(source, filetype="pdf") if isinstance(source, str)
               else pymupdf.open(stream=source, filetype="pdf"))
        got = _WORKER_DOCS[key] = (doc, OcrCache())
    doc, cache = got
    return {n: _read(doc.load_page(n - 1), opts, cache) for n in numbers}


class OcrStage:
    """Reads the pixels of the pages that need it and merges what it reads into them."""

    def __init__(self, settings: Settings, procs: RenderProcesses) -> None:
        self.opts = OcrOptions.from_settings(settings)
        self.procs = procs

    def pages_to_read(self, parsed: ParsedPDF) -> list[int]:
        """1-based numbers of the pages with something to read (the plan only: no rendering)."""
        o = self.opts
        if o.mode == "off" or parsed.doc is None:
            return []
        # The text layer is already read: a born-digital page without images costs nothing here.
        return [p.number for p in parsed.pages
                if plan_page(parsed.doc.load_page(p.number - 1), o.mode,  # type: ignore[arg-type]
                             o.min_text_chars, o.min_image_fraction, o.band,
                             text_chars=sum(1 for c in p.text if not c.isspace()), has_images=p.has_images)]

    def apply(self, parsed: ParsedPDF, *, key: str, encoder: Any = None,
              progress: Progress | None = None) -> OcrReport:
        """OCR the pages that need it and add the lines to ``parsed.pages``; returns counts."""
        t0 = time.perf_counter()
        report = merge_all(parsed, self.read(parsed, key=key, encoder=encoder, progress=progress))
        report.seconds = time.perf_counter() - t0
        if report.pages:
            logger.info("OCR read %d lines on %d pages in %.1f s", report.lines, report.pages, report.seconds)
        return report

    def read(self, parsed: ParsedPDF, *, key: str, encoder: Any = None,
             progress: Progress | None = None) -> dict[int, list[tuple[str, tuple[float, float, float, float]]]]:
        """The OCR lines of every page that needs reading (page number -> text and box in PDF
        points), without changing ``parsed``."""
        numbers = self.pages_to_read(parsed)
        results = self._run(parsed, numbers, key, encoder, progress) if numbers else {}
        return {n: [(ln.text, ln.box) for ln in r.lines] for n, r in results.items()}

    def _run(self, parsed: ParsedPDF, numbers: Sequence[int], key: str, encoder: Any,
             progress: Progress | None) -> dict[int, PageOcr]:
        pool = self.procs.get(encoder) if parsed.source is not None else None
        out: dict[int, PageOcr] = {}
        if pool is not None:
            src = parsed.source if isinstance(parsed.source, (bytes, bytearray)) else str(parsed.source)
            futs: list[Future[dict[int, PageOcr]]] = []
            try:
                for i in range(0, len(numbers), _PAGES_PER_TASK):
                    futs.append(pool.submit(ocr_pages_worker, key, src, list(numbers[i:i + _PAGES_PER_TASK]),
                                            self.opts))
                for fut in futs:
                    out.update(fut.result())
                    if progress is not None:
                        progress(len(out), len(numbers))
                return out
            except BrokenProcessPool:
                self.procs.mark_broken()
                out = {}  # read everything again on this thread
        cache = OcrCache()
        assert parsed.doc is not None
        for n in numbers:
            out[n] = _read(parsed.doc.load_page(n - 1), self.opts, cache)
            if progress is not None:
                progress(len(out), len(numbers))
        return out


#: OCR lines of a page: text and box (PDF points), in reading order.
OcrLines = Sequence[tuple[str, tuple[float, float, float, float]]]


def merge_all(parsed: ParsedPDF, lines: dict[int, OcrLines]) -> OcrReport:
    """Add OCR lines (page number -> lines, read here or upstream by a Ray CPU task) to the pages."""
    report = OcrReport()
    by_number = {p.number: p for p in parsed.pages}
    for n, page_lines in lines.items():
        if page_lines and n in by_number:
            merge_ocr(by_number[n], page_lines)
            report.pages += 1
            report.lines += len(page_lines)
    return report


def merge_ocr(page: PageContent, lines: OcrLines) -> None:
    """Append OCR lines to the page: each line one paragraph (``source="ocr"``) after the text
    layer's paragraphs, and every line to ``ocr_lines`` for the policy."""
    text = page.text
    blocks = list(page.blocks)
    for line_text, box in lines:
        if text:
            text += PARAGRAPH_SEP
        start = len(text)
        text += line_text
        blocks.append(TextBlock(line_text, tuple(box), start, len(text), source="ocr"))  # type: ignore[arg-type]
        page.ocr_lines.append((line_text, tuple(box)))  # type: ignore[arg-type]
    page.text = text
    page.blocks = blocks
