"""RapidOcrEngine: input checks, box conversion and filtering with a stand-in for RapidOCR
(fast), then the real PP-OCRv4 models on rendered pages (slow: seconds per page on CPU)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pymupdf
import pytest

from ocr_kit import rasterised
from ragspine.ocr import (
    OcrCache,
    OcrEngine,
    OcrError,
    OcrInputError,
    OcrLine,
    OcrUnavailableError,
    RapidOcrEngine,
    ocr_page,
)
from ragspine.ocr.rapid import quad_to_box

# -- without the models ---------------------------------------------------------------------


def test_is_an_ocr_engine() -> None:
    engine = RapidOcrEngine()
    assert isinstance(engine, OcrEngine)
    assert engine.name.startswith("rapidocr-onnxruntime:ppocrv4")
    assert engine.name != RapidOcrEngine(text_score=0.7).name  # the cache key tells them apart


def test_quad_to_box() -> None:
    quad = [[10.0, 20.0], [110.0, 18.0], [112.0, 40.0], [9.0, 42.0]]  # a slightly skewed line
    assert quad_to_box(quad, 200, 100) == (9.0, 18.0, 112.0, 42.0)
    assert quad_to_box([[-3, -1], [250, 0], [250, 120], [-3, 120]], 200, 100) == (0.0, 0.0, 200.0, 100.0)


@pytest.mark.parametrize(
    ("image", "match"),
    [
        ([[0, 0, 0]], "takes a numpy array, got list"),
        (np.zeros((10, 10), np.uint8), r"shape \(10, 10\) dtype uint8"),
        (np.zeros((10, 10, 4), np.uint8), r"convert gray or RGBA images to RGB"),
        (np.zeros((10, 10, 3), np.float32), r"dtype float32"),
        (np.zeros((0, 10, 3), np.uint8), "empty image"),
    ],
)
def test_bad_images_are_refused_before_loading(image: Any, match: str) -> None:
    engine = RapidOcrEngine()
    with pytest.raises(OcrInputError, match=match):
        engine.recognize(image)
    assert engine._ocr is None  # nothing loaded


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"text_score": 1.5}, "text_score must be in"), ({"max_side_px": 8}, "max_side_px"), ({"threads": 0}, "threads")],
)
def test_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(OcrInputError, match=match):
        RapidOcrEngine(**kwargs)


def test_missing_package_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # import fails
    with pytest.raises(OcrUnavailableError, match="pip install rapidocr-onnxruntime") as info:
        RapidOcrEngine().recognize(np.zeros((32, 32, 3), np.uint8))
    assert info.value.status == 501


def test_backend_auto_is_openvino_when_it_imports_and_onnxruntime_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RapidOcrEngine().backend == "openvino"  # a dependency of ragspine: installed here
    assert RapidOcrEngine(backend="onnxruntime").backend == "onnxruntime"
    # The backend is part of the engine's name, and so of the OCR cache key.
    assert RapidOcrEngine().name != RapidOcrEngine(backend="onnxruntime").name
    monkeypatch.setitem(sys.modules, "openvino", None)  # its wheel cannot load here
    assert RapidOcrEngine().backend == "onnxruntime"
    with pytest.raises(OcrUnavailableError, match="pip install openvino"):
        RapidOcrEngine(backend="openvino")
    with pytest.raises(OcrInputError, match="OCR backend must be one of auto, openvino, onnxruntime, torch, got 'tpu'"):
        RapidOcrEngine(backend="tpu")  # type: ignore[arg-type]


def test_device_auto_is_the_cpu_and_cuda_without_a_gpu_says_what_each_runtime_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import onnxruntime
    import torch

    # A machine with onnxruntime's CPU wheel (no CUDA provider) and torch without a GPU, as CI's
    # (made so on a GPU machine too, at the packages themselves, not in ragspine).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["AzureExecutionProvider", "CPUExecutionProvider"])
    assert RapidOcrEngine(device="auto").device == "cpu"
    with pytest.raises(OcrUnavailableError) as info:
        RapidOcrEngine(device="cuda")
    assert str(info.value) == (
        "OCR on a GPU (RAGSPINE_OCR_DEVICE=cuda) needs torch with a CUDA device and onnx2torch "
        "(pip install 'ragspine[gpu]'), or onnxruntime-gpu: "
        f"torch {torch.__version__} sees no CUDA device; this onnxruntime has only "
        "AzureExecutionProvider, CPUExecutionProvider; for onnxruntime-gpu: pip uninstall onnxruntime, "
        "then pip install onnxruntime-gpu")
    with pytest.raises(OcrUnavailableError, match=r"needs onnxruntime-gpu's CUDA provider: this onnxruntime has only"):
        RapidOcrEngine(device="cuda", backend="onnxruntime")
    with pytest.raises(OcrUnavailableError, match=r"needs torch with a CUDA device .*: torch \S+ sees no CUDA device$"):
        RapidOcrEngine(device="cuda", backend="torch")
    with pytest.raises(OcrInputError, match="openvino runs on the CPU only"):
        RapidOcrEngine(device="cuda", backend="openvino")
    with pytest.raises(OcrInputError, match="OCR device must be one of auto, cpu, cuda, got 'npu'"):
        RapidOcrEngine(device="npu")  # type: ignore[arg-type]


@pytest.mark.parametrize(("hw", "want"), [
    # A4 at 120 dpi: RapidOCR's own resize (multiples of 32, nothing else to do).
    ((1403, 992), (1408, 992)),
    # A banner: its short side would go up to 736 px (a 4907 px long side); the long side stops
    # at 2048: ratio 2048 / 2000 = 1.024 -> 307 x 2048 -> multiples of 32.
    ((300, 2000), (320, 2048)),
    # A stamp-sized image: upscaled 736 / 36 = 20.4x by RapidOCR alone; here at most 4x:
    # 144 x 600 -> multiples of 32 (round half to even: 4.5 -> 4).
    ((36, 150), (128, 608)),
])
def test_detection_input_keeps_the_short_side_rule_with_the_long_side_capped(
    hw: tuple[int, int], want: tuple[int, int],
) -> None:
    from ragspine.ocr.rapid import _det_resize

    out = _det_resize(736, 2048, None, None).resize(np.zeros((*hw, 3), np.uint8))
    assert out.shape[:2] == want


@pytest.mark.parametrize("hw", [(1280, 960), (1403, 992), (36, 150), (300, 2000)])
def test_detection_input_is_rapidocrs_own_normalisation_bit_for_bit(hw: tuple[int, int]) -> None:
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

    from ragspine.ocr.rapid import _det_resize

    img = np.random.default_rng(sum(hw)).integers(0, 256, (*hw, 3), dtype=np.uint8)
    mean, std = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]  # PP-OCRv4 detection's (RapidOCR's config)
    pre = _det_resize(736, 2048, mean, std)
    ours = pre(img)
    theirs = DetPreProcess.__call__(pre, img)  # RapidOCR's float64 path on the same resize
    assert ours.dtype == theirs.dtype == np.float32
    assert ours.shape == theirs.shape and ours.shape[:2] == (1, 3)
    assert np.array_equal(ours, theirs)


@pytest.mark.slow
def test_real_detection_never_sees_a_side_over_the_cap() -> None:
    engine = RapidOcrEngine(backend="openvino", threads=1)
    ocr = engine._load()
    seen: list[tuple[int, ...]] = []
    session = ocr.text_det.infer
    ocr.text_det.infer = lambda batch: (seen.append(batch.shape), session(batch))[1]
    page = pymupdf.open()
    p = page.new_page(width=2000, height=300)
    p.insert_text((40, 160), "Annual revenue by region", fontsize=60)
    banner = np.frombuffer(p.get_pixmap(dpi=72).samples, np.uint8).reshape(300, 2000, 3)  # (h, w, 3) RGB
    lines = engine.recognize(banner)
    assert seen == [(1, 3, 320, 2048)]
    assert [ln.text for ln in lines] == ["Annual revenue by region"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_short_labels_are_recognised_without_padding_to_320_px(backend: str) -> None:
    from ragspine.ocr.rapid import REC_MIN_WIDTH

    engine = RapidOcrEngine(backend=backend, threads=1)
    assert f":recw={REC_MIN_WIDTH}" in engine.name  # readings differ from RapidOCR's: another cache key
    ocr = engine._load()
    widths: list[int] = []
    session = ocr.text_rec.session
    ocr.text_rec.session = lambda batch: (widths.append(batch.shape[3]), session(batch))[1]
    page = pymupdf.open()
    p = page.new_page(width=400, height=300)
    labels = ["12%", "2019", "+7.5"]  # chart labels: each far narrower than 320 px at 48 px high
    for i, label in enumerate(labels):
        p.insert_text((40 + 120 * i, 150), label, fontsize=24)
    image = np.frombuffer(p.get_pixmap(dpi=72).samples, np.uint8).reshape(300, 400, 3)  # (h, w, 3) RGB
    lines = engine.recognize(image)
    assert sorted(ln.text for ln in lines) == sorted(labels)
    # One batch, as wide as its widest crop at 48 px high: a 24 pt label's crop is ~30 px high
    # and ~50-70 px wide, so ~80-120 px; RapidOCR's own floor would have made it 320.
    assert len(widths) == 1 and REC_MIN_WIDTH <= widths[0] < 160, widths


@pytest.mark.gpu
def test_real_ocr_on_cuda_reads_what_the_cpu_reads() -> None:
    scan = rasterised(report_page(), dpi=200)[0]
    kw: dict[str, Any] = {"mode": "auto", "dpi": 150, "min_text_chars": 20, "min_image_fraction": 0.1}
    gpu = RapidOcrEngine(device="cuda")  # torch: the device image's onnxruntime is the CPU wheel
    assert (gpu.device, gpu.backend) == ("cuda", "torch") and gpu.name.endswith(":torch:cuda")
    on_gpu = ocr_page(scan, gpu, cache=OcrCache(), **kw)
    on_cpu = ocr_page(scan, RapidOcrEngine(backend="onnxruntime"), cache=OcrCache(), **kw)
    # The same lines, in the same places. Their text may differ by a character: TF32
    # convolutions on the GPU read ~10 % of MMLongBench lines differently (docs/measured.md).
    from difflib import SequenceMatcher

    assert len(on_gpu.lines) == len(on_cpu.lines)
    for g, c in zip(on_gpu.lines, on_cpu.lines):
        assert SequenceMatcher(None, g.text, c.text).ratio() >= 0.9, (g.text, c.text)
        assert_box_near(g.box, c.box, 1.0)


class FakeRapid:
    """Stands in for rapidocr_onnxruntime.RapidOCR 1.4: detection through ``__call__`` with
    ``use_rec=False`` (a list of quads, or None), ``get_crop_img_list`` (axis-aligned crops
    here, turned counter-clockwise when 1.5 x taller than wide, like PP-OCR) and
    ``text_rec(batch) -> ([(text, score)], elapsed)`` answering ``readings`` in order."""

    def __init__(self, quads: list[list[list[float]]] | None, readings: list[tuple[str, float]] = ()) -> None:
        self.quads = quads
        self.readings = list(readings)
        self.images: list[np.ndarray] = []
        self.batches: list[list[np.ndarray]] = []
        fake = self

        class TextRec:
            rec_image_shape = [3, 48, 320]

            def __call__(self, batch: list[np.ndarray]) -> tuple[list[tuple[str, float]], float]:
                fake.batches.append(batch)
                return fake.readings[: len(batch)], 0.0

        self.text_rec = TextRec()

    def __call__(self, img: np.ndarray, use_det: bool = True, use_cls: bool = True, use_rec: bool = True) -> Any:
        assert use_det and not use_cls and not use_rec
        self.images.append(img)
        return self.quads, [0.0]

    def get_crop_img_list(self, img: np.ndarray, quads: list[np.ndarray]) -> list[np.ndarray]:
        crops = []
        for q in quads:
            x0, y0 = q.min(axis=0).astype(int)
            x1, y1 = q.max(axis=0).astype(int)
            crop = img[y0:y1, x0:x1]
            crops.append(np.rot90(crop) if crop.shape[0] >= 1.5 * crop.shape[1] else crop)
        return crops


def engine_with(fake: FakeRapid, **kwargs: Any) -> RapidOcrEngine:
    engine = RapidOcrEngine(**kwargs)
    engine._ocr = fake
    return engine


def quad(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def test_lines_are_converted_and_filtered() -> None:
    fake = FakeRapid(
        [quad(10, 20, 110, 40), quad(10, 50, 110, 70), quad(10, 80, 110, 100), quad(10, 105, 11, 115)],
        [("Revenue", 0.97), ("   ", 0.99), ("noise", 0.3)],  # empty and low-score lines dropped
    )
    image = np.zeros((120, 200, 3), np.uint8)
    image[..., 0] = 255  # red in RGB
    lines = engine_with(fake).recognize(image)
    assert lines == [OcrLine("Revenue", (10.0, 20.0, 110.0, 40.0), 0.97)]
    assert fake.images[0][0, 0].tolist() == [0, 0, 255]  # PP-OCR gets BGR
    assert image[0, 0].tolist() == [255, 0, 0]  # the caller's array is untouched
    # The 1 px wide quad was not cropped; the others went to the recogniser 48 px high,
    # widths scaled alike: 100 x 20 px -> 240 x 48 px.
    assert [c.shape for c in fake.batches[0]] == [(48, 240, 3)] * 3


def test_nothing_found_is_an_empty_list() -> None:
    fake = FakeRapid(None)
    assert engine_with(fake).recognize(np.zeros((50, 50, 3), np.uint8)) == []
    assert fake.batches == []  # nothing to recognise


def test_vertical_line_is_read_the_other_way_too() -> None:
    # 20 x 100 px: vertical. Read first as PP-OCR turned it, then turned the other way.
    fake = FakeRapid([quad(20, 10, 40, 110)], [("GETOIRTSER", 0.41), ("RESTRICTED", 0.98)])
    image = np.zeros((120, 60, 3), np.uint8)
    image[10:110, 20:30] = 255  # the left half of the box is white: shows which way it turned
    lines = engine_with(fake).recognize(image)
    assert lines == [OcrLine("RESTRICTED", (20.0, 10.0, 40.0, 110.0), 0.98)]
    ccw, cw = fake.batches[0]
    assert ccw.shape == cw.shape == (48, 240, 3)  # the 100 x 20 crop lying flat, scaled x 2.4
    # Counter-clockwise, the box's left side lies at the bottom; clockwise, at the top.
    assert ccw[-5:].mean() > 200 and ccw[:5].mean() < 50
    assert cw[:5].mean() > 200 and cw[-5:].mean() < 50

    keep = FakeRapid([quad(20, 10, 40, 110)], [("RESTRICTED", 0.97), ("GETOIRTSER", 0.5)])
    assert engine_with(keep).recognize(np.zeros((120, 60, 3), np.uint8))[0].text == "RESTRICTED"


def test_recogniser_answering_too_few_crops_is_an_error() -> None:
    fake = FakeRapid([quad(10, 20, 110, 40), quad(10, 50, 110, 70)], [("one", 0.9)])
    with pytest.raises(OcrError, match="RapidOCR read 1 crops of 2"):
        engine_with(fake).recognize(np.zeros((120, 200, 3), np.uint8))


def test_engine_crash_is_an_ocr_error() -> None:
    class Broken:
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("onnxruntime exploded")

    engine = RapidOcrEngine()
    engine._ocr = Broken()
    with pytest.raises(OcrError, match=r"RapidOCR failed on a 50 x 40 pixel image \(RuntimeError"):
        engine.recognize(np.zeros((40, 50, 3), np.uint8))


# -- the real models (slow) -----------------------------------------------------------------

# Where the text is drawn on the 400 x 300 pt test page, and how big.
STAMP = ((40.0, 50.0), 14.0)
SENTENCE = "Revenue grew 12% in 2021 on strong demand."
CHINESE = "移动开发者市场份额"


def report_page() -> pymupdf.Page:
    src = pymupdf.open()
    page = src.new_page(width=400, height=300)
    page.insert_text(STAMP[0], "RESTRICTED", fontsize=STAMP[1], fontname="hebo")
    page.insert_text((40, 90), SENTENCE, fontsize=12, fontname="helv")
    page.insert_text((40, 130), CHINESE, fontsize=14, fontname="china-s")
    page.insert_text((40, 170), "GLOBALMOBILEDEVELOPERS", fontsize=12, fontname="hebo")
    page.insert_text((370, 250), "RESTRICTED", fontsize=14, fontname="hebo", rotate=90)  # reads upwards
    return page


def find(lines: Any, text: str, *, spaces: bool = True) -> Any:
    """The first line reading ``text``; with ``spaces=False``, spaces do not count (PP-OCRv4
    drops some: "12%in")."""
    squeeze = (lambda t: t) if spaces else (lambda t: t.replace(" ", ""))
    hits = [ln for ln in lines if squeeze(ln.text) == squeeze(text)]
    assert hits, f"{text!r} not read; read {[ln.text for ln in lines]}"
    return hits[0]


def assert_box_near(got: tuple[float, ...], want: tuple[float, ...], tol: float) -> None:
    assert max(abs(g - w) for g, w in zip(got, want)) <= tol, (got, want, tol)


@pytest.mark.slow
def test_real_ocr_of_a_scanned_page(rapid_engine: RapidOcrEngine) -> None:
    src = report_page()
    want: dict[str, tuple[float, float, float, float]] = {}
    for w in src.get_text("words"):  # the first of each word: the upright stamp
        want.setdefault(w[4], (w[0], w[1], w[2], w[3]))
    stamp_up = [w[:4] for w in src.get_text("words") if w[4] == "RESTRICTED"][1]
    scan = rasterised(src, dpi=200)
    result = ocr_page(
        scan[0], rapid_engine, mode="auto", dpi=150, min_text_chars=20, min_image_fraction=0.1,
        cache=OcrCache(),
    )
    assert [r.reason for r in result.regions] == ["no_text_layer"]
    # Tolerance: a text-layer word box spans the font's ascender to descender (about 1.2 em
    # for Helvetica), a detected box hugs the ink plus a few pixels of unclip margin, so
    # their edges differ by at most about 0.3 em; half an em leaves room for a pixel of
    # rounding at 150 dpi (0.48 pt).
    stamp = find(result.lines, "RESTRICTED")
    assert_box_near(stamp.box, want["RESTRICTED"], 0.5 * 14)
    sentence = find(result.lines, SENTENCE, spaces=False)
    assert_box_near(sentence.box, (want["Revenue"][0], want["Revenue"][1], want["demand."][2], want["demand."][3]), 0.5 * 12)
    chinese = find(result.lines, CHINESE)
    assert_box_near(chinese.box, want[CHINESE], 0.5 * 14)
    glued = find(result.lines, "GLOBAL MOBILE DEVELOPERS")
    assert_box_near(glued.box, want["GLOBALMOBILEDEVELOPERS"], 0.5 * 12)
    # The stamp turned 90 degrees (reading upwards) is read too, as a tall box.
    vertical = [ln for ln in result.lines if ln.text == "RESTRICTED" and ln is not stamp]
    assert vertical, [ln.text for ln in result.lines]
    assert_box_near(vertical[0].box, stamp_up, 0.5 * 14)
    # Reading order: top to bottom.
    order = [stamp, sentence, chinese, glued, vertical[0]]
    assert [result.lines.index(ln) for ln in order] == sorted(result.lines.index(ln) for ln in order)


@pytest.mark.slow
def test_real_ocr_of_a_page_rotated_90(rapid_engine: RapidOcrEngine) -> None:
    # A landscape scan stored sideways with /Rotate 90, as scanners write them: the image
    # is turned counter-clockwise on the page, and the viewer turns it back clockwise.
    src = pymupdf.open()
    upright = src.new_page(width=400, height=200)
    upright.insert_text((40, 80), "RESTRICTED", fontsize=20, fontname="hebo")
    x0, y0, x1, y1 = [w[:4] for w in upright.get_text("words")][0]  # PDF points, as displayed
    pix = upright.get_pixmap(dpi=200, colorspace=pymupdf.csRGB, alpha=False)
    arr = np.frombuffer(pix.samples, np.uint8).reshape(pix.h, pix.w, 3)
    sideways = np.ascontiguousarray(np.rot90(arr, k=1))  # counter-clockwise: (w, h, 3)
    doc = pymupdf.open()
    page = doc.new_page(width=200, height=400)
    page.insert_image(
        page.rect,
        pixmap=pymupdf.Pixmap(pymupdf.csRGB, sideways.shape[1], sideways.shape[0], sideways.tobytes(), False),
        keep_proportion=False,
    )
    page.set_rotation(90)
    assert page.rect == pymupdf.Rect(0, 0, 400, 200)  # displayed as the upright page

    result = ocr_page(page, rapid_engine, mode="auto", dpi=150, min_text_chars=20, min_image_fraction=0.1)
    (region,) = result.regions
    assert region.rect == (0.0, 0.0, 200.0, 400.0)  # unrotated space
    stamp = find(result.lines, "RESTRICTED")
    # Worked by hand: shown upright, unrotated (x, y) is displayed at (400 - y, x), so a
    # displayed box (x0, y0, x1, y1) is the unrotated box (y0, 400 - x1, y1, 400 - x0).
    assert_box_near(stamp.box, (y0, 400 - x1, y1, 400 - x0), 0.5 * 20)


@pytest.mark.slow
def test_real_ocr_of_a_chart_in_a_born_digital_page(rapid_engine: RapidOcrEngine) -> None:
    # The chart is a picture of text; the page's own text layer is not OCR'd again.
    chart_src = pymupdf.open()
    chart = chart_src.new_page(width=300, height=120)
    chart.insert_text((20, 60), "Cloud share by region", fontsize=18, fontname="helv")
    pix = chart.get_pixmap(dpi=200, colorspace=pymupdf.csRGB, alpha=False)
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    for i in range(10):
        page.insert_text((72, 100 + 14 * i), "Body text of the report, line by line.", fontsize=10)
    page.insert_image(pymupdf.Rect(100, 400, 400, 520), pixmap=pix)
    result = ocr_page(page, rapid_engine, mode="auto", dpi=150, min_text_chars=50, min_image_fraction=0.05)
    assert [r.reason for r in result.regions] == ["image"]
    assert [ln.text for ln in result.lines] == ["Cloud share by region"]
    x0, y0, x1, y1 = result.lines[0].box
    # Drawn from (20, 60) - 18 pt text - in a 300 x 120 picture placed at (100, 400).
    assert 100 + 20 - 9 <= x0 <= 100 + 20 + 9 and 400 + 60 - 18 - 9 <= y0 <= 400 + 60


def test_sessions_that_fell_back_to_the_cpu_are_refused_when_cuda_was_asked() -> None:
    from types import SimpleNamespace

    from ragspine.ocr.rapid import _check_on_cuda

    def rapid(det: list[str], rec: list[str]) -> Any:
        # RapidOCR 1.4's layout: text_det.infer.session and text_rec.session.session are
        # onnxruntime InferenceSessions; only get_providers() is read.
        session = lambda providers: SimpleNamespace(get_providers=lambda: providers)  # noqa: E731
        return SimpleNamespace(text_det=SimpleNamespace(infer=SimpleNamespace(session=session(det))),
                               text_rec=SimpleNamespace(session=SimpleNamespace(session=session(rec))))

    cuda, cpu = ["CUDAExecutionProvider", "CPUExecutionProvider"], ["CPUExecutionProvider"]
    _check_on_cuda(rapid(cuda, cuda))  # both on the GPU: accepted
    with pytest.raises(OcrError, match=r"recognition did not start on CUDA.*CPUExecutionProvider"):
        _check_on_cuda(rapid(cuda, cpu))
    with pytest.raises(OcrError, match="detection did not start on CUDA"):
        _check_on_cuda(rapid(cpu, cuda))


def test_an_openvino_that_refuses_the_cache_property_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    import ragspine.ocr.rapid as rapid
    import ragspine.ocr.sessions as sessions

    # An unusable value makes this OpenVINO refuse the property, as one without it would.
    monkeypatch.setattr(sessions, "OV_SHAPE_CACHE", "not-a-number")
    session = sessions.OpenVinoSession(rapid._models_dir() / rapid._DET_MODEL, threads=1)
    out = session(np.zeros((1, 3, 64, 64), np.float32))[0]  # (1, 1, 64, 64) probability map
    assert out.shape == (1, 1, 64, 64)
