"""Helpers for the OCR tests: test pages built with PyMuPDF, and a spy engine.

Every page is made here, in memory: text with PyMuPDF's built-in fonts (``helv``, ``hebo``,
and ``china-s`` for Chinese), images from pixmaps. A page "without a text layer" is a
rasterised copy of a text page, placed as one image on a new page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pymupdf

from ragspine.ocr import OcrLine

A4 = (595.0, 842.0)  # PDF points
Box = tuple[float, float, float, float]

BODY = "Revenue grew 12% in 2021 on strong demand for cloud services."


def new_page(doc: pymupdf.Document, size: tuple[float, float] = A4) -> pymupdf.Page:
    return doc.new_page(width=size[0], height=size[1])


def text_page(doc: pymupdf.Document, n_lines: int = 20, size: tuple[float, float] = A4) -> pymupdf.Page:
    """A born-digital page: ``n_lines`` of :data:`BODY` at 10 pt, from y = 100 pt."""
    page = new_page(doc, size)
    for i in range(n_lines):
        page.insert_text((72, 100 + 14 * i), BODY, fontsize=10, fontname="helv")
    return page


def pattern_pixmap(w: int, h: int, seed: int = 0) -> pymupdf.Pixmap:
    """An RGB ``w`` x ``h`` pixel pixmap of random gray blocks (never one flat colour)."""
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(h, w, 1), dtype=np.uint8).repeat(3, axis=2)  # (h, w, 3)
    return pymupdf.Pixmap(pymupdf.csRGB, w, h, arr.tobytes(), False)


def quadrant_pixmap() -> pymupdf.Pixmap:
    """A 40 x 20 pixel RGB pixmap: left half black, right half white, with a red top-left
    quarter, so any turn or flip of it shows."""
    arr = np.full((20, 40, 3), 255, dtype=np.uint8)  # (h, w, 3)
    arr[:, :20] = 0
    arr[:10, :20] = (255, 0, 0)
    return pymupdf.Pixmap(pymupdf.csRGB, 40, 20, arr.tobytes(), False)


def add_image(page: pymupdf.Page, rect: Box, pix: pymupdf.Pixmap | None = None) -> None:
    """Place ``pix`` (default: a 40 x 20 pattern) stretched to fill ``rect`` (PDF points)."""
    pix = pix if pix is not None else pattern_pixmap(40, 20)
    page.insert_image(pymupdf.Rect(rect), pixmap=pix, keep_proportion=False)


def rasterised(src: pymupdf.Page, dpi: int = 150) -> pymupdf.Document:
    """A one-page document whose page shows ``src`` as one image and has no text layer."""
    pix = src.get_pixmap(dpi=dpi, colorspace=pymupdf.csRGB, alpha=False)
    doc = pymupdf.open()
    page = doc.new_page(width=src.rect.width, height=src.rect.height)
    page.insert_image(page.rect, pixmap=pix)
    assert not page.get_text("text").strip()
    return doc


def word_box(page: pymupdf.Page, word: str) -> Box:
    """The text-layer box (PDF points) of the first word ``word`` on ``page``."""
    for w in page.get_text("words"):
        if w[4] == word:
            return (w[0], w[1], w[2], w[3])
    raise AssertionError(f"{word!r} is not on the page")


class SpyEngine:
    """An OCR engine that returns what ``reply`` says for each image and counts its calls."""

    def __init__(
        self,
        reply: Callable[[np.ndarray], list[OcrLine]] | Sequence[OcrLine] = (),
        name: str = "spy",
    ) -> None:
        self.name = name
        self._reply = reply
        self.calls = 0
        self.shapes: list[tuple[int, ...]] = []

    def recognize(self, image: np.ndarray) -> list[OcrLine]:
        self.calls += 1
        self.shapes.append(image.shape)
        if callable(self._reply):
            return list(self._reply(image))
        return list(self._reply)
