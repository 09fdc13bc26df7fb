"""The CPU half of a ColPali-family page encoder: a batch of page images to the model's inputs
and where each page's patch grid lies in them.

One class per family. A :class:`PagePrep` holds the processor and the few model settings its
layout needs (a patch size, a merge size), never the model, so it travels to a prep process
(:mod:`ragspine.models.prep_processes`): pickled, it is rebuilt there from its constructor's
arguments. Each thread that prepares pages uses its own copy of the processor (a fast tokenizer
shared between threads fails with 'Already borrowed').
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
import math
import re
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ragspine.models.errors import ModelLoadError, ModelOutputError
from ragspine.models.idefics3_prep import Idefics3Tiles

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one page's patch grid sits in its processed sequence."""

    image_mask: np.ndarray  # (seq,) bool, True on the grid's tokens
    grid: tuple[int, int]  # (rows, cols)
    #: Sequence positions to read each output row from (a permutation of range(seq)), when the
    #: model's token order is not row-major over the grid; None keeps the order.
    order: np.ndarray | None = None


def check_grid(model_id: str, grid: tuple[int, int], n_image: int, i: int) -> None:
    if grid[0] * grid[1] != n_image:
        raise ModelOutputError(
            f"{model_id}: image {i} has {n_image} image tokens but a {grid[0]}x{grid[1]} patch "
            "grid; the processor and the model disagree"
        )


class PagePrep(ABC):
    """A family's page preparation: ``prepare(images)`` -> (batch of model inputs, layouts)."""

    def __init__(self, processor: Any, model_id: str) -> None:
        self.processor = processor
        self.model_id = model_id
        self._local = threading.local()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Rebuilt from the constructor's arguments: the thread-local copies stay behind.
        return type(self), self._args()

    def _args(self) -> tuple[Any, ...]:
        return self.processor, self.model_id

    def processor_for_thread(self) -> Any:
        """The processor for the calling thread: the main thread's own, another thread's copy."""
        if threading.current_thread() is threading.main_thread():
            return self.processor
        proc = getattr(self._local, "processor", None)
        if proc is None:
            proc = self._local.processor = copy.deepcopy(self.processor)
        return proc

    def prepare(self, images: list[Image]) -> tuple[Any, list[Layout]]:
        """One batch of pages (the same bucket) as the model's inputs, on the CPU, unpinned."""
        proc = self.processor_for_thread()
        batch = self.process_images(proc, images)
        batch.pop("labels", None)  # ColPali's processor adds LM labels; never needed here
        return batch, self.layout(proc, batch, images)

    def bucket_key(self, image: Image) -> Hashable:
        """Pages of one key become inputs of one shape, so they may share a batch."""
        return image.size

    def process_images(self, proc: Any, images: list[Image]) -> Any:
        return proc.process_images(images)

    @abstractmethod
    def layout(self, proc: Any, batch: Any, images: list[Image]) -> list[Layout]:
        """Where each page's patch grid lies in the processed ``batch``."""

    @staticmethod
    def image_mask(proc: Any, batch: Any) -> np.ndarray:
        return proc.get_image_mask(batch).cpu().numpy().astype(bool)  # (b, seq)


class ColPaliPrep(PagePrep):
    """ColPali: every page resized to one square; patches row-major."""

    def __init__(self, processor: Any, model_id: str, patch_size: int) -> None:
        super().__init__(processor, model_id)
        self.patch_size = int(patch_size)

    def _args(self) -> tuple[Any, ...]:
        return self.processor, self.model_id, self.patch_size

    def bucket_key(self, image: Image) -> Hashable:
        return 0  # all pages become the same square

    def layout(self, proc: Any, batch: Any, images: list[Image]) -> list[Layout]:
        mask = self.image_mask(proc, batch)  # (b, seq)
        out = []
        for i, im in enumerate(images):
            n_x, n_y = proc.get_n_patches(im.size, patch_size=self.patch_size)
            grid = (int(n_y), int(n_x))
            check_grid(self.model_id, grid, int(mask[i].sum()), i)
            out.append(Layout(image_mask=mask[i], grid=grid))
        return out


