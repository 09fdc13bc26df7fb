"""ColPali-family page encoders through colpali-engine 0.3.18: ColPali, ColQwen2, ColQwen2.5,
ColIdefics3 (ColSmol).

One class per family, each a :class:`~ragspine.models.base.BasePageEncoder`; they differ only in
the colpali-engine classes they load and in their CPU half (:mod:`ragspine.models.page_prep`: how
pages are bucketed and prepared, and where the patch grid lies). Which family a checkpoint is:
:mod:`ragspine.models.page_families`. Queries at static shapes, from CUDA graphs on a GPU:
:mod:`ragspine.models.query_graphs`.

Padding rows are dropped by the attention mask. That matters beyond storage size: with SDPA,
left-padded positions of ColQwen2/2.5 and ColIdefics3 come out NaN, and the base class refuses to
return any non-finite vector.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from ragspine.models._runtime import (
    check_attn,
    model_kwargs,
    pin,
    resolve_device,
    resolve_dtype,
    to_device,
)
from ragspine.models._source import ModelSource
from ragspine.models.base import BasePageEncoder, EncodedPage
from ragspine.models.errors import ModelLoadError, ModelOutputError
from ragspine.models.idefics3_prep import TILES, Idefics3Tiles
from ragspine.models.page_prep import ColIdefics3Prep, ColPaliPrep, ColQwen2Prep, Layout, PagePrep
from ragspine.models.prep_processes import PrepProcesses, prep_workers
from ragspine.models.query_graphs import QueryGraphs, checked
from ragspine.models.static_queries import static_forward
from ragspine.models.windows import batch_windows

if TYPE_CHECKING:
    from PIL.Image import Image

logger = logging.getLogger(__name__)

#: Default batch sizes (pages, queries) per device type.
PAGE_BATCH_SIZE = {"cuda": 16, "mps": 4, "cpu": 4}
QUERY_BATCH_SIZE = {"cuda": 64, "mps": 16, "cpu": 16}
#: Preprocessing threads (batches prepared ahead) per device type; 0 = preprocess inline.
PREFETCH = {"cuda": 4, "mps": 1, "cpu": 0}
#: ``query_graphs`` settings: ``auto`` replays queries from CUDA graphs on a CUDA device when they
#: match the plain forward (:mod:`ragspine.models.query_graphs`); ``off`` keeps the plain forward.
QUERY_GRAPHS = ("auto", "off")


class ColVisionEncoder(BasePageEncoder):
    """A colpali-engine model and processor behind the PageEncoder template."""

    family: ClassVar[str]
    model_class: ClassVar[str]  # name in colpali_engine.models
    processor_class: ClassVar[str]
    #: Extra keyword arguments for the model's forward pass.
    forward_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        model: torch.nn.Module,
        processor: Any,
        *,
        source: ModelSource,
        device: torch.device,
        dtype: torch.dtype,
        batch_size: int | None = None,
        query_batch_size: int | None = None,
    ) -> None:
        self.model: Any = model
        self.processor = processor
        self.source = source
        self.model_id = source.model_id
        self.revision = source.revision
        self.device = device
        self.dtype = dtype
        self.dim = int(getattr(model, "dim", 128))
        self.batch_size = batch_size or PAGE_BATCH_SIZE.get(device.type, 4)
        self.query_batch_size = query_batch_size or QUERY_BATCH_SIZE.get(device.type, 16)
        #: Batches preprocessed ahead on helper threads while the accelerator runs the current
        #: one: a full-size page costs ~20-100 ms of CPU preprocessing (measured on 1 core:
        #: ColPali 19-24, ColQwen2 38-58, ColIdefics3 ~100 ms), more than its GPU forward.
        self.prefetch = PREFETCH.get(device.type, 0)
        #: Prepared page batches go to pinned host memory on the prep threads, so their copy to
        #: the GPU does not block (``_runtime.pin``); only on CUDA.
        self.pin_memory = device.type == "cuda"
        #: The CPU half (processor, layout): picklable, for prep processes.
        self.prep = self._make_prep()
        #: Processes that prepare page batches (the prep threads hand them over), or None.
        self.prep_processes: PrepProcesses | None = None
        #: How queries are encoded: "plain" (transformers' forward) or the graphs' summary; with
        #: the reason when graphs were asked for and not used.
        self.query_path = "plain"
        self._graphs: QueryGraphs | None = None

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def from_source(
        cls,
        source: ModelSource,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        attn_implementation: str | None = None,
        batch_size: int | None = None,
        query_batch_size: int | None = None,
        query_graphs: str = "auto",
        prep_workers_setting: int = 0,
    ) -> ColVisionEncoder:
        import colpali_engine.models as cem

        if query_graphs not in QUERY_GRAPHS:
            raise ModelLoadError(f"unknown query_graphs {query_graphs!r}; allowed: {', '.join(QUERY_GRAPHS)}")
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        attn = check_attn(attn_implementation)
        model_cls = getattr(cem, cls.model_class)
        proc_cls = getattr(cem, cls.processor_class)
        logger.info(
            "loading %s (%s) at %s on %s as %s",
            source.model_id,
            cls.family,
            source.revision,
            dev,
            dt,
        )
        try:
            model = model_cls.from_pretrained(
                source.load_name, **model_kwargs(dt, attn, dev), **source.load_kwargs
            )
            processor = proc_cls.from_pretrained(source.load_name, **source.file_kwargs)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(
                f"{source.model_id}: could not load it as {cls.family} "
                f"({cls.model_class} + {cls.processor_class}): {type(e).__name__}: {e}"
            ) from e
        cls._after_load(model)
        still_meta = [n for n, p in model.named_parameters() if p.is_meta]
        if still_meta:
            raise ModelLoadError(
                f"{source.model_id}: weights missing from the checkpoint: {still_meta[:5]}"
            )
        model = model.to(dev).eval()
        enc = cls(
            model,
            processor,
            source=source,
            device=dev,
            dtype=dt,
            batch_size=batch_size,
            query_batch_size=query_batch_size,
        )
        n_prep = prep_workers(prep_workers_setting)
        if n_prep:
            enc.prep_processes = PrepProcesses(enc.prep, n_prep, dt if enc.pin_memory else None)
        if query_graphs == "auto" and dev.type == "cuda":
            enc.ready_query_graphs(capture=True)
        elif query_graphs == "auto":
            enc.query_path = f"plain (CUDA graphs need a CUDA device; this model is on {dev})"
        return enc

    @classmethod
    def _after_load(cls, model: Any) -> None:
        """Repairs a freshly loaded model needs before it can move devices (default: none)."""

    # -- the template's hooks ------------------------------------------------------------------

    @abstractmethod
    def _make_prep(self) -> PagePrep:
        """The family's page preparation (its processor and the model settings its layout needs)."""

    def close(self) -> None:
        """Stop the prep processes, if any (pages prepared later are prepared in this process)."""
        if self.prep_processes is not None:
            self.prep_processes.close()

    def _bucket_key(self, image: Image) -> Hashable:
        return self.prep.bucket_key(image)

    def _prepare_pages(self, images: list[Image]) -> tuple[Any, list[Layout]]:
        made = self.prep_processes.prepare(images) if self.prep_processes is not None else None
        batch, layouts = made if made is not None else self.prep.prepare(images)
        if self.pin_memory:
            batch = pin(batch, self.dtype)
        return batch, layouts

    def _model_inputs(self, batch: Any) -> dict[str, Any]:
        """A prepared batch on the model's device, as its keyword arguments."""
        return to_device(batch, self.device, self.dtype)

    @torch.inference_mode()
    def _encode_pages(self, prepared: tuple[Any, list[Layout]]) -> list[EncodedPage]:
        batch, layouts = prepared
        inputs = self._model_inputs(batch)
        emb = self.model(**inputs, **self.forward_kwargs)  # (b, seq, dim)
        attention = inputs["attention_mask"].bool()  # (b, seq)
        if emb.shape[:2] != attention.shape:
            raise ModelOutputError(
                f"{self.model_id}: model output {tuple(emb.shape)} does not line up with the "
                f"attention mask {tuple(attention.shape)}"
            )
        emb = emb.float().cpu().numpy()  # (b, seq, dim) float32
        keep_all = attention.cpu().numpy()  # (b, seq) bool
        pages: list[EncodedPage] = []
        for i, lay in enumerate(layouts):
            rows = emb[i] if lay.order is None else emb[i][lay.order]  # (seq, dim)
            keep = keep_all[i]  # (seq,)
            if lay.image_mask[~keep].any():
                raise ModelOutputError(f"{self.model_id}: image tokens fall on padding positions")
            pages.append(
                EncodedPage(
                    vectors=np.ascontiguousarray(rows[keep]),  # (n_tokens, dim)
                    image_mask=lay.image_mask[keep],  # (n_tokens,)
                    grid=lay.grid,
                )
            )
        return pages

    def _prepare_queries(self, texts: list[str]) -> Any:
        return self.processor.process_queries(texts=texts)

    def ready_query_graphs(self, *, capture: bool) -> bool:
        """Encode queries at static shapes from now on, replayed from CUDA graphs with
        ``capture`` (the model's device must be CUDA), when they match the plain forward on probe
        queries; otherwise keep the plain forward. ``query_path`` says which, and why."""
        graphs = QueryGraphs(
            static_forward(self.family, self.model),
            device=self.device,
            pad_id=int(self.processor.tokenizer.pad_token_id),
            capture=capture,
        )
        self._graphs, why = checked(
            graphs, self._prepare_queries, lambda t: self._plain_queries(self._prepare_queries(t))
        )
        self.query_path = why if self._graphs is not None else f"plain ({why})"
        log = logger.info if self._graphs is not None else logger.warning
        log("%s: queries: %s", self.model_id, self.query_path)
        return self._graphs is not None

    def _encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        batch = self._prepare_queries(texts)
        graphs = self._graphs
        if graphs is not None and graphs.shape_of(batch["attention_mask"]) is not None:
            return graphs.encode(batch["input_ids"], batch["attention_mask"])
        return self._plain_queries(batch)

    @torch.inference_mode()
    def _plain_queries(self, batch: Any) -> list[np.ndarray]:
        inputs = to_device(batch, self.device, self.dtype)
        emb = self.model(**inputs, **self.forward_kwargs)  # (b, seq, dim)
        attention = inputs["attention_mask"].bool().cpu().numpy()  # (b, seq)
        emb = emb.float().cpu().numpy()  # (b, seq, dim)
        # Left-padded rows are NaN under SDPA (ColQwen, ColIdefics3): keep attended rows only.
        return [np.ascontiguousarray(emb[i][attention[i]]) for i in range(len(attention))]


