"""PDF → pages: text blocks with bounding boxes (PDF points), page text, rendering.

PyMuPDF does the parsing. Each bad input raises its own error naming the problem:
:class:`NotAPDFError`, :class:`CorruptPDFError`, :class:`EncryptedPDFError`,
:class:`EmptyPDFError`, :class:`OversizeError`.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf

from ragspine.errors import CorruptPDFError, EmptyPDFError, EncryptedPDFError, NotAPDFError, OversizeError
from ragspine.indexing.tables import TABLE_MODES, PageTable, read_tables, table_regions
from ragspine.scoring.tokenizer import is_cjk_char

logger = logging.getLogger(__name__)
# MuPDF prints its errors and warnings (e.g. "could not parse color space") to stdout, which
# corrupts machine-readable CLI output such as `ragspine eval --json`: send them to logging.
pymupdf.set_messages(pylogging=True, pylogging_name="ragspine.mupdf", pylogging_level=logging.INFO)

BBox = tuple[float, float, float, float]
#: Separator between paragraphs (text blocks) in a page's text.
PARAGRAPH_SEP = "\n\n"
_PDF_MAGIC_WINDOW = 1024  # the spec lets "%PDF-" start anywhere in the first 1024 bytes


@dataclass(frozen=True)
class TextBlock:
    """A paragraph: its text, bbox in PDF points (x0, y0, x1, y1; origin top-left), and its
    character span ``[start, end)`` in the page text."""

    text: str
    bbox: BBox
    start: int
    end: int
    #: Where the text came from: the PDF's text layer (``pdf``) or OCR of its pixels (``ocr``).
    source: str = "pdf"


@dataclass
class PageContent:
    number: int  # 1-based physical page
    width: float
    height: float
    text: str
    blocks: list[TextBlock]
    #: Every text line with its bbox (used by the RESTRICTED marker detection).
    lines: list[tuple[str, BBox]] = field(default_factory=list)
    has_images: bool = False
    has_drawings: bool = False
    #: Lines read by OCR (PDF points), in reading order; the policy reads them as well, and
    #: a short one anywhere on the page counts as a stamp.
    ocr_lines: list[tuple[str, BBox]] = field(default_factory=list)
    #: The tables read on the page (RAGSPINE_TABLES): their rows are paragraphs of ``text`` in
    #: place of the text blocks inside each table's area (``row_spans`` says where).
    tables: list[PageTable] = field(default_factory=list)


@dataclass(frozen=True)
class SkippedImage:
    """An embedded image over RAGSPINE_MAX_IMAGE_PIXELS: never decoded, blanked before any
    render (thumbnails, page images, OCR); its pages are indexed from their text layer."""

    pages: tuple[int, ...]
    width: int
    height: int

    def note(self, limit: int) -> str:
        where = ", ".join(map(str, self.pages))
        return (f"page{'s' if len(self.pages) > 1 else ''} {where}: an embedded image of {self.width} x "
                f"{self.height} px ({self.width * self.height / 1e6:.0f} Mpx) was not decoded; the limit is "
                f"{limit / 1e6:.0f} Mpx (RAGSPINE_MAX_IMAGE_PIXELS): the page is indexed from its text, "
                "without that image in its thumbnail or OCR")


@dataclass
class ParsedPDF:
    #: The open PDF (renders thumbnails); ``None`` for plain text ingested without a PDF.
    doc: pymupdf.Document | None
    pages: list[PageContent]
    pdf_metadata: dict[str, str] = field(default_factory=dict)
    #: What the PDF was opened from (bytes or a path): render worker processes open it again.
    #: With a skipped image, the bytes of the PDF with it blanked.
    source: bytes | str | Path | None = None
    skipped_images: list[SkippedImage] = field(default_factory=list)

    def close(self) -> None:
        if self.doc is not None:
            self.doc.close()


def _join_lines(raw: str) -> str:
    """One paragraph from a block's lines: wrapped lines join with a space, except between
    two CJK characters (Chinese does not put spaces between words)."""
    lines = [ln.strip() for ln in raw.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return ""
    out = lines[0]
    for ln in lines[1:]:
        if out and is_cjk_char(out[-1]) and is_cjk_char(ln[0]):
            out += ln
        elif out.endswith("-") and len(out) > 1 and out[-2].isalpha() and ln[0].islower():
            out = out[:-1] + ln  # de-hyphenate a word broken across lines
        else:
            out += " " + ln
    return out


def sniff_pdf(head: bytes) -> None:
    """Raise :class:`NotAPDFError` unless ``head`` (the file's first bytes) looks like a PDF."""
    if not head:
        raise EmptyPDFError("the file is empty (0 bytes)")
    if b"%PDF-" not in head[:_PDF_MAGIC_WINDOW]:
        shown = head[:16]
        raise NotAPDFError(
            f"the file is not a PDF: it does not start with '%PDF-' (first bytes: {shown!r})"
        )


def open_pdf(
    source: bytes | str | Path,
    *,
    max_pages: int = 3000,
    max_page_side_pt: float = 14400.0,
    max_image_pixels: int = 64_000_000,
    tables: str = "auto",
    read_pages: PagesReader | None = None,
) -> ParsedPDF:
    """Open and parse a PDF. ``source`` is the file's bytes or a path. An embedded image of
    more than ``max_image_pixels`` is blanked in the open document before anything renders
    (MuPDF would decode it at full size first, whatever the render's own size cap).
    ``tables`` (RAGSPINE_TABLES): ``auto`` reads the tables of the pages whose text lines look
    tabular (:mod:`ragspine.indexing.tables`) and puts their rows in the page text, ``off``
    leaves every page as its text blocks. ``read_pages(source, pages, max_page_side_pt, tables)``
    reads the pages elsewhere (worker processes: :mod:`ragspine.indexing.parse`) once the file
    passed its checks, or answers None to have them read here."""
    if tables not in TABLE_MODES:
        raise ValueError(f"tables must be one of {', '.join(TABLE_MODES)}, got {tables!r}")
    if isinstance(source, (str, Path)):
        with open(source, "rb") as fh:
            head = fh.read(_PDF_MAGIC_WINDOW)
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - _PDF_MAGIC_WINDOW))
            tail = fh.read()
    else:
        head = bytes(source[:_PDF_MAGIC_WINDOW])
        tail = bytes(source[-_PDF_MAGIC_WINDOW:])
    sniff_pdf(head)
    try:
        if isinstance(source, (str, Path)):
            doc = pymupdf.open(str(source), filetype="pdf")
        else:
            doc = pymupdf.open(stream=source, filetype="pdf")
    except Exception as exc:
        raise CorruptPDFError(f"the PDF is corrupt and cannot be opened: {exc}") from exc
    try:
        if doc.needs_pass:
            raise EncryptedPDFError(
                "the PDF is encrypted with a password; upload an unencrypted copy"
            )
        if doc.is_repaired:
            if b"%%EOF" not in tail:
                # A cut-off upload: MuPDF "repairs" it into fewer or emptier pages, which
                # would be indexed silently as if complete.
                raise CorruptPDFError(
                    "the PDF is truncated: it has no '%%EOF' end marker and its cross-reference "
                    "table is missing; upload the complete file"
                )
            logger.info("PDF had a damaged structure and was repaired on open")
        n = doc.page_count
        if n == 0:
            raise EmptyPDFError("the PDF has 0 pages")
        if n > max_pages:
            raise OversizeError(
                f"the PDF has {n} pages; the limit is {max_pages} (RAGSPINE_MAX_PAGES)"
            )
        pages = read_pages(source, n, max_page_side_pt, tables == "auto") if read_pages is not None else None
        if pages is None:
            pages = [_read_page(doc, i, max_page_side_pt, tables=tables == "auto") for i in range(n)]
        skipped = _blank_oversized_images(doc, pages, max_image_pixels)
        if not any(p.text.strip() or p.has_images or p.has_drawings for p in pages):
            if skipped:
                big = max(skipped, key=lambda s: s.width * s.height)
                raise OversizeError(
                    f"the PDF holds no text, only images over the decode limit: page {big.pages[0]} has an "
                    f"image of {big.width} x {big.height} px ({big.width * big.height / 1e6:.0f} Mpx); the "
                    f"limit is {max_image_pixels / 1e6:.0f} Mpx (RAGSPINE_MAX_IMAGE_PIXELS)")
            raise EmptyPDFError(f"the PDF has {n} page(s) but no text and no images")
        if skipped:
            source = doc.tobytes()  # what render and OCR worker processes open: blanked too
        meta = {k: v for k, v in (doc.metadata or {}).items() if isinstance(v, str) and v.strip()}
        return ParsedPDF(doc=doc, pages=pages, pdf_metadata=meta, source=source, skipped_images=skipped)
    except BaseException:
        doc.close()
        raise


