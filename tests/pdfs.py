"""Test PDFs built with PyMuPDF, in memory, in a few milliseconds each.

Every builder returns the file's bytes. Pages are described by :class:`Page`: a list of
paragraphs (each drawn in its own text box, so PyMuPDF reports one text block per paragraph),
an optional header and footer line (drawn inside the top and bottom marker bands, where the
RESTRICTED policy looks for classification markers), and an optional page size in points.
Text containing CJK characters is drawn with the built-in ``china-s`` font.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pymupdf

A4 = (595.0, 842.0)
#: Left/right margin and the top of the body area, in points. The body starts well below the
#: default marker band (12 % of 842 pt = 101 pt) so body text never counts as a header.
MARGIN = 72.0
BODY_TOP = 160.0
#: Baselines of the header and footer lines, in points from the top / bottom edge.
HEADER_Y = 40.0
FOOTER_FROM_BOTTOM = 30.0

_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

#: Bytes that are certainly not a PDF (a PNG signature and some padding).
NOT_A_PDF = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
#: "%PDF-" followed by garbage: passes the magic-number sniff, cannot be parsed.
GARBAGE_AFTER_MAGIC = b"%PDF-1.7\n" + bytes(range(256)) * 16


def has_cjk(text: str) -> bool:
    return bool(_CJK_RE.search(text))


@dataclass
class Page:
    paragraphs: list[str] = field(default_factory=list)
    header: str | None = None
    footer: str | None = None
    size: tuple[float, float] = A4
    fontsize: float = 11.0


def _fontname(text: str) -> str:
    return "china-s" if has_cjk(text) else "helv"


def draw_page(doc: pymupdf.Document, spec: Page) -> list[pymupdf.Rect]:
    """Draw ``spec`` as a new last page of ``doc``; returns the rect of each paragraph box."""
    w, h = spec.size
    page = doc.new_page(width=w, height=h)
    if spec.header:
        page.insert_text((MARGIN, HEADER_Y), spec.header, fontsize=9, fontname=_fontname(spec.header))
    if spec.footer:
        page.insert_text(
            (MARGIN, h - FOOTER_FROM_BOTTOM), spec.footer, fontsize=9, fontname=_fontname(spec.footer)
        )
    rects: list[pymupdf.Rect] = []
    y = min(BODY_TOP, h * 0.2)
    bottom_limit = h - 60.0
    for para in spec.paragraphs:
        rect = pymupdf.Rect(MARGIN, y, w - MARGIN, bottom_limit)
        rc = page.insert_textbox(rect, para, fontsize=spec.fontsize, fontname=_fontname(para))
        if rc < 0:
            raise ValueError(f"paragraph does not fit on the page ({rc:.0f} pt short): {para[:40]!r}")
        # PyMuPDF's leftover height can under-count the box's last line by one: allow two
        # extra line heights in the rect, and leave a clear gap before the next paragraph so
        # each paragraph stays its own text block.
        used = rect.height - rc + spec.fontsize * 2.5
        rects.append(pymupdf.Rect(MARGIN, y, w - MARGIN, y + used))
        y += used + spec.fontsize * 1.5
    return rects


def build_pdf(
    pages: Sequence[Page | str], *, title: str | None = None
) -> tuple[bytes, list[list[tuple[float, float, float, float]]]]:
    """A PDF with one page per item (a plain string is a one-paragraph page), and per page
    the rects (PDF points, origin top-left) where text was drawn: header, paragraphs, footer."""
    doc = pymupdf.open()
    layout: list[list[tuple[float, float, float, float]]] = []
    for spec in pages:
        spec = spec if isinstance(spec, Page) else Page([spec])
        rects = [tuple(r) for r in draw_page(doc, spec)]
        w, h = spec.size
        if spec.header:
            rects.append((MARGIN, HEADER_Y - 12.0, w, HEADER_Y + 4.0))
        if spec.footer:
            rects.append((MARGIN, h - FOOTER_FROM_BOTTOM - 12.0, w, h - FOOTER_FROM_BOTTOM + 4.0))
        layout.append(rects)  # type: ignore[arg-type]
    if title is not None:
        doc.set_metadata({"title": title})
    data = doc.tobytes()
    doc.close()
    return data, layout


def make_pdf(pages: Sequence[Page | str], *, title: str | None = None) -> bytes:
    """A PDF with one page per item (a plain string is a one-paragraph page)."""
    return build_pdf(pages, title=title)[0]


def blank_pdf(n_pages: int = 3) -> bytes:
    """Pages with no text, no images, no drawings."""
    doc = pymupdf.open()
    for _ in range(n_pages):
        doc.new_page()
    data = doc.tobytes()
    doc.close()
    return data


def encrypted_pdf(tmp_dir: Path, pages: Sequence[Page | str] = ("secret words inside",)) -> bytes:
    """An AES-256 PDF that needs a user password to open."""
    doc = pymupdf.open(stream=make_pdf(pages), filetype="pdf")
    path = Path(tmp_dir) / "encrypted.pdf"
    doc.save(str(path), encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="x", owner_pw="y")
    doc.close()
    return path.read_bytes()


def truncated(data: bytes, fraction: float) -> bytes:
    """The first ``fraction`` of a PDF's bytes, as an interrupted upload leaves it."""
    return data[: max(6, int(len(data) * fraction))]


def oversize_page_pdf(side_pt: float) -> bytes:
    """A one-page PDF whose page is ``side_pt`` points wide (and an ordinary height)."""
    return make_pdf([Page(["a very wide page with some words"], size=(side_pt, 600.0))])


def page_texts(data: bytes) -> list[str]:
    """Each page's text as PyMuPDF itself extracts it (independent of ragspine's parser)."""
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        return [p.get_text("text") for p in doc]
    finally:
        doc.close()


def squash(text: str) -> str:
    """Text without any whitespace: line wrapping differs between extractors, characters not."""
    return re.sub(r"\s+", "", text)


def words(n: int, stem: str = "filler") -> str:
    """``n`` distinct-looking but predictable filler words."""
    return " ".join(f"{stem}{chr(97 + i % 26)}{chr(97 + (i // 26) % 26)}" for i in range(n))


def join(parts: Iterable[str]) -> str:
    return " ".join(parts)
