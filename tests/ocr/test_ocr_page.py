"""ocr_page with a spy engine: box mapping, the render cache, reading order, text-layer
duplicates, glued words, blank renders, and that no page text reaches a log line."""

from __future__ import annotations

import logging

import numpy as np
import pymupdf
import pytest

from ocr_kit import A4, SpyEngine, add_image, pattern_pixmap, text_page
from ragspine.ocr import OcrCache, OcrError, OcrInputError, OcrLine, PageOcr, Region, ocr_page

REGION = (100.0, 200.0, 300.0, 300.0)  # PDF points; at 144 dpi a 400 x 200 px render


def run(page: pymupdf.Page, engine: SpyEngine, mode: str = "auto", cache: OcrCache | None = None) -> PageOcr:
    return ocr_page(
        page, engine, mode=mode, dpi=144, min_text_chars=50, min_image_fraction=0.02, cache=cache  # type: ignore[arg-type]
    )


def chart_page(doc: pymupdf.Document, rect: tuple[float, float, float, float] = REGION, seed: int = 0) -> pymupdf.Page:
    """A born-digital page (text layer) with one picture at ``rect``."""
    page = text_page(doc, n_lines=5)
    add_image(page, rect, pattern_pixmap(40, 20, seed=seed))
    return page


def line(text: str, box: tuple[float, float, float, float], score: float = 0.9) -> OcrLine:
    return OcrLine(text=text, box=box, score=score)


# -- mapping --------------------------------------------------------------------------------


def test_boxes_map_back_to_pdf_points() -> None:
    doc = pymupdf.open()
    page = chart_page(doc)
    spy = SpyEngine([line("Q3 shipments", (20.0, 10.0, 120.0, 50.0))])
    result = run(page, spy)
    assert result.regions == (Region(REGION, "image"),)
    assert spy.shapes == [(200, 400, 3)]
    (only,) = result.lines
    # 2 px per pt from (100, 200): worked by hand.
    assert only.box == pytest.approx((110.0, 205.0, 160.0, 225.0))
    assert (only.text, only.score, only.region) == ("Q3 shipments", 0.9, 0)


def test_boxes_map_back_on_a_page_rotated_90() -> None:
    doc = pymupdf.open()
    page = chart_page(doc)
    page.set_rotation(90)
    spy = SpyEngine([line("Q3 shipments", (20.0, 10.0, 120.0, 50.0))])
    result = run(page, spy)
    assert spy.shapes == [(400, 200, 3)]  # rendered upright as displayed: turned
    # Worked by hand in test_ocr_plan.test_pixel_box_maps_back_on_a_page_rotated_90.
    assert result.lines[0].box == pytest.approx((105.0, 240.0, 125.0, 290.0))


def test_engine_boxes_outside_the_image_are_clipped() -> None:
    doc = pymupdf.open()
    spy = SpyEngine([line("edge", (-10.0, -5.0, 500.0, 250.0))])
    (only,) = run(chart_page(doc), spy).lines
    assert only.box == pytest.approx(REGION)


# -- cache ----------------------------------------------------------------------------------


def test_identical_renders_are_read_once_with_a_cache() -> None:
    doc = pymupdf.open()
    chart_page(doc)
    chart_page(doc)  # the same picture at the same place
    pages = [doc[0], doc[1]]  # loaded after both exist: adding a page invalidates Page objects
    spy = SpyEngine([line("logo", (0.0, 0.0, 10.0, 10.0))])
    cache = OcrCache()
    first, second = (run(p, spy, cache=cache) for p in pages)
    assert spy.calls == 1
    assert (first.engine_calls, first.cache_hits) == (1, 0)
    assert (second.engine_calls, second.cache_hits) == (0, 1)
    assert first.lines == second.lines
    assert len(cache) == 1


def test_without_a_cache_every_render_is_read() -> None:
    doc = pymupdf.open()
    spy = SpyEngine([line("logo", (0.0, 0.0, 10.0, 10.0))])
    for _ in range(2):
        run(chart_page(doc), spy)
    assert spy.calls == 2