#: Reads every page of a PDF elsewhere: ``(source, pages, max_page_side_pt, tables) -> pages``,
#: or None to have :func:`open_pdf` read them itself.
PagesReader = Callable[[bytes | str | Path, int, float, bool], "list[PageContent] | None"]


def parse_pages_worker(path: str, start: int, stop: int, max_side: float, tables: bool) -> list[PageContent]:
    """In a worker process: pages ``[start, stop)`` (0-based) of the PDF at ``path``, read as
    :func:`open_pdf` reads them (:mod:`ragspine.indexing.parse`); a page's error is raised."""
    pymupdf.TOOLS.store_shrink(100)  # MuPDF's store of the documents before (as render_pages_worker)
    with pymupdf.open(path, filetype="pdf") as doc:
        return [_read_page(doc, i, max_side, tables=tables) for i in range(start, stop)]


def _blank_oversized_images(doc: pymupdf.Document, pages: list[PageContent], limit: int) -> list[SkippedImage]:
    """Replace every image over ``limit`` pixels (by its declared size: nothing is decoded) with
    a blank 1 x 1 one, on every page that shows it; a page left with no other image loses its
    ``has_images`` (there is nothing to read with OCR)."""
    big: dict[int, tuple[int, int, list[int]]] = {}
    for p in pages:
        images = doc.load_page(p.number - 1).get_images(full=True)
        over = [(xref, w, h) for xref, _smask, w, h, *_ in images if w * h > limit]
        for xref, w, h in over:
            big.setdefault(xref, (w, h, []))[2].append(p.number)
        if over and len(over) == len({i[0] for i in images}):
            p.has_images = False
    for xref, (_w, _h, numbers) in big.items():
        doc.load_page(numbers[0] - 1).delete_image(xref)  # one xref: every page showing it
    return [SkippedImage(tuple(numbers), w, h) for w, h, numbers in big.values()]


