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
``text_source: "ocr"``. Pages are read on the OCR worker processes (``RAGSPINE_OCR_WORKERS``,
:mod:`ragspine.indexing.ocr_pool`), or on the calling thread with one worker; identical renders
are read once per document and worker (:class:`ragspine.ocr.OcrCache`). Nothing here logs page
text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pymupdf

from ragspine.config import Settings
from ragspine.indexing.pdf import PARAGRAPH_SEP, PageContent, ParsedPDF, TextBlock
from ragspine.indexing.ocr_pool import URGENT, OcrProcesses, PoolUnavailable
from ragspine.ocr import OcrCache, PageOcr, Part, RapidOcrEngine, is_stamp_region, ocr_page, plan_page
from ragspine.ocr.plan import page_rect_unrotated

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


#: Documents whose first phases run at once in a batch (``ragspine ingest`` without ``--jobs``,
#: ``ragspine eval``) when OCR may read pixels: while one first phase waits for the OCR workers to
#: read its stamp-sized images, the next document is parsed. MMLongBench's 48 PDFs one at a
#: time: every first phase live after 48.7 s, 15.3 s of it waiting for stamps (1.9x the 25.4 s
#: of the same ingest with OCR off); two at a time: 28.3 s (1.1x). The same holds with OCR off
#: when thumbnails render on worker processes (:func:`ragspine.indexing.render.render_workers`):
#: the next document is parsed while the last one's pages render (36.9 s one at a time on the
#: helper thread, 23.4 s two at a time with two render workers, 2 cores).
FIRST_PHASE_JOBS = 2


def first_phase_jobs(ocr: str, files: int, *, renders_apart: bool = False) -> int:
    """Documents to ingest at once in a batch of ``files``: :data:`FIRST_PHASE_JOBS` when OCR
    (``RAGSPINE_OCR``) may read pixels or pages render on worker processes (``renders_apart``),
    and there is more than one file; else one (parsing and writing hold the GIL: a second
    document at once only helps while the first waits)."""
    return FIRST_PHASE_JOBS if (ocr != "off" or renders_apart) and files > 1 else 1


@dataclass(frozen=True)
class OcrOptions:
    """What ``RAGSPINE_OCR*`` says, in a form worker processes receive (picklable)."""

    mode: str  # auto | full | off
    dpi: int
    min_text_chars: int
    min_image_fraction: float
    band: float  # the policy's marker band: stamps there are read in auto mode
    # Not in key(): a document already read keeps its text when only where the models run
    # changes, though readings differ now and then (a character on OpenVINO; ~10 % of lines on
    # CUDA with TF32). The OCR cache of renders keys on the engine's name, which has both.
    backend: str = "auto"  # RAGSPINE_OCR_BACKEND
    device: str = "auto"  # RAGSPINE_OCR_DEVICE

    @classmethod
    def from_settings(cls, s: Settings) -> "OcrOptions":
        return cls(s.ocr, s.ocr_dpi, s.ocr_min_text_chars, s.ocr_min_image_fraction, s.marker_band,
                   s.ocr_backend, s.ocr_device)

    def key(self) -> list[Any]:
        """What changes the text a document is indexed with (part of its content key)."""
        if self.mode == "off":
            return ["off"]
        return [self.mode, self.dpi, self.min_text_chars, self.min_image_fraction, self.band]


@dataclass
class OcrReport:
    """What OCR did for one document (counts only: no text)."""

    pages: int = 0  # pages with at least one line read
    planned: int = 0  # pages with at least one region to read
    lines: int = 0
    seconds: float = 0.0


# The engine of this process (OCR on the ingesting thread, or in a Ray task): the ONNX models
# load once (about a second) and are reused. Worker processes have their own
# (ragspine.indexing.ocr_pool).
_ENGINE: RapidOcrEngine | None = None
_ENGINE_ARGS: tuple[Any, ...] | None = None
_ENGINE_LOCK = threading.Lock()


def _engine(backend: str = "auto", threads: int | None = None, device: str = "cpu") -> RapidOcrEngine:
    global _ENGINE, _ENGINE_ARGS
    with _ENGINE_LOCK:  # called for every page read on this thread: the same arguments, the same engine
        if _ENGINE is None or _ENGINE_ARGS != (backend, threads, device):
            _ENGINE = RapidOcrEngine(backend=backend, threads=threads, device=device)  # type: ignore[arg-type]
            _ENGINE_ARGS = (backend, threads, device)
        return _ENGINE


