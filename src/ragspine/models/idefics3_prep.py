"""ColIdefics3 (ColSmol) page preparation in uint8, normalised on the device.

Why this is hand-written. transformers' ``Idefics3ImageProcessor`` brings a page to 2,048 px on
its long edge, cuts it into 512 px tiles plus a 512 px thumbnail (13 frames for a 16:9 slide, 17
for a letter page) and returns them as float32: 40-53 MB a page, normalised and then copied
again into a zero-filled padded batch. On the 2-core development machine that float work was
most of its ~75-130 ms a page (one thread), while its three Lanczos resizes of the uint8 page
took ~10-18 ms, and it bounded ColSmol's ``encode_pages`` on an H200 to 0.22x its model.

Here the processor's own ``resize`` and ``resize_for_vision_encoder`` run on the uint8 page kept
channels-last (torch's vectorised uint8 kernel: the same bytes as the processor's contiguous
path, tested), the tiles are cut in uint8 in height-width-channel order (a copy of whole pixel
rows), and the normalisation is left to the device: a 256-entry table per channel, made once by
the processor's own ``rescale_and_normalize`` from the 256 byte values, indexed by the tile bytes
after they are copied. The model gets the processor's ``pixel_values``, ``pixel_attention_mask``,
``input_ids`` and ``attention_mask`` bit for bit (``tests/models/test_idefics3_prep.py``); the
host prepares, pins and copies a quarter of the bytes.

Only the processor this module was written against is taken: transformers' torchvision
``Idefics3ImageProcessor`` (not its PIL twin, whose Lanczos differs by a level or two) with
resizing, splitting, padding and RGB conversion on. :meth:`Idefics3Tiles.for_processor` also
compares both paths on a small page when it is built, and returns None (the encoder then keeps
the processor) when anything differs.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ragspine.models.errors import ModelOutputError

if TYPE_CHECKING:
    from PIL.Image import Image

logger = logging.getLogger(__name__)

#: Keys of a prepared batch that the model does not take; :meth:`Idefics3Tiles.model_inputs`
#: turns them into ``pixel_values`` and ``pixel_attention_mask``.
TILES = "page_tiles"  # (b, n_frames, tile, tile, 3) uint8; a page's frames, thumbnail last
FRAMES = "page_frames"  # (b, n_frames) bool; False on a frame that only pads the batch

#: The page :meth:`Idefics3Tiles.for_processor` checks both paths on: small (the processor
#: scales it up to its full size anyway), not square, random bytes (the resampler's worst case).
_CHECK_PAGE_HW = (29, 41)


class Idefics3Tiles:
    """A ColIdefics3 processor's page preparation, as uint8 tiles plus a table for the device.

    Holds only the settings and the table; the processor (a prep thread's own copy: fast
    tokenizers are not shared between threads) is passed to :meth:`prepare`.
    """

    def __init__(self, processor: Any) -> None:
        ip = processor.image_processor
        self.tile = int(ip.max_image_size["longest_edge"])
        settings = (ip.do_rescale, ip.rescale_factor, ip.do_normalize, ip.image_mean, ip.image_std)
        #: The processor's rescale and normalisation: (k, 3, h, w) uint8 -> float32.
        self._normalize = lambda x: ip.rescale_and_normalize(x, *settings)
        # (3, 256) float32: row c is what the processor makes of byte values 0..255 in channel c.
        values = torch.arange(256, dtype=torch.uint8).expand(1, 3, 1, 256).contiguous()
        self.lut = self._normalize(values).reshape(3, 256).to(torch.float32).contiguous()
        self._device_luts: dict[tuple[str, torch.dtype], torch.Tensor] = {}
        self._lock = threading.Lock()

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def for_processor(cls, processor: Any) -> Idefics3Tiles | None:
        """The fast path for ``processor``, or None when it is not a processor this module
        reproduces (the reason is logged) or when both paths disagree on a check page."""
        why = cls._unsupported(processor)
        if why:
            logger.info("ColIdefics3 pages go through the processor: %s", why)
            return None
        tiles = cls(processor)
        rng = np.random.default_rng(0)
        from PIL import Image

        page = Image.fromarray(rng.integers(0, 256, (*_CHECK_PAGE_HW, 3), dtype=np.uint8), "RGB")
        diff = tiles.differences(processor, [page])
        if diff:
            logger.warning(
                "ColIdefics3 pages go through the processor: the uint8 path differs from it on "
                "a check page (%s); transformers %s may have changed the processor",
                "; ".join(diff), _transformers_version(),
            )
            return None
        return tiles

    @staticmethod
    def _unsupported(processor: Any) -> str | None:
        try:
            from transformers.models.idefics3.image_processing_idefics3 import (
                Idefics3ImageProcessor,
            )
        except ImportError as e:  # pragma: no cover - needs another transformers
            return f"no torchvision Idefics3ImageProcessor in transformers ({e})"
        ip = getattr(processor, "image_processor", None)
        if type(ip) is not Idefics3ImageProcessor:
            return f"its image processor is {type(ip).__name__}, not {Idefics3ImageProcessor.__name__}"
        for flag in ("do_resize", "do_image_splitting", "do_pad", "do_convert_rgb"):
            if not getattr(ip, flag, False):
                return f"{flag} is off"
        longest = (ip.size or {}).get("longest_edge")
        tile = (ip.max_image_size or {}).get("longest_edge")
        if not longest or not tile or longest <= tile:
            # Only a page brought above one tile is always split (frames all tile x tile).
            return f"size {ip.size} is not above max_image_size {ip.max_image_size}"
        for attr in ("replace_image_token", "get_text_with_replacements", "visual_prompt_prefix"):
            if not hasattr(processor, attr):
                return f"the processor has no {attr}"
        return None

    # -- the CPU half --------------------------------------------------------------------------

    def prepare(self, processor: Any, images: list[Image]) -> Any:
        """``images`` as the processor's batch would be, with :data:`TILES` and :data:`FRAMES`
        in place of ``pixel_values`` and ``pixel_attention_mask`` (a ``BatchFeature``)."""
        from transformers import BatchFeature

        ip = processor.image_processor
        t = self.tile
        pages = [self._resized(ip, im) for im in images]  # [(page, thumbnail)], uint8 channels-last
        grids = [(p.shape[-2] // t, p.shape[-1] // t) for p, _ in pages]
        n_max = max(r * c for r, c in grids) + 1
        tiles = torch.empty(len(images), n_max, t, t, 3, dtype=torch.uint8)  # (b, n, t, t, 3)
        frames = torch.zeros(len(images), n_max, dtype=torch.bool)  # (b, n)
        for i, ((page, thumb), (rows, cols)) in enumerate(zip(pages, grids, strict=True)):
            n = rows * cols
            hwc = page[0].permute(1, 2, 0)  # (rows * t, cols * t, 3), a view of the same memory
            # (rows, t, cols, t, 3) -> (rows, cols, t, t, 3): tile by tile, row-major, as the
            # processor's unfold cuts them.
            tiles[i, :n].view(rows, cols, t, t, 3).copy_(
                hwc.reshape(rows, t, cols, t, 3).permute(0, 2, 1, 3, 4)
            )
            tiles[i, n].copy_(thumb[0].permute(1, 2, 0))  # (t, t, 3)
            tiles[i, n + 1 :].zero_()  # frames that only pad the batch
            frames[i, : n + 1] = True
        text = self._tokens(processor, grids)
        return BatchFeature(data={**text, TILES: tiles, FRAMES: frames})

    def _resized(self, ip: Any, image: Image) -> tuple[torch.Tensor, torch.Tensor]:
        """The processor's two resizes and its thumbnail of one page, each ``(1, 3, h, w)``
        uint8 in channels-last memory."""
        from transformers.image_utils import SizeDict

        if image.mode != "RGB":
            image = image.convert("RGB")  # as ColIdefics3Processor.process_images does
        x = torch.from_numpy(np.array(image)).permute(2, 0, 1)[None]  # (1, 3, h, w), HWC memory
        x = ip.resize(x, ip.size, resample=ip.resample)  # long edge to size["longest_edge"]
        page = ip.resize_for_vision_encoder(x, self.tile, resample=ip.resample)
        h, w = page.shape[-2:]
        if h % self.tile or w % self.tile:
            raise ModelOutputError(
                f"the processor resized a page to {h} x {w}, not to whole {self.tile} px tiles"
            )
        thumb = ip.resize(page, SizeDict(height=self.tile, width=self.tile), resample=ip.resample)
        return page, thumb

    def _tokens(self, processor: Any, grids: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` as the processor makes them for pages of these
        tile grids: its own prompt, image-token expansion and tokenizer call. A batch of one grid
        (what the encoder's buckets give) is tokenized once: one text needs no padding."""
        prompts = []
        for rows, cols in grids:
            replacement = processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)
            text, _ = processor.get_text_with_replacements(
                [processor.visual_prompt_prefix], images_replacements=[replacement]
            )
            prompts.append(text[0])
        if len(set(prompts)) == 1:
            one = processor.tokenizer(prompts[:1], padding="longest", return_tensors="pt")
            return {k: v.expand(len(prompts), -1).contiguous() for k, v in one.items()}
        return dict(processor.tokenizer(prompts, padding="longest", return_tensors="pt"))

    # -- the device half -----------------------------------------------------------------------

    def model_inputs(
        self, batch: dict[str, Any], dtype: torch.dtype, *, table: bool | None = None
    ) -> dict[str, Any]:
        """A prepared batch, already on its device, as the model's keyword arguments:
        ``pixel_values`` (b, n, 3, tile, tile) in ``dtype`` and ``pixel_attention_mask``
        (b, n, tile, tile) int64, equal to the processor's cast to ``dtype``.

        ``table`` (default: on any device but the CPU) indexes the table by the tile bytes: a
        copy of the processor's values, whatever the device's arithmetic. On the CPU the
        processor's own ``rescale_and_normalize`` runs on the bytes instead, the same operations
        on the same values, and on two cores 3x faster than an index (~21 against ~70 ms a page)."""
        out = {k: v for k, v in batch.items() if k not in (TILES, FRAMES)}
        tiles, frames = batch[TILES], batch[FRAMES]  # (b, n, t, t, 3) uint8, (b, n) bool
        b, n, t = tiles.shape[0], tiles.shape[1], tiles.shape[2]
        chw = tiles.permute(0, 1, 4, 2, 3)  # (b, n, 3, t, t) uint8, a view
        if table if table is not None else tiles.device.type != "cpu":
            lut = self._lut(tiles.device, dtype)  # (3 * 256,)
            offsets = torch.arange(3, device=tiles.device, dtype=torch.int32) * 256  # (3,)
            idx = chw.to(torch.int32) + offsets.view(1, 1, 3, 1, 1)  # (b, n, 3, t, t)
            pixels = torch.index_select(lut, 0, idx.reshape(-1)).view(b, n, 3, t, t)
        else:
            pixels = self._normalize(chw.reshape(b * n, 3, t, t))  # (b * n, 3, t, t) float32
            pixels = pixels.view(b, n, 3, t, t).to(dtype)
        pixels.masked_fill_(~frames.view(b, n, 1, 1, 1), 0)  # padding frames are 0.0, as padded
        out["pixel_values"] = pixels
        # (b, n, t, t) int64: 1 over a page's frames, 0 over padding frames (every frame is t x t)
        out["pixel_attention_mask"] = frames.to(torch.int64).view(b, n, 1, 1).expand(b, n, t, t)
        return out

    def _lut(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The table on ``device`` in ``dtype`` (cast from float32 as the processor's output
        would be), made once per device and dtype."""
        key = (str(device), dtype)
        lut = self._device_luts.get(key)
        if lut is None:
            with self._lock:
                lut = self._device_luts.setdefault(key, self.lut.to(dtype).reshape(-1).to(device))
        return lut

    # -- checking ------------------------------------------------------------------------------

    def differences(self, processor: Any, images: list[Image]) -> list[str]:
        """Where this path's model inputs differ from ``processor.process_images(images)``, in
        float32 on the CPU, by the table and by the processor's arithmetic (empty when they are
        equal: the same keys, shapes and values)."""
        want = processor.process_images(images)
        prepared = dict(self.prepare(processor, images))
        out = []
        for table in (True, False):
            got = self.model_inputs(prepared, torch.float32, table=table)
            for key in ("input_ids", "attention_mask", "pixel_values", "pixel_attention_mask"):
                a, b = want.get(key), got.get(key)
                if a is None or b is None:
                    out.append(f"{key} missing from {'the processor' if a is None else 'this path'}")
                elif a.shape != b.shape:
                    out.append(f"{key} shape {tuple(b.shape)} against {tuple(a.shape)}")
                elif not torch.equal(a, b.to(a.dtype)):
                    diff = float((a.double() - b.double()).abs().max())
                    out.append(f"{key} values differ{' by the table' if table else ''} (max {diff:.3g})")
        return sorted(set(out))


def _transformers_version() -> str:
    import transformers

    return transformers.__version__