def _read_page(doc: pymupdf.Document, index: int, max_side: float, *, tables: bool = False) -> PageContent:
    try:
        page = doc.load_page(index)
        rect = page.rect
        if rect.width > max_side or rect.height > max_side:
            raise OversizeError(
                f"page {index + 1} is {rect.width:.0f} x {rect.height:.0f} pt; the largest side "
                f"allowed is {max_side:.0f} pt (RAGSPINE_MAX_PAGE_SIDE_PT)"
            )
        # One extraction gives both paragraphs (blocks) and their lines; the policy needs
        # line positions so that a marker in a header line is told from prose that happens
        # to run through the band.
        # One text page serves the blocks and, on a page whose lines look tabular, its words.
        textpage = page.get_textpage(flags=pymupdf.TEXTFLAGS_TEXT)
        raw = page.get_text("dict", sort=True, textpage=textpage)
        has_images = bool(page.get_images(full=False))
    except OversizeError:
        raise
    except Exception as exc:
        raise CorruptPDFError(f"page {index + 1} of the PDF is corrupt: {exc}") from exc
    lines: list[tuple[str, BBox]] = []
    paragraphs: list[tuple[str, BBox, list[BBox]]] = []  # text, bbox, its lines' boxes
    for b in raw.get("blocks", []):
        if b.get("type", 0) != 0:
            has_images = True
            continue
        line_texts = []
        line_boxes: list[BBox] = []
        for ln in b.get("lines", []):
            t = "".join(sp.get("text", "") for sp in ln.get("spans", []))
            if t.strip():
                line_texts.append(t)
                x0, y0, x1, y1 = ln["bbox"]
                line_boxes.append((float(x0), float(y0), float(x1), float(y1)))
                lines.append((t, line_boxes[-1]))
        text = _join_lines("\n".join(line_texts))
        if not text:
            continue
        x0, y0, x1, y1 = b["bbox"]
        paragraphs.append((text, (float(x0), float(y0), float(x1), float(y1)), line_boxes))
    found: list[PageTable] = []
    if tables:
        regions = table_regions(lines)
        if regions:
            try:
                found = read_tables(textpage.extractWORDS(), regions, lines)
            except Exception as exc:  # the finder failing on one odd page must not fail the PDF
                logger.warning("page %d: reading its tables failed (%s); kept as text blocks", index + 1, exc)
                found = []
    blocks: list[TextBlock] = []
    parts: list[str] = []
    spans: list[list[tuple[int, int]]] = [[] for _ in found]
    pos = 0
    for text, box, table in _with_tables(paragraphs, found):
        if parts:
            pos += len(PARAGRAPH_SEP)
        blocks.append(TextBlock(text, box, pos, pos + len(text)))
        if table is not None:
            spans[table].append((pos, pos + len(text)))
        parts.append(text)
        pos += len(text)
    page_text = PARAGRAPH_SEP.join(parts)
    found = [replace(t, row_spans=tuple(sp)) for t, sp in zip(found, spans, strict=True)]
    has_drawings = False
    if not page_text and not has_images:
        try:
            has_drawings = bool(page.get_cdrawings())
        except Exception:
            has_drawings = False
    return PageContent(
        number=index + 1,
        width=float(rect.width),
        height=float(rect.height),
        text=page_text,
        blocks=blocks,
        lines=lines,
        has_images=has_images,
        has_drawings=has_drawings,
        tables=found,
    )