def _read(page: pymupdf.Page, opts: OcrOptions, cache: OcrCache, part: Part = "all",
          threads: int | None = None) -> PageOcr:
    engine = _engine(opts.backend, threads, opts.device)
    return ocr_page(page, engine, mode=opts.mode, dpi=opts.dpi,  # type: ignore[arg-type]
                    min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction,
                    band=opts.band, cache=cache, part=part)


class OcrStage:
    """Reads the pixels of the pages that need it and merges what it reads into them."""

    def __init__(self, settings: Settings, pool: OcrProcesses | None = None, threads: int | None = None) -> None:
        self.opts = OcrOptions.from_settings(settings)
        #: Worker processes (RAGSPINE_OCR_WORKERS), or None: OCR on the calling thread, with an
        #: engine of ``threads`` inference threads (None: every core).
        self.pool = pool
        self.threads = threads

    def plan(self, parsed: ParsedPDF) -> dict[int, tuple[bool, bool]]:
        """Page number -> (has stamp regions, has content regions) for every page with
        something to read (the plan only: no rendering); see :data:`ragspine.ocr.Part`."""
        o = self.opts
        if o.mode == "off" or parsed.doc is None:
            return {}
        out: dict[int, tuple[bool, bool]] = {}
        for p in parsed.pages:
            page = parsed.doc.load_page(p.number - 1)
            # The text layer is already read: a born-digital page without images costs nothing here.
            regions = plan_page(page, o.mode, o.min_text_chars, o.min_image_fraction, o.band,  # type: ignore[arg-type]
                                text_chars=sum(1 for c in p.text if not c.isspace()), has_images=p.has_images)
            if regions:
                rect = page_rect_unrotated(page)
                stamps = [is_stamp_region(r, rect.width * rect.height, o.min_image_fraction) for r in regions]
                out[p.number] = (any(stamps), not all(stamps))
        return out

    def pages_to_read(self, parsed: ParsedPDF, part: Part = "all") -> list[int]:
        """1-based numbers of the pages with regions of ``part`` to read."""
        plan = self.plan(parsed)
        return [n for n, (stamps, content) in plan.items()
                if part == "all" or (stamps if part == "stamps" else content)]

    def apply(self, parsed: ParsedPDF, *, progress: Progress | None = None, part: Part = "all",
              pages: Sequence[int] | None = None, priority: int = URGENT) -> OcrReport:
        """OCR the pages that need it (of ``pages``, if given; the regions of ``part``) and add
        the lines to ``parsed.pages``; returns counts. ``priority``: the worker pool's
        (:data:`~ragspine.indexing.ocr_pool.URGENT` when a caller waits for it)."""
        t0 = time.perf_counter()
        numbers = self._numbers(parsed, part, pages)
        results = self._run(parsed, numbers, progress, part, priority) if numbers else {}
        report = merge_all(parsed, {n: [(ln.text, ln.box) for ln in r.lines] for n, r in results.items()})
        report.planned = len(numbers)
        report.seconds = time.perf_counter() - t0
        if report.pages:
            logger.info("OCR read %d lines on %d pages in %.1f s", report.lines, report.pages, report.seconds)
        return report

    def _numbers(self, parsed: ParsedPDF, part: Part, pages: Sequence[int] | None) -> list[int]:
        numbers = self.pages_to_read(parsed, part)
        if pages is not None:
            wanted = set(pages)
            numbers = [n for n in numbers if n in wanted]
        return numbers

    def read(self, parsed: ParsedPDF, *, progress: Progress | None = None, part: Part = "all",
             pages: Sequence[int] | None = None) -> dict[int, list[tuple[str, tuple[float, float, float, float]]]]:
        """The OCR lines of every page that needs reading (page number -> text and box in PDF
        points), without changing ``parsed``."""
        numbers = self._numbers(parsed, part, pages)
        results = self._run(parsed, numbers, progress, part) if numbers else {}
        return {n: [(ln.text, ln.box) for ln in r.lines] for n, r in results.items()}

    def _run(self, parsed: ParsedPDF, numbers: Sequence[int], progress: Progress | None,
             part: Part, priority: int = URGENT) -> dict[int, PageOcr]:
        if self.pool is not None and not self.pool.unavailable and parsed.source is not None:
            src = parsed.source if isinstance(parsed.source, (bytes, bytearray)) else str(parsed.source)
            try:
                return self.pool.read(bytes(src) if isinstance(src, bytearray) else src, numbers, self.opts,
                                      progress, part, priority)
            except PoolUnavailable:
                pass  # logged once by the pool: read here instead
        out: dict[int, PageOcr] = {}
        cache = OcrCache()
        assert parsed.doc is not None
        for n in numbers:
            out[n] = _read(parsed.doc.load_page(n - 1), self.opts, cache, part, self.threads)
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
