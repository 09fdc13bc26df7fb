"""Test PDFs whose text exists only as pixels: scans, raster charts and stamps (``import scans``).

Everything is drawn here with PyMuPDF (built-in Helvetica; ``china-s`` for Chinese): a page is
laid out as text on a scratch page, rasterised, and the picture placed on a page of the PDF
that is returned - so that page has no text layer. Sizes are PDF points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pymupdf

A4 = (595.0, 842.0)
RED = (0.85, 0.1, 0.1)


@dataclass
class Line:
    """Text drawn at ``(x, y)`` (baseline, points), ``size`` points, ``rotate`` 0 or 90."""

    text: str
    x: float = 72.0
    y: float = 200.0
    size: float = 18.0
    color: tuple[float, float, float] = (0, 0, 0)
    rotate: int = 0


@dataclass
class ScanPage:
    lines: list[Line]
    #: Rotation of the PDF page (a scan stored sideways and turned upright by /Rotate).
    rotation: int = 0
    #: Born-digital text (a real text layer) drawn on top of the picture.
    text_layer: list[Line] = field(default_factory=list)


def _font(text: str) -> str:
    return "china-s" if any("\u4e00" <= c <= "\u9fff" for c in text) else "helv"


def _draw(page: pymupdf.Page, lines: Sequence[Line]) -> None:
    for ln in lines:
        page.insert_text((ln.x, ln.y), ln.text, fontsize=ln.size, fontname=_font(ln.text), color=ln.color,
                         rotate=ln.rotate)


def picture(lines: Sequence[Line], size: tuple[float, float] = A4, dpi: int = 150,
            colorspace: pymupdf.Colorspace = pymupdf.csRGB) -> pymupdf.Pixmap:
    """``lines`` laid out on a ``size`` page and rasterised at ``dpi``."""
    scratch = pymupdf.open()
    page = scratch.new_page(width=size[0], height=size[1])
    _draw(page, lines)
    pix = page.get_pixmap(dpi=dpi, colorspace=colorspace, alpha=False)
    scratch.close()
    return pix


def scan_pdf(pages: Sequence[ScanPage], size: tuple[float, float] = A4, dpi: int = 150) -> bytes:
    """A PDF of scanned pages: each page is one picture of its lines (no text layer), turned by
    ``rotation``, with ``text_layer`` lines as real text on top."""
    doc = pymupdf.open()
    for spec in pages:
        w, h = size if spec.rotation in (0, 180) else (size[1], size[0])
        page = doc.new_page(width=w, height=h)
        pix = picture(spec.lines, (w, h), dpi)
        page.insert_image(page.rect, pixmap=pix)
        _draw(page, spec.text_layer)
        if spec.rotation:
            page.set_rotation(spec.rotation)
    out = doc.tobytes()
    doc.close()
    return out


def stamped_pdf(bodies: Sequence[str], stamped: dict[int, tuple[float, float, float, float]],
                stamp_text: str = "RESTRICTED") -> bytes:
    """Born-digital pages (a text layer: one body paragraph each, header "Harbour report") with
    a picture of ``stamp_text`` in red pasted at ``stamped[page_number]`` (a rect in points):
    the only classification mark of that page exists in pixels."""
    doc = pymupdf.open()
    for n, body in enumerate(bodies, start=1):
        page = doc.new_page(width=A4[0], height=A4[1])
        page.insert_text((72, 60), "Harbour report", fontsize=11, fontname="helv")
        page.insert_textbox(pymupdf.Rect(72, 300, 523, 600), body, fontsize=11, fontname="helv")
        if n in stamped:
            r = pymupdf.Rect(stamped[n])
            stamp = picture([Line(stamp_text, 6, r.height * 0.78, r.height * 0.7, RED)], (r.width, r.height), 200)
            page.insert_image(r, pixmap=stamp)
    out = doc.tobytes()
    doc.close()
    return out