def test_different_renders_and_engines_do_not_share_entries() -> None:
    doc = pymupdf.open()
    cache = OcrCache()
    spy = SpyEngine([line("x", (0.0, 0.0, 10.0, 10.0))])
    run(chart_page(doc, seed=1), spy, cache=cache)
    run(chart_page(doc, seed=2), spy, cache=cache)  # other pixels
    run(chart_page(doc, rect=(100.0, 200.0, 300.0, 310.0), seed=1), spy, cache=cache)  # other size
    assert spy.calls == 3
    other = SpyEngine([line("x", (0.0, 0.0, 10.0, 10.0))], name="other-engine")
    run(chart_page(doc, seed=1), other, cache=cache)
    assert other.calls == 1


def test_cache_is_lru() -> None:
    cache = OcrCache(max_entries=2)
    a = (line("a", (0.0, 0.0, 1.0, 1.0)),)
    b = (line("b", (0.0, 0.0, 1.0, 1.0)),)
    c: tuple[OcrLine, ...] = ()
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") == a  # a is now the most recent
    cache.put("c", c)  # evicts b, the least recent
    assert cache.get("b") is None
    assert cache.get("a") == a and cache.get("c") == ()
    with pytest.raises(OcrInputError, match="max_entries must be at least 1"):
        OcrCache(max_entries=0)


# -- what is sent and kept -------------------------------------------------------------------


def test_blank_render_is_not_sent_to_the_engine() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    spy = SpyEngine([line("ghost", (0.0, 0.0, 10.0, 10.0))])
    result = run(page, spy, mode="full")
    assert result.regions == (Region((0.0, 0.0, 595.0, 842.0), "full"),)
    assert spy.calls == 0 and result.lines == ()


def test_page_without_regions_costs_no_render() -> None:
    doc = pymupdf.open()
    spy = SpyEngine()
    result = run(text_page(doc), spy)
    assert result.regions == () and result.lines == () and spy.calls == 0


def test_reading_order_rows_then_left_to_right() -> None:
    doc = pymupdf.open()
    page = chart_page(doc)
    # Pixel boxes in a 400 x 200 render, given out of order. "left" starts 4 px lower than
    # "right" but overlaps it by 16 of 20 px: same row, so it comes first.
    spy = SpyEngine(
        [
            line("below", (10.0, 60.0, 100.0, 80.0)),
            line("right", (200.0, 10.0, 300.0, 30.0)),
            line("left", (10.0, 14.0, 100.0, 34.0)),
            line("bottom right", (200.0, 150.0, 390.0, 170.0)),
        ]
    )
    assert [ln.text for ln in run(page, spy).lines] == ["left", "right", "below", "bottom right"]


def test_regions_are_read_in_order() -> None:
    doc = pymupdf.open()
    page = text_page(doc, n_lines=5)
    add_image(page, (72.0, 500.0, 272.0, 600.0), pattern_pixmap(40, 20, seed=1))  # lower
    add_image(page, (72.0, 300.0, 272.0, 400.0), pattern_pixmap(40, 20, seed=2))  # upper
    spy = SpyEngine([line("chart title", (0.0, 0.0, 10.0, 10.0))])
    result = run(page, spy)
    assert [r.rect[1] for r in result.regions] == [300.0, 500.0]
    assert [ln.region for ln in result.lines] == [0, 1]
    assert result.lines[0].box[1] == pytest.approx(300.0)


def test_glued_words_are_split() -> None:
    doc = pymupdf.open()
    spy = SpyEngine([line("GLOBALMOBILEDEVELOPERS 2023", (0.0, 0.0, 100.0, 20.0))])
    (only,) = run(chart_page(doc), spy).lines
    assert only.text == "GLOBAL MOBILE DEVELOPERS 2023"


