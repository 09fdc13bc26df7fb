"""What to OCR on a page (plan_page, merge_rects) and how it is rendered (render_region and
the pixel -> PDF point mapping), on pages built in the tests. No OCR model runs here."""

from __future__ import annotations

import numpy as np
import pymupdf
import pytest

from ocr_kit import A4, add_image, pattern_pixmap, quadrant_pixmap, rasterised, text_page
from ragspine.ocr import MAX_SIDE_PX, OcrInputError, Region, plan_page, render_region
from ragspine.ocr.plan import merge_rects, pixel_box_to_page, render_for_ocr

FULL_A4 = (0.0, 0.0, 595.0, 842.0)
CHART = (72.0, 400.0, 472.0, 700.0)  # 400 x 300 pt: 24 % of A4
LOGO = (500.0, 30.0, 540.0, 50.0)  # 40 x 20 pt: 0.16 % of A4


def auto(page: pymupdf.Page, min_text_chars: int = 50, min_image_fraction: float = 0.05) -> list[Region]:
    return plan_page(page, "auto", min_text_chars, min_image_fraction)


# -- plan_page ------------------------------------------------------------------------------


def test_image_only_page_is_one_no_text_layer_region() -> None:
    src = pymupdf.open()
    scan = rasterised(text_page(src))
    assert auto(scan[0]) == [Region(FULL_A4, "no_text_layer")]


def test_born_digital_page_without_images_has_no_region() -> None:
    doc = pymupdf.open()
    assert auto(text_page(doc)) == []


def test_large_chart_is_a_region_small_logo_is_not() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, CHART)
    add_image(page, LOGO, pattern_pixmap(40, 20, seed=1))
    assert auto(page) == [Region(CHART, "image")]


def test_image_fraction_threshold_is_inclusive() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, CHART)
    share = (400 * 300) / (595 * 842)
    assert auto(page, min_image_fraction=share) == [Region(CHART, "image")]
    assert auto(page, min_image_fraction=share + 1e-6) == []


def test_overlapping_and_abutting_strips_merge_into_one_region() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    # A slide exported as three strips: the first two overlap by 5 pt, the third starts 1 pt
    # below the second (a rounding gap). Each strip alone is 10-12 % of the page, under 20 %.
    add_image(page, (50.0, 100.0, 545.0, 220.0), pattern_pixmap(40, 20, seed=1))
    add_image(page, (50.0, 215.0, 545.0, 340.0), pattern_pixmap(40, 20, seed=2))
    add_image(page, (50.0, 341.0, 545.0, 460.0), pattern_pixmap(40, 20, seed=3))
    assert auto(page, min_image_fraction=0.2) == [Region((50.0, 100.0, 545.0, 460.0), "image")]


def test_separate_images_stay_separate_in_reading_order() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    below = (72.0, 600.0, 520.0, 800.0)
    right = (320.0, 300.0, 520.0, 500.0)
    left = (72.0, 300.0, 272.0, 500.0)
    for i, r in enumerate((below, right, left)):  # inserted out of reading order
        add_image(page, r, pattern_pixmap(40, 20, seed=i))
    assert [g.rect for g in auto(page)] == [left, right, below]


def test_full_mode_is_the_whole_page_even_with_a_text_layer() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, CHART)
    assert plan_page(page, "full", 50, 0.05) == [Region(FULL_A4, "full")]


def test_min_text_chars_boundary() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    page.insert_text((72, 100), "abc de", fontsize=10)  # 5 non-space characters
    add_image(page, CHART)
    assert auto(page, min_text_chars=6) == [Region(FULL_A4, "no_text_layer")]
    assert auto(page, min_text_chars=5) == [Region(CHART, "image")]


def test_image_partly_off_the_page_is_clipped() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, (300.0, 500.0, 900.0, 1000.0))
    assert auto(page) == [Region((300.0, 500.0, 595.0, 842.0), "image")]


def test_rotated_page_regions_are_in_unrotated_space() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, CHART)
    page.set_rotation(90)
    assert page.rect == pymupdf.Rect(0, 0, 842, 595)  # displayed: width and height swapped
    # The same space as the text layer and PyMuPDF's image rectangles:
    xref = page.get_images()[0][0]
    assert tuple(page.get_image_rects(xref)[0]) == CHART
    assert page.get_text("words")[0][:2] == pytest.approx((72.0, 100.0 - 10 * 1.075), abs=1.0)
    assert auto(page) == [Region(CHART, "image")]
    assert plan_page(page, "full", 50, 0.05) == [Region(FULL_A4, "full")]


