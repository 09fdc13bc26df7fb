"""The OCR seam: one engine protocol, its line type, and the package's errors.

An engine reads text from one RGB image and returns lines with boxes in that image's
pixels. Everything that knows about PDF pages (what to render, how to map boxes back to
PDF points) lives in :mod:`ragspine.ocr.plan` and :mod:`ragspine.ocr.page`, so a second
engine only has to implement :meth:`OcrEngine.recognize`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ragspine.errors import RagspineError

#: An axis-aligned box ``(x0, y0, x1, y1)``, origin top-left, ``x0 <= x1`` and ``y0 <= y1``.
#: The unit (pixels or PDF points) is stated wherever a box is stored.
Box = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One line of text read from an image."""

    text: str
    box: Box  # image pixels, x0, y0, x1, y1
    score: float  # the engine's confidence, 0..1


@runtime_checkable
class OcrEngine(Protocol):
    """Reads text lines from an RGB image.

    ``recognize`` takes an ``(h, w, 3)`` uint8 RGB array and returns the lines it read, each
    with a non-empty ``text`` and a ``box`` in that image's pixels. The order of the lines is
    free: :func:`ragspine.ocr.ocr_page` sorts them into reading order.
    """

    #: Names the engine and its settings; part of the OCR cache key, so two engines that
    #: read differently must have different names.
    name: str

    def recognize(self, image: np.ndarray) -> list[OcrLine]: ...


# -- errors ----------------------------------------------------------------------------------


class OcrError(RagspineError):
    """OCR failed on an input it should have handled (an engine crash, unloadable models)."""

    status = 500
    type = "ocr-failed"
    title = "OCR failed"


class OcrInputError(OcrError):
    """An argument the OCR functions cannot use (an image of the wrong shape, an unknown mode)."""

    status = 422
    type = "invalid-ocr-input"
    title = "Invalid OCR input"


class OcrUnavailableError(OcrError):
    """A package OCR needs is not installed; the message names the ``pip install`` to run."""

    status = 501
    type = "missing-extra"
    title = "Optional dependency missing"

    def __init__(self, package: str, purpose: str, *, detail: str | None = None) -> None:
        # ``detail`` replaces "not installed" where what is missing is more than one package
        # (a GPU, a provider): the message then says what was found instead.
        super().__init__(
            f"{purpose} needs {package}: {detail}" if detail else
            f"{purpose} needs the '{package}' package, which is not installed: "
            f"pip install {package}"
        )


def check_rgb_image(image: object) -> np.ndarray:
    """Return ``image`` if it is an ``(h, w, 3)`` uint8 array with h, w >= 1, else raise
    :class:`OcrInputError` saying what was received."""
    if not isinstance(image, np.ndarray):
        raise OcrInputError(
            f"OCR takes a numpy array, got {type(image).__name__}; pass an (h, w, 3) uint8 RGB "
            "array (e.g. from ragspine.ocr.render_region)"
        )
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise OcrInputError(
            f"OCR takes an (h, w, 3) uint8 RGB array, got shape {image.shape} dtype {image.dtype}; "
            "convert gray or RGBA images to RGB first"
        )
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise OcrInputError(f"OCR got an empty image of shape {image.shape}; nothing to read")
    return image