def _inside(box: BBox, area: BBox) -> bool:
    """The middle of ``box`` lies in ``area`` (grown by a point: PyMuPDF's line and word
    boxes differ by fractions of one)."""
    xm, ym = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return area[0] - 1 <= xm <= area[2] + 1 and area[1] - 1 <= ym <= area[3] + 1


def _with_tables(
    paragraphs: list[tuple[str, BBox, list[BBox]]], tables: list[PageTable],
) -> Iterator[tuple[str, BBox, int | None]]:
    """The page's paragraphs in reading order, each with the index of the table it is a row of
    (``None`` for a text block). A text block every line of which lies in a row of a table gives
    way to that table's rows, which take the place of the first such block (or, when there is
    none, of the first block below the table's top). A block only partly in a table stays:
    its text is never lost, at worst a few words are read twice."""
    if not tables:
        yield from ((t, b, None) for t, b, _lines in paragraphs)
        return
    owner = [next((k for k, tab in enumerate(tables)
                   if all(any(_inside(ln, row) for row in tab.row_boxes) for ln in lines)), None)
             for _t, _b, lines in paragraphs]
    anchor: dict[int, int] = {}
    for i, k in enumerate(owner):
        if k is not None:
            anchor.setdefault(k, i)
    for k, tab in enumerate(tables):
        if k not in anchor:
            below = [i for i, (_t, b, _l) in enumerate(paragraphs) if owner[i] is None and b[1] >= tab.bbox[1]]
            anchor[k] = below[0] if below else len(paragraphs)
    at: dict[int, list[int]] = {}
    for k, i in sorted(anchor.items(), key=lambda ki: (ki[1], tables[ki[0]].bbox[1])):
        at.setdefault(i, []).append(k)
    for i in range(len(paragraphs) + 1):
        for k in at.get(i, []):
            yield from ((t, b, k) for t, b in zip(tables[k].row_texts, tables[k].row_boxes, strict=True))
        if i < len(paragraphs) and owner[i] is None:
            yield (paragraphs[i][0], paragraphs[i][1], None)


def _render(doc: pymupdf.Document, number: int, dpi: int, max_px: int) -> pymupdf.Pixmap:
    """RGB pixmap of 1-based page ``number`` at ``dpi``, scaled down so no side exceeds ``max_px``."""
    page = doc.load_page(number - 1)
    zoom = dpi / 72.0
    longest = max(page.rect.width, page.rect.height) * zoom
    if longest > max_px:
        zoom *= max_px / longest
    return page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False, colorspace=pymupdf.csRGB)


