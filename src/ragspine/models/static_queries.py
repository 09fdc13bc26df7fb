"""A page model's query forward at static shapes: what :mod:`ragspine.models.query_graphs`
captures as CUDA graphs.

A CUDA graph replays a fixed sequence of kernels on fixed buffers, so what it captures must have
a fixed shape and must never stop to read device memory on the host (a host read during a
capture is an error). transformers' plain forward does both: the processor pads a batch to its
longest query, and Qwen's and Llama's mask code asks the device whether the mask is all ones
(``masking_utils._ignore_causal_mask_sdpa``, ``find_packed_sequence_indices``). This module
gives each family a forward that does neither, with the same vectors as the plain one:

- a batch's queries are packed left-aligned into a ``(batch, length)`` buffer, the batch and the
  length rounded up to :data:`BATCHES` and :data:`LENGTHS` (:func:`pack`): right padding, so a
  causal model's tokens never see the padding after them, at positions 0..n-1 as unpadded;
- ColPali attends bidirectionally over the query (every token a prefix token, as
  ``ColPaliEncoder._prepare_queries`` sets), so its padding is masked by the 2D mask, whose code
  reads nothing back;
- ColQwen2/2.5 run their backbone without a mask (plain causal attention: SDPA's ``is_causal``),
  and ColIdefics3 its text model with a 4D causal mask built here (given no mask its Llama
  checks the positions for packed sequences on the host); then colpali-engine's head, the
  projection and the L2 norm, written out (``custom_text_proj`` / ``linear``).

The packed rows past the last query repeat the first (a row of padding alone would attend to
nothing, which SDPA can turn into NaN); what comes back is each query's own tokens only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

#: Token lengths a query batch is padded to. Queries are ~15-60 tokens (a prompt, the text, and
#: ColPali's and ColQwen's 10 augmentation tokens); a longer batch takes the plain forward.
LENGTHS = (32, 64, 128, 256)
#: Batch sizes a query batch is padded to: one search is one query; a server batches concurrent
#: ones (``models.batching``). A bigger batch (an evaluation's bulk encoding) is throughput-bound,
#: where a graph saves little, and takes the plain forward.
BATCHES = (1, 2, 4, 8, 16)

#: ``forward(input_ids, attention_mask)`` on a packed batch -> ``(batch, length, dim)`` vectors.
StaticForward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def round_up(n: int, sizes: Sequence[int]) -> int | None:
    """The smallest of ``sizes`` (ascending) that holds ``n``; None when none does."""
    return next((s for s in sizes if s >= n), None)


def pack(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, batch: int, length: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A processor's batch (padded on either side) as a ``(batch, length)`` right-padded one.

    Returns the packed ids and mask (int64, on the input's device) and each query's token count.
    Row ``i`` holds query ``i``'s attended tokens from position 0; rows past the last query repeat
    the first.
    """
    keep = attention_mask.bool()  # (n, seq)
    counts = [int(c) for c in keep.sum(1)]
    n = len(counts)
    if not 0 < n <= batch or max(counts) > length or min(counts) == 0:
        raise ValueError(f"cannot pack {n} queries of {counts} tokens into ({batch}, {length})")
    ids = torch.full((batch, length), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, length), dtype=torch.long)
    for i in range(batch):
        j = i if i < n else 0
        ids[i, : counts[j]] = input_ids[j][keep[j]]
        mask[i, : counts[j]] = 1
    return ids, mask, counts


def _normalised(proj: torch.Tensor) -> torch.Tensor:
    # colpali-engine's heads: L2 norm over the vector dimension (the attention-mask product that
    # follows there only zeroes padding rows, which the caller drops).
    return proj / proj.norm(dim=-1, keepdim=True)


def _colpali(model: Any) -> StaticForward:
    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids),
                     logits_to_keep=1, use_cache=False)

    return forward


def _colqwen(model: Any, engine_class: str) -> StaticForward:
    # ColQwen2(Qwen2VLModel) and ColQwen2_5(Qwen2_5_VLModel): the backbone is the class colpali-
    # engine's forward reaches with super().forward.
    import colpali_engine.models as cem

    backbone = super(getattr(cem, engine_class), model).forward

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = backbone(input_ids=ids, use_cache=False, return_dict=True).last_hidden_state
        return _normalised(model.custom_text_proj(hidden))

    return forward


def _colidefics3(model: Any) -> StaticForward:
    causal: dict[tuple[int, int, torch.device], torch.Tensor] = {}

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        key = (b, n, ids.device)
        if key not in causal:  # made once per shape, before a capture reuses it
            causal[key] = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril().expand(b, 1, n, n)
        out = model.model(input_ids=ids, attention_mask=causal[key], use_cache=False, return_dict=True)
        return _normalised(model.linear(out.last_hidden_state))

    return forward


_FORWARDS: dict[str, Callable[[Any], StaticForward]] = {
    "colpali": _colpali,
    "colqwen2": lambda model: _colqwen(model, "ColQwen2"),
    "colqwen2_5": lambda model: _colqwen(model, "ColQwen2_5"),
    "colidefics3": _colidefics3,
}


def static_forward(family: str, model: Any) -> StaticForward:
    """The static-shape query forward of a colpali-engine ``model`` of ``family``."""
    if family not in _FORWARDS:
        raise ValueError(f"no static query forward for family {family!r}; known {sorted(_FORWARDS)}")
    return _FORWARDS[family](model)
