"""OCR of one PDF page: plan the regions, render them, read them, map the lines back.

:func:`ocr_page` returns the lines read on a page with boxes in PDF points (unrotated page
space, like ``page.get_text``), in reading order, with glued English words split.

Rules, kept simple on purpose:

* Reading order: regions in the order :func:`~ragspine.ocr.plan.plan_page` gives (top to
  bottom, then left to right, as displayed); inside a region, rows top to bottom and lines
  left to right within a row. Two lines share a row when their vertical overlap is at least
  half the smaller height (in the upright render).
* Identical renders are read once: a render's cache key is the engine's name, the image
  shape and the SHA-256 of its pixels, so a logo or background repeated at the same place
  and size on every page costs one OCR per document. The cache (:class:`OcrCache`, LRU) holds
  page text in memory: keep one per document and drop it afterwards.
* A render of one flat colour is not sent to the engine (a blank scan has nothing to read).
* Text-layer duplicates: a line read in any region is dropped when at least half of its box
  is covered by text-layer lines and at least 80 % of its letters and digits (case-folded)
  are found, in order, in those lines' text: what the page already says as text (an image
  that repeats it, a short text page read whole, ``full`` mode on a born-digital page) must
  not be doubled.

Nothing here logs page text: only counts, sizes and times. MuPDF is not thread-safe: call
:func:`ocr_page` for one document from one thread at a time.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np
import pymupdf

from ragspine.ocr.base import Box, OcrEngine, OcrError, OcrInputError, OcrLine
from ragspine.ocr.plan import (
    MAX_SIDE_PX,
    OcrMode,
    Part,
    Region,
    page_rect_unrotated,
    pixel_box_to_page,
    plan_page,
    render_for_ocr,
    select_regions,
)
from ragspine.ocr.words import split_glued

logger = logging.getLogger(__name__)

#: A line of an image region is a text-layer duplicate only if text-layer lines cover at least
#: this share of its box...
DUPLICATE_MIN_COVER = 0.5
#: ...and at least this share of its letters and digits appear, in order, in their text
#: (0.8 tolerates OCR misreadings of one character in five).
DUPLICATE_MIN_MATCH = 0.8
#: Two lines are on one row when they overlap vertically by this share of the smaller height.
_ROW_OVERLAP = 0.5


@dataclass(frozen=True, slots=True)
class PageLine:
    """One line read on a page."""

    text: str  # glued English words split (ragspine.ocr.split_glued)
    box: Box  # PDF points, unrotated page space (like page.get_text), x0, y0, x1, y1
    score: float  # the engine's confidence, 0..1
    region: int  # index into PageOcr.regions


@dataclass(frozen=True, slots=True)
class PageOcr:
    """What :func:`ocr_page` read on one page."""

    lines: tuple[PageLine, ...]  # reading order
    regions: tuple[Region, ...]  # what was planned, reading order
    seconds: float  # wall time of the whole call: plan, render, OCR
    engine_calls: int  # renders sent to the engine (not cached, not blank)
    cache_hits: int  # renders answered from the cache
    duplicates_dropped: int  # image-region lines that repeated the text layer

    @property
    def text(self) -> str:
        """The lines' text, one per line, in reading order."""
        return "\n".join(line.text for line in self.lines)


