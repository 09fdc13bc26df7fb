"""RapidOCR (PP-OCRv4 detection + recognition on onnxruntime, CPU) as an :class:`OcrEngine`.

``rapidocr-onnxruntime`` ships the ONNX models inside its wheel: nothing is downloaded at run
time. The models are loaded once per engine, on the first :meth:`RapidOcrEngine.recognize`,
under a lock; calls are serialised (onnxruntime already uses every core for one image).

Choices measured on rendered report pages (rapidocr-onnxruntime 1.4.4, bench/ocr_engine.py):

* Crops are scaled to the recogniser's input height (48 px) here, with Lanczos, before
  recognition. RapidOCR's own (bilinear) scaling of a 9 pt line from 23 px (150 dpi) to 48 px
  made the recogniser drop most spaces: 38 % of the body's words came out as words, against
  100 % with Lanczos; at 120, 150 and 200 dpi, 88 %, 38 % and 73 % (bilinear) against 100 %,
  100 % and 99.9 % (Lanczos) on a 9 pt A4 page (same characters either way, only spaces).
  So detection goes through ``RapidOCR.__call__(use_rec=False)`` and recognition through
  its ``get_crop_img_list`` and ``text_rec`` (public names of the 1.4 series; the version
  is pinned).
* The 0/180-degree direction classifier is off. It squeezes each line crop into 192 x 48
  pixels, so on long body-text lines (aspect 35:1) it answered "180" with 0.94-0.99
  confidence, the line was read upside down as "ss" (score 0.24) and dropped: 4 of 6 lines
  of a test page were lost. Renders are upright as displayed.
* Text set vertically is still read: PP-OCR turns a crop at least 1.5 times taller than wide
  by 90 degrees counter-clockwise, which suits text that reads top to bottom; the crop is
  also read turned clockwise (the usual vertical stamp reads bottom to top) and the reading
  with the higher score is kept.
* Word boxes (``return_word_box``) are not used: in 1.4.4 they are one box per character,
  English included, and the gaps between them did not separate words in proportional fonts
  (spaces measured 1.4-1.5 x the median character spacing, as did "m" and "w"). Glued words
  are split by :func:`ragspine.ocr.split_glued`.
* RapidOCR's downscale of images over 2000 px is lifted to ``max_side_px``, so the render's
  dpi, chosen by the caller, decides the resolution.
* The same two ONNX models run on OpenVINO when it is installed (``backend="auto"``): on one
  dense A4 scan at 120 dpi (53 lines, bench/ocr_engine.py, one thread) recognition took
  7.9 s on onnxruntime, 3.9 s on OpenVINO in float32 (outputs equal to 2.5e-4) and 2.7 s in
  OpenVINO's default precision on a CPU with AMX (bfloat16; 52 of 53 lines read alike, every
  word still read). Recognition is ~94 % of a page's OCR, detection the rest. RapidOCR keeps
  its pre- and post-processing; only the two sessions are swapped
  (:class:`ragspine.ocr.sessions.OpenVinoSession`).
* On a GPU the same ONNX files run on torch (``backend="torch"``, converted by onnx2torch at
  load, :class:`ragspine.ocr.sessions.TorchSession`), or on onnxruntime-gpu's CUDA provider
  where that wheel replaces the CPU one. Recognition reduces its (crops, steps, 6,625 classes)
  scores to the best class and its probability on the device: the full scores of one page's
  lines are ~150 MB to copy back, the reduced ones ~50 kB. Measured on one H200 against
  onnxruntime on the same machine's 16 cores (bench/ocr_device.py, 40 MMLongBench pages,
  1,473 lines): 2.4-3.0 pages/s against 1.2-1.4 (1.7-2.2x), 90 % of the lines read with the
  same text. Recognition batches stay RapidOCR's 6 crops on the GPU too: 32 gave 3.7 pages/s
  but 73 % of lines alike (a batch pads its crops to the widest, and the recogniser's sequence
  mixing sees the padding). The rest of the gap is TF32, torch's default for float32
  convolutions on the GPU: with it off, every line matched, at 0.9 pages/s.
* ``threads``: one engine per worker process with one thread each beats one engine on every
  core (onnxruntime and OpenVINO alike: ragspine.indexing.ocr_pool).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ragspine.ocr.base import (
    Box,
    OcrError,
    OcrInputError,
    OcrLine,
    OcrUnavailableError,
    check_rgb_image,
)
from ragspine.ocr.sessions import (
    OpenVinoSession,
    ReducedCtcDecode,
    TorchSession,
    torch_cuda_status,
    torch_import_status,
)

logger = logging.getLogger(__name__)

#: Lines read with a lower mean character probability are dropped (RapidOCR's default).
DEFAULT_TEXT_SCORE = 0.5
#: RapidOCR scales images whose longest side exceeds this down before detection; the
#: renderer already caps renders at 4000 px (ragspine.ocr.plan.MAX_SIDE_PX).
DEFAULT_MAX_SIDE_PX = 4000
#: A detected box at least this many times taller than wide holds vertical text (PP-OCR's
#: own threshold for turning a crop).
_VERTICAL_ASPECT = 1.5
#: PP-OCRv4's recogniser input height in pixels, when the loaded model does not say.
_REC_HEIGHT = 48
#: The longest side of a detection input, in pixels. RapidOCR brings an image's short side up
#: to 736 px before detection with no bound on the long side: a 2000 x 300 px banner became
#: 4907 x 736, and OpenVINO keeps memory for the largest input it has seen (detection on
#: 1536 x 1024 took ~270 MB, on 2304 x 1792 ~570 MB). Boxes found on the scaled image are read
#: from the full-resolution crop, as before. bench/ocr.py (162 pages, two workers): 2,048 read
#: what no cap read (nDCG@10 0.4422), 1,280 read less (0.4390).
_DET_MAX_SIDE = 2048
#: ... and an image is enlarged at most this many times for detection: RapidOCR took a
#: 150 x 36 px stamp image to 3066 x 736 px (20x) to find its one line. The 69 MMLongBench pages
#: whose only regions are stamp-sized band images (what a first phase reads): 20.4 s -> 15.0 s
#: on one thread, as many lines read (293), every stamp test still read; at 2x, 10.5 s but 281.
_DET_MAX_UPSCALE = 4.0
#: Detected quads narrower or lower than this (pixels) hold nothing readable.
_MIN_SIDE_PX = 2.0
#: The narrowest recognition batch, in pixels at the recogniser's 48 px height. RapidOCR pads
#: every batch of crops to at least 320 px (PaddleOCR's training width), so a batch of six short
#: chart labels ran as six 320 px lines: over 29 MMLongBench slide and chart pages at 120 dpi,
#: 1.43 padded pixels for every pixel of text. At 64 px (the OpenVINO session's width step) a
#: batch is as wide as its widest crop. Same process, one thread, OpenVINO, those pages
#: (AMD Zen 4): 1.36-1.41 -> 1.50-1.53 pages/s; the dense synthetic A4 page of
#: bench/ocr_engine.py (long lines, wider than 320 px anyway) reads the same words at 100, 120
#: and 150 dpi; bench/ocr.py's nDCG@10: docs/measured.md ("The recogniser's 320 px floor").
REC_MIN_WIDTH = 64
_RAPIDOCR_REC_MIN_WIDTH = 320

_PACKAGE = "rapidocr-onnxruntime"

#: Inference backends of the two ONNX models: ``auto`` is OpenVINO when it imports, else
#: onnxruntime on the CPU; on CUDA, torch when it sees a GPU, else onnxruntime-gpu (see the
#: module doc and :func:`resolve_backend`).
OcrBackend = Literal["auto", "openvino", "onnxruntime", "torch"]
BACKENDS: tuple[str, ...] = get_args(OcrBackend)
#: Where the models run: ``cuda`` is a GPU through torch or onnxruntime-gpu; ``auto`` is
#: ``cpu`` (see :func:`resolve_device`).
OcrDevice = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = get_args(OcrDevice)
_CUDA_PROVIDER = "CUDAExecutionProvider"


class RapidOcrEngine:
    """PP-OCRv4 (Chinese + English) via ``rapidocr_onnxruntime``; see the module doc."""

    def __init__(
        self,
        *,
        text_score: float = DEFAULT_TEXT_SCORE,
        max_side_px: int = DEFAULT_MAX_SIDE_PX,
        threads: int | None = None,
        backend: OcrBackend = "auto",
        device: OcrDevice = "cpu",
    ) -> None:
        if not 0.0 <= text_score <= 1.0:
            raise OcrInputError(f"text_score must be in [0, 1], got {text_score}")
        if max_side_px < 32:
            raise OcrInputError(f"max_side_px must be at least 32 pixels, got {max_side_px}")
        if threads is not None and threads < 1:
            raise OcrInputError(f"threads must be at least 1 or None (all cores), got {threads}")
        if backend not in BACKENDS:
            raise OcrInputError(f"OCR backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.text_score = float(text_score)
        self.max_side_px = int(max_side_px)
        self.threads = threads
        self.device: str = resolve_device(device, backend)
        self.backend: str = resolve_backend(backend, self.device)
        # The backend and device are part of the name (and so of the OCR cache key): their
        # readings may differ from onnxruntime's on the CPU in a character now and then.
        self.name = (f"rapidocr-onnxruntime:ppocrv4:score={self.text_score:g}:side={self.max_side_px}"
                     + (f":recw={REC_MIN_WIDTH}" if REC_MIN_WIDTH != _RAPIDOCR_REC_MIN_WIDTH else "")
                     + (f":{self.backend}" if self.backend in ("openvino", "torch") else "")
                     + (":cuda" if self.device == "cuda" else ""))
        self._ocr: Any = None  # rapidocr_onnxruntime.RapidOCR, created by _load()
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    def _load(self) -> Any:
        if self._ocr is not None:
            return self._ocr
        with self._load_lock:
            if self._ocr is None:
                try:
                    from rapidocr_onnxruntime import RapidOCR
                except ImportError as exc:
                    raise OcrUnavailableError(_PACKAGE, "OCR") from exc
                kwargs: dict[str, Any] = {
                    "use_cls": False,
                    # Filtered here after the vertical re-reading, not inside RapidOCR.
                    "text_score": 0.0,
                    "max_side_len": self.max_side_px,
                }
                if self.threads is not None:
                    kwargs["intra_op_num_threads"] = self.threads
                if self.device == "cuda" and self.backend == "onnxruntime":
                    kwargs.update(det_use_cuda=True, rec_use_cuda=True)
                try:
                    ocr = RapidOCR(**kwargs)
                    channels, height = ocr.text_rec.rec_image_shape[:2]
                    ocr.text_rec.rec_image_shape = [channels, height, REC_MIN_WIDTH]
                    if _DET_MAX_SIDE:
                        det = ocr.text_det
                        det.get_preprocess = lambda _longest: _det_resize(det.limit_side_len, _DET_MAX_SIDE,
                                                                          det.mean, det.std)
                    if self.device == "cuda" and self.backend == "onnxruntime":
                        _check_on_cuda(ocr)
                    models = _models_dir()
                    if self.backend == "openvino":
                        ocr.text_det.infer = OpenVinoSession(models / _DET_MODEL, self.threads)
                        ocr.text_rec.session = OpenVinoSession(models / _REC_MODEL, self.threads)
                    elif self.backend == "torch":
                        self._on_torch(ocr, models)
                    self._ocr = ocr
                except OcrError:
                    raise
                except Exception as exc:
                    raise OcrError(
                        f"could not load the RapidOCR models ({type(exc).__name__}: {exc}); "
                        f"reinstall them with: pip install --force-reinstall {_PACKAGE}"
                    ) from exc
                logger.info("loaded RapidOCR (PP-OCRv4 det + rec on %s, %s)", self.backend, self.name)
        return self._ocr

    def _on_torch(self, ocr: Any, models: Path) -> None:
        """RapidOCR's two sessions swapped for the models converted to torch, on this engine's
        device; a failure names torch, not RapidOCR's wheel."""
        where = "cuda" if self.device == "cuda" else "cpu"
        try:
            det = TorchSession(models / _DET_MODEL, where, self.threads)
            rec = TorchSession(models / _REC_MODEL, where, self.threads, reduce_classes=True)
        except Exception as exc:  # a conversion onnx2torch refuses, CUDA out of memory, a driver
            raise OcrError(f"could not run the OCR models on torch ({where}): {type(exc).__name__}: {exc}") from exc
        ocr.text_det.infer = det
        ocr.text_rec.session = rec
        ocr.text_rec.postprocess_op = ReducedCtcDecode(ocr.text_rec.postprocess_op)

    def recognize(self, image: np.ndarray) -> list[OcrLine]:
        """Lines read from ``image``, an ``(h, w, 3)`` uint8 RGB array; boxes in its pixels."""
        rgb = check_rgb_image(image)
        h, w = rgb.shape[:2]
        ocr = self._load()
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # (h, w, 3): PP-OCR models read BGR
        try:
            with self._run_lock:
                lines = self._read(ocr, bgr)
        except OcrError:
            raise
        except Exception as exc:
            raise OcrError(
                f"RapidOCR failed on a {w} x {h} pixel image ({type(exc).__name__}: {exc})"
            ) from exc
        return lines

    def _read(self, ocr: Any, bgr: np.ndarray) -> list[OcrLine]:
        """Detect, crop, resize each crop to the recogniser's height, recognise (batched)."""
        h, w = bgr.shape[:2]
        found, _ = ocr(bgr, use_det=True, use_cls=False, use_rec=False)  # quads, or None
        quads = [np.asarray(q, dtype=np.float32).reshape(4, 2) for q in (found or [])]  # (4, 2) px
        quads = [q for q in quads if min(_side_lengths(q)) >= _MIN_SIDE_PX]
        if not quads:
            return []
        # Upright crops; PP-OCR turns a crop >= 1.5 x taller than wide counter-clockwise.
        crops = ocr.get_crop_img_list(bgr, quads)
        boxes = [quad_to_box(q, w, h) for q in quads]
        height = _rec_height(ocr)
        batch = [_resize_to_height(c, height) for c in crops]  # (height, w_i, 3) each
        vertical = [i for i, q in enumerate(quads) if _is_vertical(_side_lengths(q))]
        batch += [np.ascontiguousarray(np.rot90(batch[i], k=2)) for i in vertical]  # clockwise
        read, _ = ocr.text_rec(batch)  # [(text, score)], one per crop, in order
        if len(read) != len(batch):
            raise OcrError(f"RapidOCR read {len(read)} crops of {len(batch)}")
        readings = [(str(t), float(sc)) for t, sc, *_ in read]
        for k, i in enumerate(vertical):
            other = readings[len(crops) + k]
            if other[1] > readings[i][1]:
                readings[i] = other
        lines: list[OcrLine] = []
        for box, (text, score) in zip(boxes, readings[: len(crops)]):
            text = text.strip()
            if text and score >= self.text_score:
                lines.append(OcrLine(text=text, box=box, score=score))
        return lines


