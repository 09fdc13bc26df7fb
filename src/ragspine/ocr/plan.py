"""What to OCR on a PDF page, and rendering it.

OCR costs seconds per region on CPU (measured: 6-13 s for a whole A4 page at 150 dpi on two
busy cores, 3.4 s per image region), so it is targeted. :func:`plan_page` picks the regions:

* ``mode="full"``: the whole page, always.
* ``mode="auto"``: the whole page if its text layer has fewer than ``min_text_chars``
  non-space characters (a scan, or a page of outlined text; a scan that already carries an
  invisible OCR text layer counts as text); otherwise the raster images,
  after merging images that overlap or touch (a slide exported as overlapping strips is one
  picture), that cover at least ``min_image_fraction`` of the page, and, with ``band`` > 0,
  every image of at least ``MIN_BAND_IMAGE_FRACTION`` of the page that reaches into the top
  or bottom ``band`` of the page (a classification stamp pasted into a header is small, and
  the RESTRICTED policy must read it). A page with a text layer and no such image gets no
  region.

Coordinates. PyMuPDF gives text (``page.get_text``) and image rectangles
(``page.get_image_info``, ``page.get_image_rects``) in *unrotated* page space: PDF points,
origin at the top-left of the unrotated crop box, whatever ``page.rotation`` says. Regions
and every box this package returns are in that space, so OCR lines and text-layer lines can
be compared directly. ``page.rect`` and the ``clip`` of ``page.get_pixmap`` are in the
*rotated* (displayed) space instead; :func:`render_region` converts, and renders the region
upright as displayed, which is how its text is meant to be read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pymupdf

from ragspine.ocr.base import Box, OcrInputError

logger = logging.getLogger(__name__)

OcrMode = Literal["auto", "full"]
RegionReason = Literal["no_text_layer", "image", "full"]
#: Which of a page's planned regions to read: ``all``; ``stamps``, the images that were planned
#: only because they reach into a marker band (small, cheap: read before a page goes live);
#: ``content``, everything else (whole pages, large images: the bulk of the cost).
Part = Literal["all", "stamps", "content"]

#: No side of a render exceeds this many pixels; the dpi is lowered to fit. 4000 px is A4 at
#: 340 dpi, or a 1.4 m poster at 72 dpi: enough to read, and at most 48 MB of RGB.
MAX_SIDE_PX = 4000
#: Smallest image in a marker band that auto mode reads (0.1 % of the page: a 60 x 7 pt stamp
#: on A4); smaller ones hold no legible word.
MIN_BAND_IMAGE_FRACTION = 0.001
#: Images whose rectangles are at most this far apart (PDF points) are merged into one region:
#: strips of one picture often abut with rounding gaps of a fraction of a point.
MERGE_GAP_PT = 2.0


@dataclass(frozen=True, slots=True)
class Region:
    """A part of a page to OCR."""

    rect: Box  # PDF points, unrotated page space (like page.get_text), x0, y0, x1, y1
    reason: RegionReason


@dataclass(frozen=True, slots=True)
class Render:
    """A rendered region and what maps its pixels back to the page."""

    image: np.ndarray  # (h, w, 3) uint8 RGB, upright as displayed
    origin_px: tuple[int, int]  # pixmap x, y: its top-left in displayed points * zoom
    zoom: float  # pixels per PDF point
    derotation: tuple[float, float, float, float, float, float]  # displayed -> unrotated points


def plan_page(
    page: pymupdf.Page,
    mode: OcrMode,
    min_text_chars: int,
    min_image_fraction: float,
    band: float = 0.0,
    *,
    text_chars: int | None = None,
    has_images: bool | None = None,
) -> list[Region]:
    """The regions of ``page`` to OCR, in reading order (top to bottom, then left to right, as
    displayed). ``band`` is the height of the top and bottom marker bands as a fraction of
    the page (0: none). See the module doc for the rules.

    A caller that has already read the page's text layer passes ``text_chars`` (its non-space
    characters) and ``has_images``: the plan then costs nothing on a born-digital page without
    images (reading the text again costs ~2.6 ms a page, the image list ~1.8 ms)."""
    if mode not in get_args(OcrMode):
        raise OcrInputError(
            f"OCR mode must be one of {', '.join(get_args(OcrMode))}, got {mode!r}"
        )
    if min_text_chars < 0:
        raise OcrInputError(f"min_text_chars must be 0 or more, got {min_text_chars}")
    if not 0.0 <= min_image_fraction <= 1.0:
        raise OcrInputError(
            f"min_image_fraction is a share of the page area in [0, 1], got {min_image_fraction}"
        )
    page_rect = page_rect_unrotated(page)
    if page_rect.is_empty:
        return []
    if mode == "full":
        return [Region(_box(page_rect), "full")]
    if text_chars is None:
        text_chars = sum(1 for c in page.get_text("text") if not c.isspace())
    if text_chars < min_text_chars:
        return [Region(_box(page_rect), "no_text_layer")]
    if has_images is False:
        return []
    rects: list[Box] = []
    for info in page.get_image_info():
        r = pymupdf.Rect(info["bbox"]) & page_rect  # PDF points, unrotated
        if r.is_valid and not r.is_empty and not r.is_infinite:
            rects.append(_box(r))
    if not 0.0 <= band <= 0.5:
        raise OcrInputError(f"band is a share of the page height in [0, 0.5], got {band}")
    page_area = page_rect.width * page_rect.height
    top = page_rect.y0 + band * page_rect.height  # PDF points, unrotated
    bottom = page_rect.y1 - band * page_rect.height

    def wanted(r: Box) -> bool:
        if _area(r) >= min_image_fraction * page_area:
            return True
        in_band = band > 0 and (r[1] < top or r[3] > bottom)
        return in_band and _area(r) >= MIN_BAND_IMAGE_FRACTION * page_area

    regions = [Region(r, "image") for r in merge_rects(rects, gap=MERGE_GAP_PT) if wanted(r)]
    rot = page.rotation_matrix
    return sorted(regions, key=lambda g: _reading_key(pymupdf.Rect(g.rect) * rot))


def select_regions(regions: list[Region], part: Part, page_area: float, min_image_fraction: float) -> list[Region]:
    """The regions of ``part`` (see :data:`Part`) among ``regions`` of a page of ``page_area``
    square points planned with ``min_image_fraction``."""
    if part == "all":
        return regions
    if part not in get_args(Part):
        raise OcrInputError(f"OCR part must be one of {', '.join(get_args(Part))}, got {part!r}")
    return [r for r in regions if is_stamp_region(r, page_area, min_image_fraction) == (part == "stamps")]


def is_stamp_region(region: Region, page_area: float, min_image_fraction: float) -> bool:
    """Whether ``plan_page`` chose ``region`` only because it reaches into a marker band: an
    image smaller than ``min_image_fraction`` of the page."""
    return region.reason == "image" and _area(region.rect) < min_image_fraction * page_area


def merge_rects(rects: list[Box], *, gap: float = MERGE_GAP_PT) -> list[Box]:
    """Union the boxes that overlap or lie within ``gap`` of each other, transitively, until
    no two of the results do; same unit in and out. Order of the result is unspecified."""
    boxes = list(rects)
    changed = True
    while changed:  # each pass merges every box into the first earlier result it touches
        changed = False
        out: list[Box] = []
        for b in boxes:
            for i, o in enumerate(out):
                if _near(b, o, gap):
                    out[i] = _union(b, o)
                    changed = True
                    break
            else:
                out.append(b)
        boxes = out
    return boxes


def render_region(
    page: pymupdf.Page, rect: Box, dpi: float, *, max_side_px: int = MAX_SIDE_PX
) -> np.ndarray:
    """``rect`` (PDF points, unrotated page space) rendered upright as displayed, as an
    ``(h, w, 3)`` uint8 RGB array, at ``dpi`` or lower so that no side exceeds
    ``max_side_px``. Images in any colour space (CMYK, gray, indexed) come out as RGB."""
    return render_for_ocr(page, rect, dpi, max_side_px=max_side_px).image


def render_for_ocr(
    page: pymupdf.Page, rect: Box, dpi: float, *, max_side_px: int = MAX_SIDE_PX
) -> Render:
    """:func:`render_region` plus what :func:`pixel_box_to_page` needs to map boxes back."""
    if not dpi > 0:
        raise OcrInputError(f"dpi must be positive, got {dpi}; 100-200 suits OCR")
    if max_side_px < 32:
        raise OcrInputError(f"max_side_px must be at least 32 pixels, got {max_side_px}")
    clip = (pymupdf.Rect(rect) * page.rotation_matrix) & page.rect  # PDF points, displayed
    if clip.is_empty or not clip.is_valid:
        raise OcrInputError(
            f"region {tuple(round(v, 1) for v in rect)} (PDF points, unrotated) does not "
            f"overlap page {page.number + 1 if page.number is not None else '?'} "
            f"({tuple(round(v, 1) for v in page_rect_unrotated(page))}); plan regions with plan_page"
        )
    zoom = dpi / 72.0  # pixels per point
    longest_pt = max(clip.width, clip.height)
    if longest_pt * zoom > max_side_px - 1:
        # -1: the pixmap covers clip * zoom rounded outwards, which can add a pixel.
        zoom = (max_side_px - 1) / longest_pt
        logger.debug(
            "render capped at %d px: %.0f dpi instead of %.0f", max_side_px, zoom * 72.0, dpi
        )
    pix = page.get_pixmap(
        matrix=pymupdf.Matrix(zoom, zoom), clip=clip, colorspace=pymupdf.csRGB, alpha=False
    )
    image = _rgb_copy(pix)
    d = page.derotation_matrix
    return Render(image, (pix.x, pix.y), zoom, (d.a, d.b, d.c, d.d, d.e, d.f))


def pixel_box_to_page(box_px: Box, render: Render) -> Box:
    """A box in ``render.image`` pixels as a box in PDF points, unrotated page space."""
    ox, oy = render.origin_px
    z = render.zoom
    x0, y0, x1, y1 = box_px  # pixels
    shown = pymupdf.Rect((ox + x0) / z, (oy + y0) / z, (ox + x1) / z, (oy + y1) / z)  # displayed pt
    return _box(shown * pymupdf.Matrix(*render.derotation))  # unrotated pt


def page_rect_unrotated(page: pymupdf.Page) -> pymupdf.Rect:
    """The page in unrotated page space (PDF points): ``page.rect`` has width and height
    swapped on a page rotated by 90 or 270 degrees."""
    return page.rect * page.derotation_matrix


def _rgb_copy(pix: pymupdf.Pixmap) -> np.ndarray:
    """``(h, w, 3)`` uint8 copy of an RGB pixmap without alpha. A copy: the pixmap's memory is
    freed with it, and rows may be padded (``stride`` > ``3 * w``)."""
    if pix.n != 3:
        raise OcrInputError(f"expected an RGB pixmap without alpha, got {pix.n} channels")
    rows = np.frombuffer(pix.samples_mv, dtype=np.uint8).reshape(pix.height, pix.stride)
    return rows[:, : pix.width * 3].reshape(pix.height, pix.width, 3).copy()


def _reading_key(shown: pymupdf.Rect) -> tuple[float, float]:
    return (round(shown.y0, 1), round(shown.x0, 1))


def _box(r: pymupdf.Rect) -> Box:
    return (float(r.x0), float(r.y0), float(r.x1), float(r.y1))


def _area(b: Box) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _near(a: Box, b: Box, gap: float) -> bool:
    return a[0] <= b[2] + gap and b[0] <= a[2] + gap and a[1] <= b[3] + gap and b[1] <= a[3] + gap


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