def test_rotated_scan_is_one_region_covering_the_unrotated_page() -> None:
    src = pymupdf.open()
    scan = rasterised(text_page(src))
    scan[0].set_rotation(270)
    assert auto(scan[0]) == [Region(FULL_A4, "no_text_layer")]


@pytest.mark.parametrize(
    ("mode", "chars", "fraction", "match"),
    [
        ("ocr", 50, 0.1, "OCR mode must be one of auto, full, got 'ocr'"),
        ("auto", -1, 0.1, "min_text_chars must be 0 or more"),
        ("auto", 50, 1.5, r"min_image_fraction is a share of the page area in \[0, 1\]"),
        ("auto", 50, -0.1, r"min_image_fraction"),
    ],
)
def test_plan_rejects_bad_arguments(mode: str, chars: int, fraction: float, match: str) -> None:
    doc = pymupdf.open()
    with pytest.raises(OcrInputError, match=match):
        plan_page(text_page(doc), mode, chars, fraction)  # type: ignore[arg-type]


# -- merge_rects (pure) ---------------------------------------------------------------------


def test_merge_is_transitive() -> None:
    # a touches b, b touches c, a is far from c: all three are one picture.
    a, b, c = (0.0, 0.0, 10.0, 10.0), (10.0, 0.0, 20.0, 10.0), (21.0, 0.0, 30.0, 10.0)
    assert merge_rects([a, c, b], gap=2.0) == [(0.0, 0.0, 30.0, 10.0)]


def test_merge_gap_boundary() -> None:
    a, b = (0.0, 0.0, 10.0, 10.0), (12.0, 0.0, 20.0, 10.0)  # 2 pt apart
    assert merge_rects([a, b], gap=2.0) == [(0.0, 0.0, 20.0, 10.0)]
    assert sorted(merge_rects([a, b], gap=1.9)) == [a, b]


def test_merge_grows_until_stable() -> None:
    # d only touches the union of a and b, not either alone.
    a, b = (0.0, 0.0, 10.0, 10.0), (9.0, 20.0, 30.0, 30.0)
    bridge = (5.0, 9.0, 12.0, 21.0)
    d = (0.0, 25.0, 3.0, 40.0)  # touches (0, 0, 30, 30), not a, b or the bridge
    assert merge_rects([d, a, b, bridge], gap=0.0) == [(0.0, 0.0, 30.0, 40.0)]
    assert merge_rects([], gap=2.0) == []


# -- rendering ------------------------------------------------------------------------------


def test_render_size_follows_dpi() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, (100.0, 200.0, 300.0, 300.0))
    image = render_region(page, (100.0, 200.0, 300.0, 300.0), 144)  # 2 px per pt
    assert image.shape == (200, 400, 3)
    assert image.dtype == np.uint8
    assert image.flags.c_contiguous and image.flags.owndata  # a copy, not MuPDF's memory


@pytest.mark.parametrize(("rotation", "turns"), [(90, -1), (180, 2), (270, 1)])
def test_render_of_a_rotated_page_is_upright_as_displayed(rotation: int, turns: int) -> None:
    rect = (100.0, 200.0, 300.0, 300.0)
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, rect, quadrant_pixmap())
    upright = render_region(page, rect, 144)  # (200, 400, 3)
    page.set_rotation(rotation)
    shown = render_region(page, rect, 144)
    # /Rotate turns the page clockwise; np.rot90 turns counter-clockwise for positive k.
    expected = np.rot90(upright, k=turns)
    assert shown.shape == expected.shape
    assert np.abs(shown.astype(int) - expected.astype(int)).mean() < 2.0


def test_pixel_box_maps_back_to_pdf_points() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, (100.0, 200.0, 300.0, 300.0))
    render = render_for_ocr(page, (100.0, 200.0, 300.0, 300.0), 144)
    # 2 px per pt from the region's top-left (100, 200): (20, 10) px -> (110, 205) pt.
    assert pixel_box_to_page((20.0, 10.0, 120.0, 50.0), render) == pytest.approx((110.0, 205.0, 160.0, 225.0))


def test_pixel_box_maps_back_on_a_page_rotated_90() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, (100.0, 200.0, 300.0, 300.0))
    page.set_rotation(90)
    render = render_for_ocr(page, (100.0, 200.0, 300.0, 300.0), 144)
    # Worked by hand. Shown upright, unrotated (x, y) is at (842 - y, x): the region is the
    # displayed rect (542, 100, 642, 300), 100 x 200 pt, so the render is 200 x 400 px.
    assert render.image.shape == (400, 200, 3)
    # Pixel box (20, 10, 120, 50) at 2 px/pt -> displayed (552, 105, 602, 125) pt
    # -> unrotated x = displayed y in [105, 125], y = 842 - displayed x in [240, 290].
    assert pixel_box_to_page((20.0, 10.0, 120.0, 50.0), render) == pytest.approx((105.0, 240.0, 125.0, 290.0))


