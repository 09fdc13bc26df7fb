"""Targeted OCR of PDF pages: scans, and the raster charts and slides inside born-digital pages.

::

    engine = RapidOcrEngine()              # loads PP-OCRv4 on first use
    cache = OcrCache()                     # one per document
    for page in doc:
        result = ocr_page(page, engine, mode="auto", dpi=150,
                          min_text_chars=50, min_image_fraction=0.1, cache=cache)
        for line in result.lines:          # reading order
            line.text, line.box            # box: PDF points, unrotated page space

Every box is ``(x0, y0, x1, y1)``, origin top-left: in pixels for :class:`OcrLine` (what an
engine returns), in PDF points of the unrotated page (the space of ``page.get_text``) for
:class:`Region` and :class:`PageLine`.

Needs ``rapidocr-onnxruntime`` (the engine, imported on first use) and ``wordninja`` (its
word list splits glued English words); both are named in the error raised when absent.
"""

from ragspine import runtimes as _runtimes

# Before any module of this package can import onnxruntime or OpenVINO, which would
# otherwise write usage files and send usage events (ragspine.runtimes).
_runtimes.quiet()

from typing import TYPE_CHECKING, Any

from ragspine.ocr.base import (
    OcrEngine,
    OcrError,
    OcrInputError,
    OcrLine,
    OcrUnavailableError,
)

if TYPE_CHECKING:
    from ragspine.ocr.page import OcrCache, PageLine, PageOcr, ocr_page
    from ragspine.ocr.plan import (
        MAX_SIDE_PX,
        OcrMode,
        Part,
        Region,
        is_stamp_region,
        plan_page,
        render_region,
        select_regions,
    )
    from ragspine.ocr.rapid import RapidOcrEngine
    from ragspine.ocr.words import split_glued

# The rest is imported on first use: the engine (ragspine.ocr.rapid) must load where PyMuPDF,
# which the page functions need, is not installed (an OCR-only task on a GPU machine).
_LAZY = {
    **dict.fromkeys(("OcrCache", "PageLine", "PageOcr", "ocr_page"), "page"),
    **dict.fromkeys(("MAX_SIDE_PX", "OcrMode", "Part", "Region", "is_stamp_region", "plan_page",
                     "render_region", "select_regions"), "plan"),
    "RapidOcrEngine": "rapid",
    "split_glued": "words",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ragspine.ocr' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"ragspine.ocr.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_SIDE_PX",
    "OcrCache",
    "OcrEngine",
    "OcrError",
    "OcrInputError",
    "OcrLine",
    "OcrMode",
    "OcrUnavailableError",
    "PageLine",
    "PageOcr",
    "Part",
    "RapidOcrEngine",
    "Region",
    "ocr_page",
    "plan_page",
    "is_stamp_region",
    "render_region",
    "select_regions",
    "split_glued",
]
