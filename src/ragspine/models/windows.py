"""Vision attention over packed windows in a few batched calls: ColQwen2.5's windows, ColQwen2's
pages.

Qwen2-VL and Qwen2.5-VL pack the patches of every image of a batch into one sequence and attend
within spans of it: each image (Qwen2-VL, and Qwen2.5-VL's full-attention blocks) or each window
of 8 x 8 patches, 4 x 4 merged tokens (Qwen2.5-VL's other blocks). Without flash-attn,
transformers splits the sequence and makes one ``scaled_dot_product_attention`` call per span:
about 47 small calls a page (768 merged tokens) in each windowed block of Qwen2.5-VL, each too
small to fill a GPU. The spans of equal length are the same computation on different rows, so
this stacks them into one batch per length and makes one call per length: most windows of a
page are full (64 patches), the rest share a few edge sizes, and the pages of one batch (bucketed
by size) are all the same length.

transformers hands the span boundaries (``cu_seq_lens_q``) only to an attention function whose
name says "flash" (``is_flash_attention_requested``); so this one is registered under
:data:`ATTENTION` and set on the vision tower's config alone (the language model keeps its own).
The outputs equal the split calls' (one SDPA per span), up to the order of float additions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

#: The name the batched function is registered under ("flash" routes the span boundaries to it).
ATTENTION = "ragspine_sdpa_windows_flash_free"
#: Most attention-score bytes one call may hold, as SDPA's math kernel would (spans x heads x
#: length^2 x 4 bytes): a batch of full pages in a full-attention block is split to stay under it.
MAX_SCORE_BYTES = 256 * 1024 * 1024


def window_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """Attention within each span ``[cu[i], cu[i+1])`` of a packed sequence.

    ``query``/``key``/``value``: ``(1, heads, seq, head_dim)``, as the Qwen vision attention
    passes them. Returns ``(1, seq, heads, head_dim)`` (what it reshapes to ``(seq, -1)``)."""
    q, k, v = query[0], key[0], value[0]  # (heads, seq, head_dim)
    heads, seq, head_dim = q.shape
    if cu_seq_lens_q is None:  # one span: the whole sequence
        cu_seq_lens_q = torch.tensor([0, seq], device=q.device)
    bounds = [int(x) for x in cu_seq_lens_q.tolist()]
    by_length: dict[int, list[int]] = {}
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:  # transformers' window list can hold empty spans
            by_length.setdefault(end - start, []).append(start)
    out = q.new_empty(seq, heads, head_dim)
    steps = torch.arange(max(by_length, default=0), device=q.device)
    for length, starts in by_length.items():
        per_call = max(1, MAX_SCORE_BYTES // (heads * length * length * 4))
        for lo in range(0, len(starts), per_call):
            group = torch.tensor(starts[lo : lo + per_call], device=q.device)
            rows = (group[:, None] + steps[None, :length]).reshape(-1)  # (spans * length,)
            n = len(group)
            # (heads, spans * length, head_dim) -> (spans, heads, length, head_dim)
            qg, kg, vg = (t[:, rows].reshape(heads, n, length, head_dim).transpose(0, 1) for t in (q, k, v))
            o = F.scaled_dot_product_attention(qg, kg, vg, dropout_p=dropout, scale=scaling)
            out[rows] = o.transpose(1, 2).reshape(n * length, heads, head_dim)
    return out.unsqueeze(0), None


def register() -> None:
    """Make :data:`ATTENTION` a name transformers' attention interface knows (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, window_attention)


def batch_windows(model: torch.nn.Module, on: bool = True) -> int:
    """Route the vision attention of a loaded Qwen2-VL / Qwen2.5-VL model through
    :func:`window_attention` (``on``), or back to transformers' SDPA split per span (``on=False``,
    for a comparison). Only attention that runs SDPA is rerouted: flash-attn already takes the
    packed spans in one call, and eager attention is a choice. Returns how many vision attention
    modules use the batched function now."""
    register()
    frm, to = ("sdpa", ATTENTION) if on else (ATTENTION, "sdpa")
    modules = [m for m in model.modules()
               if type(m).__name__.endswith("VisionAttention") and getattr(m, "config", None) is not None]
    for cfg in {id(m.config): m.config for m in modules}.values():
        if cfg._attn_implementation == frm:
            cfg._attn_implementation = to
    return sum(1 for m in modules if m.config._attn_implementation == ATTENTION)
