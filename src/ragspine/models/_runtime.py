"""Device, dtype and attention choices, made once per model. Imports torch.

- device ``"auto"``: CUDA, then Apple MPS, then CPU;
- dtype ``None``: bfloat16 on CUDA, float32 elsewhere (CPU bf16 matmuls are slow and MPS bf16
  support is partial);
- attention implementation: None keeps transformers' default (SDPA where the model has it).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ragspine import runtimes as _runtimes
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

if _runtimes.runtime_threads() is not None:  # a server sized the pools before torch was loaded
    torch.set_num_threads(_runtimes.runtime_threads())  # type: ignore[arg-type]

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
}
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → cuda, then mps, then cpu. ``"cuda:1"`` style indices are accepted."""
    if isinstance(device, torch.device):
        return device
    name = str(device).strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.split(":", 1)[0] not in DEVICES[1:]:
        raise ModelLoadError(
            f"unknown device {device!r}; allowed: {', '.join(DEVICES)} (cuda:N too)"
        )
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but torch sees no CUDA GPU")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None → bfloat16 on CUDA, float32 elsewhere."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ModelLoadError(f"unsupported dtype {dtype}; allowed: {sorted(set(DTYPES))}")
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}; allowed: {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


def check_attn(attn_implementation: str | None) -> str | None:
    if attn_implementation is not None and attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise ModelLoadError(
            f"unknown attn_implementation {attn_implementation!r}; allowed: "
            f"{', '.join(ATTN_IMPLEMENTATIONS)} (or None for the transformers default)"
        )
    return attn_implementation


def model_kwargs(
    dtype: torch.dtype, attn_implementation: str | None, device: torch.device
) -> dict[str, Any]:
    """``from_pretrained`` arguments: dtype, attention, and direct placement on a GPU."""
    kw: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    if device.type == "cuda":
        kw["device_map"] = str(device)
    return kw


def to_device(batch: Any, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """Move a processor batch to ``device``; floating tensors (pixels) take the model dtype. A
    tensor in pinned memory (:func:`pin`) is copied without blocking the host: the copy runs on
    the device's stream while Python goes on to launch the forward, which the stream orders
    after it."""
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            # Asked only for a CUDA copy: on a GPU host, is_pinned() opens a CUDA context.
            nb = device.type == "cuda" and v.is_pinned()
            v = (v.to(device=device, dtype=dtype, non_blocking=nb) if v.is_floating_point()
                 else v.to(device, non_blocking=nb))
        out[k] = v
    return out


def pin(batch: Any, dtype: torch.dtype) -> Any:
    """A processor batch made ready for a non-blocking copy to a CUDA device, on a prep thread:
    floating tensors cast to the model dtype first (a bf16 page is half the bytes to copy, and a
    cast on the device after a pinned copy would block the host again), every tensor in pinned
    (page-locked) host memory. Only with CUDA: pinning needs its driver."""
    for k, v in list(batch.items()):
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                v = v.to(dtype)
            batch[k] = v.pin_memory()
    return batch