class ColPaliEncoder(ColVisionEncoder):
    """ColPali (PaliGemma): every page is resized to one square; patches row-major."""

    family = "colpali"
    model_class = "ColPali"
    processor_class = "ColPaliProcessor"
    #: Only the last position's LM logits: the 257k-vocabulary head is not needed for retrieval.
    forward_kwargs: ClassVar[dict[str, Any]] = {"logits_to_keep": 1}

    @classmethod
    def _after_load(cls, model: Any) -> None:
        # Checkpoints leave out the LM head tied to the input embeddings, and under
        # transformers 5 ColPali does not re-tie it: it stays on the meta device. Tie it here.
        head = model.model.lm_head
        if head.weight.is_meta:
            head.weight = model.get_input_embeddings().weight

    def _make_prep(self) -> PagePrep:
        return ColPaliPrep(self.processor, self.model_id, self.model.config.vision_config.patch_size)

    def _prepare_queries(self, texts: list[str]) -> Any:
        batch = self.processor.process_queries(texts=texts)
        # Under transformers 5, PaliGemma attends bidirectionally over an unpadded query (SDPA,
        # no mask) but causally over a padded one, so a query's vectors would depend on the
        # other queries in its batch. Marking the whole query as prefix (token type 0) makes
        # every batch bidirectional over the attended tokens, as PaliGemma's inference did in
        # transformers 4 and as an unpadded query is encoded now.
        batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        return batch


