"""Where a page's and a query's encoding time goes, step by step, for ``bench/encode.py``.

Each step is timed with the device synchronised after it: the processor (tokeniser, or resize and
normalise), the copy to the device, the model's forward, the copy back. And, for a Qwen encoder
whose vision spans go in batched calls (:mod:`ragspine.models.windows`), the model-only time with
transformers' split instead and the lowest cosine between the two paths' token vectors.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def query_steps(enc: Any, queries: list[str]) -> dict[str, float]:
    """Where one query's time goes, step by step (median ms over ``queries``, one at a time,
    the device synchronised after each step): the processor (tokeniser), the copy to the device,
    the model's forward, and the copy back with the padding dropped."""
    import torch

    from ragspine.models._runtime import to_device

    steps: dict[str, list[float]] = {"processor": [], "to_device": [], "forward": [], "to_host": []}
    with torch.inference_mode():
        for q in queries:
            t0 = time.perf_counter()
            batch = enc._prepare_queries([q])
            t1 = time.perf_counter()
            inputs = to_device(batch, enc.device, enc.dtype)
            sync(enc.device)
            t2 = time.perf_counter()
            emb = enc.model(**inputs, **enc.forward_kwargs)
            sync(enc.device)
            t3 = time.perf_counter()
            mask = inputs["attention_mask"].bool().cpu().numpy()
            emb.float().cpu().numpy()[0][mask[0]]
            t4 = time.perf_counter()
            for k, a, b in (("processor", t0, t1), ("to_device", t1, t2), ("forward", t2, t3), ("to_host", t3, t4)):
                steps[k].append((b - a) * 1000)
    return {f"query_{k}_ms": round(statistics.median(v), 2) for k, v in steps.items()}


def page_steps(enc: Any, same: list[Any]) -> dict[str, float]:
    """Where a page's time goes in one batch of ``same`` (ms a page, the device synchronised
    after each step): the processor (resize, normalise; ColSmol's uint8 tiles, normalised on the
    device in the next step), the copy to the device, the forward, and the copy of the vectors
    and the attention mask back to the host."""
    import torch

    t0 = time.perf_counter()
    batch, _layouts = enc._prepare_pages(same)
    t1 = time.perf_counter()
    inputs = enc._model_inputs(batch)  # the copy, and ColSmol's uint8 tiles normalised there
    sync(enc.device)
    t2 = time.perf_counter()
    with torch.inference_mode():
        emb = enc.model(**inputs, **enc.forward_kwargs)
        sync(enc.device)
        t3 = time.perf_counter()
        emb.float().cpu().numpy()
        inputs["attention_mask"].bool().cpu().numpy()
    t4 = time.perf_counter()
    n = len(same)
    return {f"page_{k}_ms": round((b - a) * 1000 / n, 2)
            for k, a, b in (("processor", t0, t1), ("to_device", t1, t2), ("forward", t2, t3), ("to_host", t3, t4))}


def split_windows(enc: Any, same: list[Any], inputs: dict[str, Any], reps: int) -> tuple[float, float]:
    """For a Qwen encoder whose vision spans go in batched calls (ragspine.models.windows): the
    model-only seconds a batch with transformers' split (one SDPA call per span) instead, and the
    lowest cosine between a token vector of the two paths."""
    import numpy as np
    import torch

    from ragspine.models.windows import batch_windows

    batched = enc.encode_pages(same)
    batch_windows(enc.model, on=False)
    try:
        plain = enc.encode_pages(same)
        with torch.inference_mode():
            enc.model(**inputs, **enc.forward_kwargs)
            sync(enc.device)
            t0 = time.perf_counter()
            for _ in range(reps):
                enc.model(**inputs, **enc.forward_kwargs)
            sync(enc.device)
        seconds = (time.perf_counter() - t0) / reps
    finally:
        batch_windows(enc.model, on=True)
    cos = 1.0
    for x, y in zip(plain, batched, strict=True):
        a, b = x.vectors.astype(np.float64), y.vectors.astype(np.float64)
        cos = min(cos, float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min()))
    return seconds, cos
