"""The model seams: Protocols, the :class:`EncodedPage` record, and template-method bases.

Every wrapper (ColPali family, ColBERT, cross-encoder, dense text) subclasses one of the
``Base*`` classes below. The public method of a base class validates its input, plans batches
(sorted by length or bucketed by image size), calls the subclass's ``_encode``/``_score`` once per
batch, checks that the batch gave exactly one finite result per input, and puts the results back
in the caller's order. Subclasses only turn one batch into numbers.

This module imports neither torch nor PIL at run time: the base install (no ``gpu`` extra) can
import it, type against the Protocols, and build :class:`EncodedPage` records from stored vectors.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

from ragspine.errors import InvalidRequestError
from ragspine.models.batch_plan import plan_batches, run_batched
from ragspine.models.errors import ModelOutputError

if TYPE_CHECKING:
    from PIL.Image import Image

logger = logging.getLogger(__name__)

TextKind = Literal["query", "document"]


# -- the page record ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class EncodedPage:
    """One page image as a multivector, ready to store.

    ``vectors`` holds one row per token the model attended to (padding rows already removed),
    float32, finite. ``image_mask`` marks the rows that form the image-patch grid, in row-major
    order, so ``vectors[image_mask].reshape(rows, cols, dim)`` is the patch grid (see
    :meth:`patch_grid`). Rows outside the mask are prompt and special tokens, and for ColIdefics3
    also the tokens of the global thumbnail image; they take part in MaxSim like any other row.
    ``grid`` is ``(rows, cols)`` of the patch grid after any token merge, or None when the model
    gives no spatial layout.
    """

    vectors: np.ndarray  # (n_tokens, dim) float32
    image_mask: np.ndarray  # (n_tokens,) bool
    grid: tuple[int, int] | None

    def __post_init__(self) -> None:
        v, m = self.vectors, self.image_mask
        if not isinstance(v, np.ndarray) or v.ndim != 2 or v.dtype != np.float32:
            raise ModelOutputError(
                f"EncodedPage.vectors must be a 2-D float32 array (n_tokens, dim); got "
                f"{type(v).__name__} with shape {getattr(v, 'shape', None)} and dtype "
                f"{getattr(v, 'dtype', None)}"
            )
        if v.shape[0] == 0:
            raise ModelOutputError("EncodedPage.vectors has no rows: the model kept no token")
        if not isinstance(m, np.ndarray) or m.dtype != np.bool_ or m.shape != (v.shape[0],):
            raise ModelOutputError(
                f"EncodedPage.image_mask must be a bool array of shape ({v.shape[0]},); got "
                f"shape {getattr(m, 'shape', None)} and dtype {getattr(m, 'dtype', None)}"
            )
        if not np.isfinite(v).all():
            bad = int((~np.isfinite(v)).any(axis=1).sum())
            raise ModelOutputError(
                f"EncodedPage.vectors has {bad} of {v.shape[0]} rows with NaN or inf; "
                "nothing non-finite may be stored or scored"
            )
        if self.grid is not None:
            rows, cols = self.grid
            n_image = int(m.sum())
            if rows <= 0 or cols <= 0 or rows * cols != n_image:
                raise ModelOutputError(
                    f"EncodedPage.grid {self.grid} does not match the {n_image} image tokens "
                    "marked in image_mask (rows * cols must equal the count)"
                )

    @property
    def n_tokens(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def patch_grid(self) -> np.ndarray:
        """The image-patch vectors as ``(rows, cols, dim)``, for row/column mean pooling."""
        if self.grid is None:
            raise ValueError("this page has no patch grid (grid is None)")
        rows, cols = self.grid
        return self.vectors[self.image_mask].reshape(rows, cols, self.dim)  # (rows, cols, dim)


@dataclass(frozen=True, slots=True, eq=False)
class PreparedPages:
    """Page images preprocessed for one encoder (:meth:`BasePageEncoder.prepare_pages`), in its
    batch plan: ``batches[k]`` is what its ``_encode_pages`` takes for the images ``plan[k]``."""

    encoder: Any
    n: int
    plan: list[list[int]]
    batches: list[Any]


# -- the Protocols (what callers type against) -------------------------------------------------


@runtime_checkable
class PageEncoder(Protocol):
    """Page images to multivectors, and query text to multivectors in the same space."""

    model_id: str
    revision: str
    dim: int

    def encode_pages(self, images: Sequence[Image]) -> list[EncodedPage]: ...

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One ``(n_tokens, dim)`` float32 array per text."""
        ...