def test_text_layer_duplicates_dropped_in_image_regions_only() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, REGION)
    # A text layer on top of the picture (like a "searchable image"), plus enough other text
    # for the page to count as born-digital.
    page.insert_text((110.0, 230.0), "Revenue grew 12% in 2021", fontsize=12)
    for i in range(5):
        page.insert_text((72.0, 500.0 + 14 * i), "Body text of the report, line by line.", fontsize=10)
    x0, y0, x1, y1 = next(ln for ln in _layer_lines(page) if ln[0].startswith("Revenue"))[1]
    px = (2 * (x0 - 100.0), 2 * (y0 - 200.0), 2 * (x1 - 100.0), 2 * (y1 - 200.0))  # its pixels
    spy = SpyEngine(
        [
            line("Revenue grew l2% in 2O21", px),  # two misread characters: still a duplicate
            line("Cloud share by region", (20.0, 120.0, 300.0, 150.0)),  # only in the picture
        ]
    )
    auto = run(page, spy)
    assert [ln.text for ln in auto.lines] == ["Cloud share by region"]
    assert auto.duplicates_dropped == 1
    full = run(page, spy, mode="full")
    assert full.regions[0].reason == "full"
    assert "Revenue grew l2% in 2O21" in [ln.text for ln in full.lines]


def test_same_place_other_text_is_kept() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, REGION)
    page.insert_text((110.0, 230.0), "Revenue grew 12% in 2021", fontsize=12)
    for i in range(5):
        page.insert_text((72.0, 500.0 + 14 * i), "Body text of the report, line by line.", fontsize=10)
    spy = SpyEngine([line("Operating margin fell", (20.0, 35.0, 300.0, 65.0))])
    assert [ln.text for ln in run(page, spy).lines] == ["Operating margin fell"]


def _layer_lines(page: pymupdf.Page) -> list[tuple[str, tuple[float, float, float, float]]]:
    out = []
    for b in page.get_text("dict")["blocks"]:
        for ln in b.get("lines", []):
            out.append(("".join(s["text"] for s in ln["spans"]), tuple(ln["bbox"])))
    return out


def test_engine_returning_the_wrong_type_is_an_error() -> None:
    doc = pymupdf.open()
    spy = SpyEngine(lambda image: [("text", (0, 0, 1, 1), 0.9)])  # type: ignore[list-item, return-value]
    with pytest.raises(OcrError, match="must return a list of ragspine.ocr.OcrLine"):
        run(chart_page(doc), spy)


def test_page_text_property_and_timing() -> None:
    doc = pymupdf.open()
    spy = SpyEngine([line("one", (0.0, 0.0, 50.0, 20.0)), line("two", (0.0, 40.0, 50.0, 60.0))])
    result = run(chart_page(doc), spy)
    assert result.text == "one\ntwo"
    assert result.seconds > 0


def test_page_text_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    doc = pymupdf.open()
    page = chart_page(doc)
    secret = "RESTRICTED merger terms"
    spy = SpyEngine([line(secret, (0.0, 0.0, 200.0, 20.0)), line("GLOBALMOBILEDEVELOPERS", (0.0, 40.0, 200.0, 60.0))])
    with caplog.at_level(logging.DEBUG, logger="ragspine.ocr"):
        result = run(page, spy, cache=OcrCache())
        run(page, spy, cache=OcrCache())
    assert secret in result.text
    assert caplog.records, "ocr_page logs what it did at DEBUG"
    logged = caplog.text + " ".join(str(r.args) for r in caplog.records)
    for word in ("RESTRICTED", "merger", "GLOBAL", "MOBILE"):
        assert word not in logged


def test_bad_arguments_are_named() -> None:
    doc = pymupdf.open()
    with pytest.raises(OcrInputError, match="OCR mode must be one of auto, full"):
        run(chart_page(doc), SpyEngine(), mode="everything")
    with pytest.raises(OcrInputError, match="dpi must be positive"):
        ocr_page(chart_page(doc), SpyEngine(), mode="auto", dpi=0, min_text_chars=50, min_image_fraction=0.02)


def test_render_is_rgb_uint8_for_the_engine() -> None:
    doc = pymupdf.open()
    seen: list[np.ndarray] = []
    run(chart_page(doc), SpyEngine(lambda image: seen.append(image) or []))
    (image,) = seen
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