def render_page_png(doc: pymupdf.Document, number: int, dpi: int, max_px: int) -> bytes:
    """PNG of 1-based page ``number`` at ``dpi``, scaled down so no side exceeds ``max_px``."""
    return encode_png(_render(doc, number, dpi, max_px))


def render_page_image(doc: pymupdf.Document, number: int, dpi: int, max_px: int) -> Any:
    """The page as an RGB ``PIL.Image`` for a page model (PIL comes with the ``gpu`` extra)."""
    from PIL import Image

    return Image.fromarray(_rgb_array(_render(doc, number, dpi, max_px)), "RGB")


def _rgb_array(pix: pymupdf.Pixmap) -> np.ndarray:
    """``(h, w, 3)`` uint8 copy of an RGB pixmap's samples. A copy, always: ``samples_mv`` does
    not keep the pixmap alive, and a view (what ``ascontiguousarray`` returns when the rows have
    no padding) read after the pixmap is freed shows whatever reused that memory."""
    rows = np.frombuffer(pix.samples_mv, dtype=np.uint8).reshape(pix.height, pix.stride)
    return rows[:, : pix.width * 3].reshape(pix.height, pix.width, 3).copy()


# -- render worker processes (MuPDF is not thread-safe; processes render pages in parallel) --

_WORKER_DOCS: dict[str, pymupdf.Document] = {}


def render_pages_worker(
    key: str, source: bytes | str, numbers: list[int], thumb_dpi: int, thumb_max_px: int,
    image_dpi: int, image_max_px: int, want_image: bool = True,
) -> list[tuple[bytes, np.ndarray | None]]:
    """In a worker process: thumbnail PNG and model-image RGB array ``(h, w, 3)`` of each page
    (None without ``want_image``: thumbnails alone, for a library without a page model).
    The worker keeps the last documents it opened (by ``key``), so a document's batches reuse
    one open. Runs only on pages the policy kept: the caller passes their numbers."""
    doc = _WORKER_DOCS.get(key)
    if doc is None:
        while len(_WORKER_DOCS) >= 2:
            _WORKER_DOCS.pop(next(iter(_WORKER_DOCS))).close()
        # MuPDF keeps decoded images and fonts in a store of up to 256 MB a process, and a worker
        # that renders document after document filled it: 441 MB peak over MMLongBench's
        # thumbnails, 255 MB emptying it at each new document, in the same time (26.3-27.4 s
        # against 26.4-26.6 s, one process, 2 cores). Within a document its pages share them.
        pymupdf.TOOLS.store_shrink(100)
        doc = (pymupdf.open(source, filetype="pdf") if isinstance(source, str)
               else pymupdf.open(stream=source, filetype="pdf"))
        _WORKER_DOCS[key] = doc
    out = []
    for n in numbers:
        png = encode_png(_render(doc, n, thumb_dpi, thumb_max_px))
        out.append((png, _rgb_array(_render(doc, n, image_dpi, image_max_px)) if want_image else None))
    return out


#: zlib level of thumbnails. MuPDF's own PNG writer compresses harder: on MMLongBench pages
#: (2 cores) it spent ~14 ms a page against ~5 ms here, for files within 3% of the size.
PNG_ZLIB_LEVEL = 3


def encode_png(pix: pymupdf.Pixmap) -> bytes:
    """PNG of an 8-bit gray or RGB pixmap without alpha (filter 0, zlib ``PNG_ZLIB_LEVEL``);
    other pixmaps go through MuPDF's writer."""
    if pix.alpha or pix.n not in (1, 3) or pix.width < 1 or pix.height < 1:
        return pix.tobytes("png")
    w, h, n = pix.width, pix.height, pix.n
    rows = np.empty((h, w * n + 1), dtype=np.uint8)
    rows[:, 0] = 0  # filter type "None" for every scanline
    rows[:, 1:] = np.frombuffer(pix.samples_mv, dtype=np.uint8).reshape(h, pix.stride)[:, : w * n]

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", w, h, 8, 0 if n == 1 else 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), PNG_ZLIB_LEVEL))
        + chunk(b"IEND", b"")
    )


def pdf_info(parsed: ParsedPDF) -> dict[str, Any]:
    return {"pages": len(parsed.pages), **parsed.pdf_metadata}