_DET_MODEL = "ch_PP-OCRv4_det_infer.onnx"
_REC_MODEL = "ch_PP-OCRv4_rec_infer.onnx"


def _models_dir() -> Path:
    """The ONNX models inside the rapidocr-onnxruntime wheel."""
    import rapidocr_onnxruntime

    return Path(rapidocr_onnxruntime.__file__).resolve().parent / "models"


def openvino_available() -> bool:
    """Whether OpenVINO's runtime imports here."""
    try:
        import openvino  # noqa: F401
    except Exception:  # an ImportError, or a wheel that cannot load on this CPU / libc
        return False
    return True


def resolve_backend(backend: str, device: str = "cpu") -> str:
    """The backend that runs the models on ``device`` (``cpu`` or ``cuda``, as resolved by
    :func:`resolve_device`).

    On the CPU, ``auto`` is ``openvino`` when it imports, else ``onnxruntime``; an explicit
    ``openvino`` that cannot import raises :class:`OcrUnavailableError`; ``torch`` runs the
    converted models on the CPU (slower than OpenVINO, kept for checking the GPU path).
    On CUDA, ``auto`` is ``torch`` when torch sees a GPU and onnx2torch imports, else
    onnxruntime-gpu; OpenVINO has no CUDA device."""
    if backend not in BACKENDS:
        raise OcrInputError(f"OCR backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if device == "cuda":
        if backend == "openvino":
            raise OcrInputError(_OPENVINO_ON_CUDA)
        if backend == "auto":
            return "torch" if torch_cuda_status() is None else "onnxruntime"
        return backend
    if backend == "torch":
        missing = torch_import_status()
        if missing is not None:
            raise OcrUnavailableError(missing, "OCR on torch (RAGSPINE_OCR_BACKEND=torch)")
        return backend
    if backend == "onnxruntime":
        return backend
    if openvino_available():
        return "openvino"
    if backend == "openvino":
        raise OcrUnavailableError("openvino", "OCR on OpenVINO (RAGSPINE_OCR_BACKEND=openvino)")
    return "onnxruntime"


def _det_resize_class() -> type:
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

    class DetResize(DetPreProcess):  # type: ignore[misc]
        """RapidOCR's resize before detection (the short side brought up to 736 px, both to
        multiples of 32), with the long side capped at ``max_side`` px; see _DET_MAX_SIDE."""

        def __init__(self, short_side: int, max_side: int, mean: Any, std: Any) -> None:
            super().__init__(short_side, "min", mean, std)
            self.max_side = max_side

        def resize(self, img: np.ndarray) -> np.ndarray | None:
            import cv2

            h, w = img.shape[:2]
            ratio = min(max(1.0, self.limit_side_len / max(1, min(h, w))), _DET_MAX_UPSCALE)
            ratio = min(ratio, self.max_side / max(h, w))
            rh, rw = (max(32, round(h * ratio / 32) * 32), max(32, round(w * ratio / 32) * 32))
            return cv2.resize(img, (rw, rh))

        def __call__(self, img: np.ndarray) -> np.ndarray:
            """The resized image normalised into the model's (1, 3, h, w) float32 input, as
            RapidOCR's own ``__call__`` does, by table. RapidOCR normalises in float64, then
            transposes and copies to float32: 25-31 ms for a 1280 x 960 page, ~4 % of the page's
            OCR on one thread. A uint8 pixel has 256 values, so a table of RapidOCR's own
            ``normalize`` over them gives the same float32 values bit for bit, written straight
            into the model's layout in ~6 ms."""
            resized = self.resize(img)  # (h, w, 3) uint8: the engine reads only checked RGB images
            ramp = np.repeat(np.arange(256, dtype=np.uint8).reshape(256, 1, 1), 3, axis=2)  # (256, 1, 3)
            table = np.asarray(self.normalize(ramp), dtype=np.float32)[:, 0, :]  # (256, 3)
            out = np.empty((1, 3, *resized.shape[:2]), dtype=np.float32)
            for c in range(3):
                np.take(table[:, c], resized[:, :, c], out=out[0, c])
            return out

    return DetResize


def _det_resize(short_side: int, max_side: int, mean: Any, std: Any) -> Any:
    """RapidOCR's detection resize with the long side capped (the class is built on first use:
    rapidocr_onnxruntime is imported only when an engine loads)."""
    global _DET_RESIZE
    if _DET_RESIZE is None:
        _DET_RESIZE = _det_resize_class()
    return _DET_RESIZE(short_side, max_side, mean, std)


_DET_RESIZE: Any = None


def resolve_device(device: str, backend: str = "auto") -> str:
    """``auto`` -> ``cpu``: on one H200, OCR read 1.6x a pool of 16 one-thread onnxruntime
    workers on the same machine and 10 % of lines differently, while the product's pool runs
    OpenVINO, 2-3x onnxruntime a thread (docs/measured.md). ``cuda`` -> ``cuda`` when ``backend`` can run there: torch with a
    GPU and onnx2torch (``backend`` auto or torch), or onnxruntime's CUDA provider (auto or
    onnxruntime); else :class:`OcrUnavailableError` naming what is missing."""
    if device not in DEVICES:
        raise OcrInputError(f"OCR device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device != "cuda":
        return "cpu"
    if backend == "openvino":
        raise OcrInputError(_OPENVINO_ON_CUDA)
    torch_missing = torch_cuda_status() if backend in ("auto", "torch") else None
    if backend == "torch" and torch_missing is None:
        return "cuda"
    ort_missing = _ort_cuda_status() if backend in ("auto", "onnxruntime") else None
    if backend == "onnxruntime" and ort_missing is None:
        return "cuda"
    if backend == "auto" and (torch_missing is None or ort_missing is None):
        return "cuda"
    missing = "; ".join(m for m in (torch_missing, ort_missing) if m)
    needs = {"torch": "torch with a CUDA device and onnx2torch (pip install 'ragspine[gpu]')",
             "onnxruntime": "onnxruntime-gpu's CUDA provider"}.get(
        backend, "torch with a CUDA device and onnx2torch (pip install 'ragspine[gpu]'), or onnxruntime-gpu")
    raise OcrUnavailableError(needs, "OCR on a GPU (RAGSPINE_OCR_DEVICE=cuda)", detail=missing)


_OPENVINO_ON_CUDA = ("OCR backend openvino runs on the CPU only: with RAGSPINE_OCR_DEVICE=cuda "
                     "use RAGSPINE_OCR_BACKEND=auto, torch or onnxruntime")


def _ort_cuda_status() -> str | None:
    """None when onnxruntime has its CUDA provider here, else why not (one line)."""
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime does not import"
    providers = onnxruntime.get_available_providers()
    if _CUDA_PROVIDER in providers:
        return None
    return (f"this onnxruntime has only {', '.join(providers)}; for onnxruntime-gpu: "
            f"pip uninstall onnxruntime, then pip install onnxruntime-gpu")


def _check_on_cuda(ocr: Any) -> None:
    """RapidOCR falls back to the CPU with a warning when CUDA cannot start (a driver or cuDNN
    that does not match the wheel): asked for a GPU, ragspine says so instead."""
    sessions = {"detection": getattr(getattr(ocr.text_det, "infer", None), "session", None),
                "recognition": getattr(getattr(ocr.text_rec, "session", None), "session", None)}
    for what, session in sessions.items():
        providers = session.get_providers() if session is not None else []
        if not providers or providers[0] != _CUDA_PROVIDER:
            raise OcrError(f"OCR {what} did not start on CUDA (providers: {providers or 'none'}): check that "
                           "the NVIDIA driver, CUDA and cuDNN match the onnxruntime-gpu wheel")


def quad_to_box(quad: Sequence[Sequence[float]], width: int, height: int) -> Box:
    """The axis-aligned box around a quadrilateral's corners, clipped to a ``width`` x
    ``height`` image; all in pixels."""
    pts = np.asarray(quad, dtype=np.float64).reshape(-1, 2)  # (4, 2) x, y
    x0, y0 = pts.min(axis=0)
    x1, y1 = pts.max(axis=0)
    return (
        float(min(max(x0, 0.0), width)),
        float(min(max(y0, 0.0), height)),
        float(min(max(x1, 0.0), width)),
        float(min(max(y1, 0.0), height)),
    )


def _side_lengths(quad: np.ndarray) -> tuple[float, float]:
    """Width and height (pixels) of a quadrilateral given as 4 corners clockwise from top-left."""
    width = max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[2] - quad[3]))
    height = max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2]))
    return float(width), float(height)


def _rec_height(ocr: Any) -> int:
    """The recogniser's input height in pixels (48 for PP-OCRv4)."""
    shape = getattr(getattr(ocr, "text_rec", None), "rec_image_shape", None)
    return int(shape[1]) if shape else _REC_HEIGHT


def _resize_to_height(crop: np.ndarray, height: int) -> np.ndarray:
    """``crop`` (h, w, 3) scaled with Lanczos to (height, w * height / h, 3); see the module doc."""
    from PIL import Image  # Pillow comes with rapidocr-onnxruntime

    h, w = crop.shape[:2]
    if h == height:
        return crop
    new_w = max(1, round(w * height / h))
    return np.asarray(Image.fromarray(crop).resize((new_w, height), Image.Resampling.LANCZOS))


def _is_vertical(sides: tuple[float, float]) -> bool:
    """Whether PP-OCR turned the crop of a quad with these (width, height) in pixels."""
    width, height = sides
    return height >= _VERTICAL_ASPECT * width
