"""Batches of model inputs: which inputs share a batch (:func:`plan_batches`), and running a
model once per batch with the results put back in the caller's order (:func:`run_batched`),
optionally preparing the next batches on helper threads while the current one runs.

Pure Python, no torch: the template bases of :mod:`ragspine.models.base` use it for every
model kind.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ragspine.models.errors import ModelOutputError

_T = TypeVar("_T")
_R = TypeVar("_R")


def plan_batches(
    sort_keys: Sequence[Any],
    batch_size: int,
    bucket_keys: Sequence[Hashable] | None = None,
) -> list[list[int]]:
    """Split ``range(len(sort_keys))`` into batches of at most ``batch_size`` indices.

    Indices are ordered by ``(bucket, sort key, index)``; a batch never spans two buckets, so
    images that the processor turns into different shapes never share a batch (no padding
    between them). Ties break on the index, so the plan is deterministic. Every index appears
    in exactly one batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(sort_keys)
    if bucket_keys is not None and len(bucket_keys) != n:
        raise ValueError(f"{len(bucket_keys)} bucket keys for {n} items")
    buckets: list[Hashable] = list(bucket_keys) if bucket_keys is not None else [0] * n
    # Buckets are ordered by first appearance, so they need not be comparable with each other.
    first_seen: dict[Hashable, int] = {}
    for i, b in enumerate(buckets):
        first_seen.setdefault(b, i)
    order = sorted(range(n), key=lambda i: (first_seen[buckets[i]], sort_keys[i], i))
    plan: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) == batch_size or buckets[i] != buckets[current[0]]):
            plan.append(current)
            current = []
        current.append(i)
    if current:
        plan.append(current)
    return plan


def run_batched(
    items: Sequence[_T],
    plan: list[list[int]],
    fn: Callable[[Any], Sequence[_R]],
    what: str,
    model_id: str,
    *,
    prepare: Callable[[list[_T]], Any] | None = None,
    prefetch: int = 0,
) -> list[_R]:
    """Call ``fn`` once per planned batch and return the results in the caller's order.

    With ``prepare``, each batch goes through ``prepare`` (CPU preprocessing) and then ``fn``.
    With ``prefetch`` = k > 0, up to k batches are prepared ahead on k helper threads while
    ``fn`` runs (``prepare`` must then be safe to call from several threads at once).
    """
    out: list[_R | None] = [None] * len(items)
    batches = [[items[i] for i in idx] for idx in plan]
    prep = prepare if prepare is not None else (lambda b: b)

    def consume(idx: list[int], batch: list[_T], prepared: Any) -> None:
        results = list(fn(prepared))
        if len(results) != len(batch):
            raise ModelOutputError(
                f"{model_id}: {what} returned {len(results)} results for a batch of "
                f"{len(batch)} inputs; expected one per input"
            )
        for i, r in zip(idx, results, strict=True):
            out[i] = r

    if prefetch > 0 and len(batches) > 1:
        pool = ThreadPoolExecutor(max_workers=prefetch, thread_name_prefix="ragspine-prep")
        try:
            pending = deque(pool.submit(prep, b) for b in batches[:prefetch])
            next_batch = len(pending)
            for idx, batch in zip(plan, batches, strict=True):
                prepared = pending.popleft().result()
                if next_batch < len(batches):
                    pending.append(pool.submit(prep, batches[next_batch]))
                    next_batch += 1
                consume(idx, batch, prepared)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        for idx, batch in zip(plan, batches, strict=True):
            consume(idx, batch, prep(batch))
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:  # pragma: no cover - plan_batches covers every index
        raise ModelOutputError(f"{model_id}: {what} produced no result for inputs {missing[:5]}")
    return out  # type: ignore[return-value]