class ColQwen2Encoder(ColVisionEncoder):
    """ColQwen2 (Qwen2-VL): dynamic resolution; 2x2 patches merged into one token, row-major."""

    family = "colqwen2"
    model_class = "ColQwen2"
    processor_class = "ColQwen2Processor"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The vision tower's spans (pages; Qwen2.5-VL's windows) in one SDPA call per length
        # instead of one per span (ragspine.models.windows); a model loaded with flash-attn or
        # eager attention keeps its own.
        self.batched_windows = batch_windows(self.model)

    def _make_prep(self) -> PagePrep:
        return ColQwen2Prep(self.processor, self.model_id, self.model.spatial_merge_size)


class ColQwen2_5Encoder(ColQwen2Encoder):
    """ColQwen2.5 (Qwen2.5-VL): same layout as ColQwen2."""

    family = "colqwen2_5"
    model_class = "ColQwen2_5"
    processor_class = "ColQwen2_5_Processor"


class ColIdefics3Encoder(ColVisionEncoder):
    """ColIdefics3 / ColSmol: a page as tiles and a thumbnail (:class:`ColIdefics3Prep`), prepared
    as uint8 tiles and normalised on the device (:mod:`.idefics3_prep`: the processor's inputs bit
    for bit, several times faster on the prep threads); ``tiles`` is None where the processor is
    not one that module reproduces, and then the processor prepares them."""

    family = "colidefics3"
    model_class = "ColIdefics3"
    processor_class = "ColIdefics3Processor"

    def _make_prep(self) -> PagePrep:
        self._tiles_prep = ColIdefics3Prep(self.processor, self.model_id)
        return self._tiles_prep

    @property
    def tiles(self) -> Idefics3Tiles | None:
        """The uint8 tile path (None: the processor prepares the pages)."""
        return self._tiles_prep.tiles

    @tiles.setter
    def tiles(self, value: Idefics3Tiles | None) -> None:
        self._tiles_prep.tiles = value

    def _model_inputs(self, batch: Any) -> dict[str, Any]:
        inputs = super()._model_inputs(batch)
        if TILES not in inputs:
            return inputs
        if self.tiles is None:
            raise ModelOutputError(f"{self.model_id}: a batch of uint8 tiles, but no table to expand them")
        return self.tiles.model_inputs(inputs, self.dtype)


#: Family name -> encoder class. Aliases: :func:`ragspine.models.page_families.canonical_family`.
FAMILIES: dict[str, type[ColVisionEncoder]] = {
    c.family: c for c in (ColPaliEncoder, ColQwen2Encoder, ColQwen2_5Encoder, ColIdefics3Encoder)
}