class OcrCache:
    """A small thread-safe LRU of engine results keyed by render (see the module doc)."""

    def __init__(self, max_entries: int = 64) -> None:
        if max_entries < 1:
            raise OcrInputError(f"OcrCache max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._items: OrderedDict[str, tuple[OcrLine, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[OcrLine, ...] | None:
        with self._lock:
            lines = self._items.get(key)
            if lines is not None:
                self._items.move_to_end(key)
            return lines

    def put(self, key: str, lines: tuple[OcrLine, ...]) -> None:
        with self._lock:
            self._items[key] = lines
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def ocr_page(
    page: pymupdf.Page,
    engine: OcrEngine,
    *,
    mode: OcrMode,
    dpi: float,
    min_text_chars: int,
    min_image_fraction: float,
    band: float = 0.0,
    cache: OcrCache | None = None,
    max_side_px: int = MAX_SIDE_PX,
    part: Part = "all",
) -> PageOcr:
    """OCR the regions :func:`~ragspine.ocr.plan_page` picks on ``page`` with ``engine``,
    rendering each at ``dpi`` (capped at ``max_side_px`` per side); with ``part``, only the
    stamp-sized or only the content regions (:func:`~ragspine.ocr.plan.select_regions`). See
    the module doc."""
    t0 = time.perf_counter()
    regions = plan_page(page, mode, min_text_chars, min_image_fraction, band)
    if part != "all":
        rect = page_rect_unrotated(page)
        regions = select_regions(regions, part, rect.width * rect.height, min_image_fraction)
    # Only text that exists as pixels alone is wanted: what the text layer already says (an
    # image of a table next to its text, a scan under an invisible OCR layer, a short text
    # page read whole) is dropped in every region.
    text_layer = _text_layer_lines(page) if regions else []
    lines: list[PageLine] = []
    calls = hits = dropped = 0
    for index, region in enumerate(regions):
        render = render_for_ocr(page, region.rect, dpi, max_side_px=max_side_px)
        image = render.image  # (h, w, 3) uint8 RGB
        if image.min() == image.max():
            continue
        key = _cache_key(engine, image)
        found = cache.get(key) if cache is not None else None
        if found is None:
            found = tuple(_checked(engine, engine.recognize(image)))
            calls += 1
            if cache is not None:
                cache.put(key, found)
        else:
            hits += 1
        h, w = image.shape[:2]
        for line in _reading_order(found):
            box_pt = pixel_box_to_page(_clip_box(line.box, w, h), render)  # PDF points
            if text_layer and _duplicates_text_layer(line.text, box_pt, text_layer):
                dropped += 1
                continue
            text = split_glued(line.text).strip()
            if text:
                lines.append(PageLine(text=text, box=box_pt, score=line.score, region=index))
    seconds = time.perf_counter() - t0
    logger.debug(
        "page %s: %d OCR regions (%s), %d engine calls, %d cache hits, %d lines, "
        "%d text-layer duplicates dropped, %.2f s",
        page.number + 1 if page.number is not None else "?",
        len(regions),
        ", ".join(r.reason for r in regions) or "none",
        calls,
        hits,
        len(lines),
        dropped,
        seconds,
    )
    return PageOcr(tuple(lines), tuple(regions), seconds, calls, hits, dropped)


def _cache_key(engine: OcrEngine, image: np.ndarray) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(image).data).hexdigest()
    h, w = image.shape[:2]
    return f"{engine.name}|{w}x{h}|{digest}"


def _checked(engine: OcrEngine, lines: object) -> list[OcrLine]:
    if not isinstance(lines, list) or not all(isinstance(x, OcrLine) for x in lines):
        raise OcrError(
            f"OCR engine {engine.name!r} returned {type(lines).__name__}; an engine's recognize "
            "must return a list of ragspine.ocr.OcrLine"
        )
    return lines


def _clip_box(box: Box, w: int, h: int) -> Box:
    """``box`` (pixels) clipped to a ``w`` x ``h`` image."""
    x0, y0, x1, y1 = box
    return (min(max(x0, 0.0), w), min(max(y0, 0.0), h), min(max(x1, 0.0), w), min(max(y1, 0.0), h))


def _reading_order(lines: Iterable[OcrLine]) -> list[OcrLine]:
    """Rows top to bottom, lines left to right within a row (boxes in pixels of an upright
    render); see the module doc."""
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1], ln.box[0])):
        if rows and _same_row(rows[-1][0].box, line.box):
            rows[-1].append(line)
        else:
            rows.append([line])
    return [ln for row in rows for ln in sorted(row, key=lambda ln: ln.box[0])]


def _same_row(a: Box, b: Box) -> bool:
    overlap = min(a[3], b[3]) - max(a[1], b[1])
    smaller = min(a[3] - a[1], b[3] - b[1])
    return smaller > 0 and overlap >= _ROW_OVERLAP * smaller


def _text_layer_lines(page: pymupdf.Page) -> list[tuple[str, Box]]:
    """The page's text-layer lines: text and box (PDF points, unrotated page space)."""
    raw = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    out: list[tuple[str, Box]] = []
    for block in raw.get("blocks", []):
        for ln in block.get("lines", []):
            text = "".join(sp.get("text", "") for sp in ln.get("spans", []))
            if text.strip():
                x0, y0, x1, y1 = ln["bbox"]
                out.append((text, (float(x0), float(y0), float(x1), float(y1))))
    return out


def _duplicates_text_layer(text: str, box: Box, layer: list[tuple[str, Box]]) -> bool:
    """Whether an OCR line (``box`` in PDF points) repeats text-layer lines; see the module doc."""
    wanted = _normalize(text)
    area = (box[2] - box[0]) * (box[3] - box[1])
    if not wanted or area <= 0:
        return False
    covered = 0.0
    parts: list[str] = []
    for t, b in layer:
        ix = min(box[2], b[2]) - max(box[0], b[0])
        iy = min(box[3], b[3]) - max(box[1], b[1])
        if ix > 0 and iy > 0:
            covered += ix * iy
            parts.append(t)
    if covered < DUPLICATE_MIN_COVER * area:
        return False
    have = _normalize("".join(parts))
    matcher = SequenceMatcher(None, wanted, have, autojunk=False)
    matched = sum(m.size for m in matcher.get_matching_blocks())
    return matched >= DUPLICATE_MIN_MATCH * len(wanted)


def _normalize(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())