@runtime_checkable
class TextMultiVectorEncoder(Protocol):
    """Late-interaction text encoder (ColBERT): one ``(n_tokens, dim)`` array per text."""

    model_id: str
    revision: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores candidate texts against a query; higher is more relevant."""

    model_id: str
    revision: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


@runtime_checkable
class DenseTextEncoder(Protocol):
    """One L2-normalised vector per text."""

    model_id: str
    revision: str
    dim: int

    def encode(self, texts: Sequence[str], kind: TextKind = "query") -> np.ndarray:
        """``(n, dim)`` float32, each row of unit length."""
        ...


# -- validation helpers ------------------------------------------------------------------------


def _check_texts(texts: Sequence[str], what: str) -> list[str]:
    if isinstance(texts, str):
        raise InvalidRequestError(
            f"{what} takes a sequence of strings, received a single str; wrap it in a list"
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidRequestError(f"{what}: item {i} is {type(t).__name__}, expected str")
    return out


def _check_multivector(arr: np.ndarray, dim: int, model_id: str, what: str, i: int) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[1] != dim:
        raise ModelOutputError(
            f"{model_id}: {what} {i} gave shape {getattr(arr, 'shape', None)}; "
            f"expected (n_tokens, {dim})"
        )
    if arr.shape[0] == 0:
        raise ModelOutputError(f"{model_id}: {what} {i} kept no token")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=1).sum())
        raise ModelOutputError(
            f"{model_id}: {what} {i} has {bad} of {arr.shape[0]} token vectors with NaN or "
            "inf (padding rows leaking through?); refusing to return them"
        )
    return np.ascontiguousarray(arr, dtype=np.float32)


# -- template-method bases ---------------------------------------------------------------------


class _ModelInfo:
    """Identity every wrapper exposes; the library record stores ``model_id`` and ``revision``."""

    model_id: str
    revision: str

    def __repr__(self) -> str:
        dim = getattr(self, "dim", None)
        extra = f", dim={dim}" if dim is not None else ""
        return (
            f"{type(self).__name__}(model_id={self.model_id!r}, revision={self.revision!r}{extra})"
        )


class BasePageEncoder(_ModelInfo, ABC):
    """Template for page encoders: subclasses implement ``_encode_pages`` and ``_encode_queries``.

    ``_bucket_key`` says which images the processor turns into the same shape (default: same
    pixel size); only those share a batch. ``_prepare_pages`` is the CPU half of a batch (image
    preprocessing); with ``prefetch`` = k > 0 it runs up to k batches ahead on k helper threads,
    so the accelerator is not left waiting for it (``_prepare_pages`` must be thread-safe then).
    """

    dim: int
    batch_size: int = 4
    query_batch_size: int = 32
    prefetch: int = 0

    def encode_pages(self, images: Sequence[Image]) -> list[EncodedPage]:
        images = self._check_images(images)
        if not images:
            return []
        pages = run_batched(
            images,
            self._plan(images),
            self._encode_pages,
            "encode_pages",
            self.model_id,
            prepare=self._prepare_pages,
            prefetch=self.prefetch,
        )
        return self._check_pages(pages)

    def prepare_pages(self, images: Sequence[Image]) -> PreparedPages:
        """The CPU half of :meth:`encode_pages` (checks, batch plan, preprocessing), so that a
        pipeline can prepare the next pages on its own threads while the device encodes these:
        ``encode_prepared(prepare_pages(x))`` equals ``encode_pages(x)``. Thread-safe when
        ``_prepare_pages`` is."""
        images = self._check_images(images)
        plan = self._plan(images) if images else []
        batches = [self._prepare_pages([images[i] for i in idx]) for idx in plan]
        return PreparedPages(self, len(images), plan, batches)

    def encode_prepared(self, prepared: PreparedPages) -> list[EncodedPage]:
        """The device half of :meth:`encode_pages`, over batches :meth:`prepare_pages` made."""
        if prepared.encoder is not self:
            raise ValueError("encode_prepared: these pages were prepared by another encoder")
        if not prepared.n:
            return []
        # The items are the images' positions, so each planned batch names its prepared one.
        ready = {tuple(idx): b for idx, b in zip(prepared.plan, prepared.batches, strict=True)}
        pages = run_batched(
            list(range(prepared.n)),
            prepared.plan,
            self._encode_pages,
            "encode_pages",
            self.model_id,
            prepare=lambda idx: ready[tuple(idx)],
        )
        return self._check_pages(pages)

    def _check_images(self, images: Sequence[Image]) -> list[Image]:
        images = list(images)
        from PIL.Image import Image as _PILImage  # lazy: PIL comes with the gpu extra

        for i, im in enumerate(images):
            if not isinstance(im, _PILImage):
                raise InvalidRequestError(
                    f"encode_pages: item {i} is {type(im).__name__}, expected a PIL.Image.Image"
                )
            if im.width < 1 or im.height < 1:
                raise InvalidRequestError(f"encode_pages: image {i} is empty ({im.size})")
        return images

    def _plan(self, images: list[Image]) -> list[list[int]]:
        return plan_batches(
            [-(im.width * im.height) for im in images],
            self.batch_size,
            [self._bucket_key(im) for im in images],
        )

    def _check_pages(self, pages: list[EncodedPage]) -> list[EncodedPage]:
        for i, p in enumerate(pages):
            if not isinstance(p, EncodedPage) or p.dim != self.dim:
                raise ModelOutputError(
                    f"{self.model_id}: page {i} came back as {type(p).__name__} with dim "
                    f"{getattr(p, 'dim', None)}; expected an EncodedPage of dim {self.dim}"
                )
        return pages

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        texts = _check_texts(texts, "encode_queries")
        if not texts:
            return []
        blank = [i for i, t in enumerate(texts) if not t.strip()]
        if blank:
            raise InvalidRequestError(
                f"encode_queries: queries {blank[:5]} are empty or whitespace; a visual query "
                "needs at least one word"
            )
        plan = plan_batches([-len(t) for t in texts], self.query_batch_size)
        out = run_batched(texts, plan, self._encode_queries, "encode_queries", self.model_id)
        return [
            _check_multivector(q, self.dim, self.model_id, "query", i) for i, q in enumerate(out)
        ]

    def _bucket_key(self, image: Image) -> Hashable:
        return image.size

    def _prepare_pages(self, images: list[Image]) -> Any:
        """CPU preprocessing of one batch; its result is what ``_encode_pages`` receives."""
        return images

    @abstractmethod
    def _encode_pages(self, prepared: Any) -> list[EncodedPage]:
        """One prepared batch (same bucket) to one EncodedPage per image, in the same order."""

    @abstractmethod
    def _encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        """One batch of query texts to one ``(n_tokens, dim)`` float32 array each."""


class BaseTextMultiVectorEncoder(_ModelInfo, ABC):
    """Template for ColBERT-style encoders: subclasses implement ``_encode(texts, kind)``."""

    dim: int
    batch_size: int = 32

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self._encode_all(texts, "query")

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self._encode_all(texts, "document")

    def _encode_all(self, texts: Sequence[str], kind: TextKind) -> list[np.ndarray]:
        texts = _check_texts(texts, f"encode_{kind}s")
        if not texts:
            return []
        plan = plan_batches([-len(t) for t in texts], self.batch_size)
        out = run_batched(
            texts, plan, lambda b: self._encode(b, kind), f"encode_{kind}s", self.model_id
        )
        return [_check_multivector(v, self.dim, self.model_id, kind, i) for i, v in enumerate(out)]

    @abstractmethod
    def _encode(self, texts: list[str], kind: TextKind) -> list[np.ndarray]:
        """One batch of texts to one ``(n_tokens, dim)`` float32 array each."""


class BaseReranker(_ModelInfo, ABC):
    """Template for rerankers: subclasses implement ``_score(query, texts)``."""

    batch_size: int = 32

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not isinstance(query, str):
            raise InvalidRequestError(f"score: query is {type(query).__name__}, expected str")
        texts = _check_texts(texts, "score")
        if not texts:
            return []
        plan = plan_batches([-len(t) for t in texts], self.batch_size)
        out = run_batched(texts, plan, lambda b: self._score(query, b), "score", self.model_id)
        scores = [float(s) for s in out]
        bad = [i for i, s in enumerate(scores) if not np.isfinite(s)]
        if bad:
            raise ModelOutputError(
                f"{self.model_id}: non-finite rerank scores for candidates {bad[:5]}"
            )
        return scores

    @abstractmethod
    def _score(self, query: str, texts: list[str]) -> Sequence[float]:
        """One batch of candidate texts to one relevance score each."""


class BaseDenseTextEncoder(_ModelInfo, ABC):
    """Template for dense text encoders: subclasses implement ``_encode(texts, kind)``.

    The base class L2-normalises, so every subclass returns unit-length rows.
    """

    dim: int
    batch_size: int = 64

    def encode(self, texts: Sequence[str], kind: TextKind = "query") -> np.ndarray:
        if kind not in ("query", "document"):
            raise InvalidRequestError(f"encode: kind must be 'query' or 'document', got {kind!r}")
        texts = _check_texts(texts, "encode")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        plan = plan_batches([-len(t) for t in texts], self.batch_size)

        def run(batch: list[str]) -> list[np.ndarray]:
            arr = np.asarray(self._encode(batch, kind), dtype=np.float32)  # (b, dim)
            if arr.shape != (len(batch), self.dim):
                raise ModelOutputError(
                    f"{self.model_id}: encode gave shape {arr.shape} for {len(batch)} texts; "
                    f"expected ({len(batch)}, {self.dim})"
                )
            return list(arr)

        rows = run_batched(texts, plan, run, "encode", self.model_id)
        out = np.stack(rows).astype(np.float32, copy=False)  # (n, dim)
        if not np.isfinite(out).all():
            raise ModelOutputError(f"{self.model_id}: dense vectors contain NaN or inf")
        norms = np.linalg.norm(out, axis=1, keepdims=True)  # (n, 1)
        return out / np.maximum(norms, 1e-12)  # (n, dim), unit rows

    @abstractmethod
    def _encode(self, texts: list[str], kind: TextKind) -> np.ndarray:
        """One batch of texts to a ``(len(texts), dim)`` array."""