class ColQwen2Prep(PagePrep):
    """ColQwen2 / ColQwen2.5: dynamic resolution; 2x2 patches merged into one token, row-major."""

    def __init__(self, processor: Any, model_id: str, merge: int) -> None:
        super().__init__(processor, model_id)
        self.merge = int(merge)

    def _args(self) -> tuple[Any, ...]:
        return self.processor, self.model_id, self.merge

    def bucket_key(self, image: Image) -> Hashable:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        ip = self.processor.image_processor
        return smart_resize(
            height=image.height,
            width=image.width,
            factor=ip.patch_size * ip.merge_size,
            min_pixels=ip.size["shortest_edge"],
            max_pixels=ip.size["longest_edge"],
        )

    def layout(self, proc: Any, batch: Any, images: list[Image]) -> list[Layout]:
        mask = self.image_mask(proc, batch)  # (b, seq)
        merge = self.merge
        thw = batch["image_grid_thw"].cpu().numpy()  # (b, 3): frames, patch rows, patch cols
        out = []
        for i, im in enumerate(images):
            n_x, n_y = proc.get_n_patches(im.size, spatial_merge_size=merge)  # PIL (w, h)
            grid = (int(n_y), int(n_x))
            if (int(thw[i][1]) // merge, int(thw[i][2]) // merge) != grid:
                raise ModelOutputError(
                    f"{self.model_id}: get_n_patches gives {grid} but the processor made a "
                    f"{thw[i].tolist()} patch grid (merge {merge}) for image {i}"
                )
            check_grid(self.model_id, grid, int(mask[i].sum()), i)
            out.append(Layout(image_mask=mask[i], grid=grid))
        return out


_ROW_COL_RE = re.compile(r"^<row_(\d+)_col_(\d+)>$")


class ColIdefics3Prep(PagePrep):
    """ColIdefics3 / ColSmol: the page is split into tiles of ``image_seq_len`` tokens each
    (``side x side``, row-major inside a tile), followed by a global thumbnail tile.

    The tile tokens are put back in row-major order over the whole page (the same rearrangement
    as colpali-engine's ``rearrange_image_embeddings``) and form the grid; the thumbnail tokens
    stay in the multivector, outside ``image_mask``. Pages are prepared as uint8 tiles
    (:mod:`.idefics3_prep`); ``tiles`` is None where the processor is not one that module
    reproduces, and then the processor prepares them.
    """

    def __init__(self, processor: Any, model_id: str) -> None:
        super().__init__(processor, model_id)
        self._row_col: dict[int, tuple[int, int]] = {}
        for tok, tid in processor.tokenizer.get_vocab().items():
            m = _ROW_COL_RE.match(tok)
            if m:
                self._row_col[tid] = (int(m.group(1)), int(m.group(2)))
        self._side = math.isqrt(int(processor.image_seq_len))
        if self._side * self._side != int(processor.image_seq_len):
            raise ModelLoadError(f"{model_id}: image_seq_len {processor.image_seq_len} is not a square")
        self.tiles: Idefics3Tiles | None = Idefics3Tiles.for_processor(processor)

    def process_images(self, proc: Any, images: list[Image]) -> Any:
        if self.tiles is None:
            return super().process_images(proc, images)
        return self.tiles.prepare(proc, images)

    def bucket_key(self, image: Image) -> Hashable:
        ip = self.processor.image_processor
        longest = (ip.size or {}).get("longest_edge")
        tile = (getattr(ip, "max_image_size", None) or {}).get("longest_edge")
        if not longest or not tile:
            return image.size
        h, w = self.processor._calculate_resized_dimensions((image.height, image.width), longest)
        return (math.ceil(h / tile), math.ceil(w / tile))

    def layout(self, proc: Any, batch: Any, images: list[Image]) -> list[Layout]:
        ids = batch["input_ids"].cpu().numpy()  # (b, seq)
        local = proc.get_local_image_mask(batch).cpu().numpy().astype(bool)  # (b, seq)
        s = self._side
        out = []
        for i in range(len(images)):
            tiles = [self._row_col[t] for t in ids[i].tolist() if t in self._row_col]
            n_rows = max((r for r, _ in tiles), default=1)
            n_cols = max((c for _, c in tiles), default=1)
            grid = (n_rows * s, n_cols * s)
            positions = np.flatnonzero(local[i])  # (n_tiles * s * s,), tile by tile
            check_grid(self.model_id, grid, len(positions), i)
            # (tile_row, tile_col, r, c) -> (tile_row, r, tile_col, c): row-major over the page
            spatial = positions.reshape(n_rows, n_cols, s, s).transpose(0, 2, 1, 3).reshape(-1)
            order = np.arange(ids.shape[1])
            order[positions] = spatial
            out.append(Layout(image_mask=local[i], grid=grid, order=order))
        return out