def test_pixel_box_maps_back_with_a_cropbox_offset() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    add_image(page, (100.0, 200.0, 300.0, 300.0))
    page.set_cropbox(pymupdf.Rect(50, 60, 400, 500))
    # PyMuPDF's page space starts at the crop box: the image is now at (50, 140, 250, 240).
    (region,) = plan_page(page, "auto", 0, 0.05)
    assert region.rect == pytest.approx((50.0, 140.0, 250.0, 240.0))
    render = render_for_ocr(page, region.rect, 72)
    assert render.image.mean() < 250  # the image, not blank page
    assert pixel_box_to_page((0.0, 0.0, 200.0, 100.0), render) == pytest.approx(region.rect)


def test_pixel_cap_on_a_huge_page() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=14400, height=7200)  # 200 x 100 in, the PDF maximum side
    add_image(page, (0.0, 0.0, 14400.0, 7200.0))
    image = render_region(page, (0.0, 0.0, 14400.0, 7200.0), 150)  # 30000 px wide at 150 dpi
    assert max(image.shape[:2]) <= MAX_SIDE_PX
    assert max(image.shape[:2]) >= MAX_SIDE_PX - 2
    assert image.shape[1] / image.shape[0] == pytest.approx(2.0, rel=0.01)
    small = render_region(page, (0.0, 0.0, 14400.0, 7200.0), 150, max_side_px=500)
    assert max(small.shape[:2]) <= 500


def test_cmyk_and_gray_images_render_to_rgb() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    cmyk = pymupdf.Pixmap(pymupdf.csCMYK, pymupdf.IRect(0, 0, 20, 10), False)
    cmyk.set_rect(cmyk.irect, (0, 255, 255, 0))  # full magenta + yellow: red
    gray = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 20, 10), False)
    gray.set_rect(gray.irect, (128,))
    x_cmyk = page.insert_image(pymupdf.Rect(100, 100, 300, 200), pixmap=cmyk)
    x_gray = page.insert_image(pymupdf.Rect(100, 300, 300, 400), pixmap=gray)
    assert doc.extract_image(x_cmyk)["colorspace"] == 4  # stored as CMYK
    assert doc.extract_image(x_gray)["colorspace"] == 1  # stored as gray

    red = render_region(page, (100.0, 100.0, 300.0, 200.0), 72)
    assert red.shape == (100, 200, 3) and red.dtype == np.uint8
    r, g, b = red.reshape(-1, 3).mean(axis=0)
    assert r > 200 and g < 80 and b < 80

    mid = render_region(page, (100.0, 300.0, 300.0, 400.0), 72)
    assert mid.shape == (100, 200, 3)
    assert np.abs(mid.astype(int) - 128).max() <= 2


@pytest.mark.parametrize(
    ("rect", "dpi", "match"),
    [
        ((0.0, 0.0, 100.0, 100.0), 0, "dpi must be positive"),
        ((700.0, 900.0, 800.0, 1000.0), 150, "does not overlap page"),
    ],
)
def test_render_rejects_bad_arguments(rect: tuple[float, float, float, float], dpi: float, match: str) -> None:
    doc = pymupdf.open()
    with pytest.raises(OcrInputError, match=match):
        render_region(text_page(doc), rect, dpi)


def test_a_caller_that_read_the_text_layer_saves_the_plan_its_reading() -> None:
    doc = pymupdf.open()
    page = text_page(doc)
    add_image(page, (72, 500, 523, 780))  # a large chart

    class NoTextRead:
        def __init__(self, inner: pymupdf.Page) -> None:
            self._inner = inner

        def get_text(self, *a: object, **k: object) -> str:
            raise AssertionError("the text layer was read again")

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    spy = NoTextRead(page)
    regions = plan_page(spy, "auto", 50, 0.1, text_chars=900, has_images=True)  # type: ignore[arg-type]
    assert [r.reason for r in regions] == ["image"]
    assert plan_page(spy, "auto", 50, 0.1, text_chars=900, has_images=False) == []  # type: ignore[arg-type]
    assert [r.reason for r in plan_page(spy, "auto", 50, 0.1, text_chars=3)] == ["no_text_layer"]  # type: ignore[arg-type]
