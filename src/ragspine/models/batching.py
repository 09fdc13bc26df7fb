"""Concurrent query encodings of one model, run as one call: the local equivalent of Ray Serve's
``@serve.batch`` for a server's search threads.

Opportunistic, with no timer: a query that finds the model idle is encoded at once, alone (no
wait at low load); queries that arrive while a call runs queue up, and when it returns, the
first of them encodes every query queued by then (up to ``max_batch``) in one call, which costs
little more than one on a GPU and saves the per-call overheads on a CPU. Each caller gets its
own rows back, or the exception the call raised.

Written here rather than taken from a library: Ray Serve's batching needs a Ray deployment (the
local server has none), and the asyncio batchers wait on a timer, which adds latency to every
query of an idle server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

#: Queries one call may take (``RAGSPINE_QUERY_BATCH_SIZE``).
DEFAULT_MAX_BATCH = 16


class _Request:
    __slots__ = ("texts", "result", "error", "ready", "lead")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.result: list[Any] | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.lead = False


class QueryBatcher:
    """``batcher(texts) -> rows``, one row per text, with concurrent callers' texts encoded in
    one call of ``encode`` (which takes a list and returns a sequence of rows)."""

    def __init__(self, encode: Callable[[list[str]], Sequence[Any]], max_batch: int = DEFAULT_MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._encode = encode
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Request] = []
        self._busy = False
        #: Calls made and texts encoded (what the batching saved is calls < texts).
        self.calls = 0
        self.texts = 0

    def __call__(self, texts: list[str]) -> list[Any]:
        req = _Request(list(texts))
        with self._lock:
            self._queue.append(req)
            if not self._busy:
                self._busy = True
                req.lead = True
        if not req.lead:
            req.ready.wait()
        if req.lead:  # this thread encodes a batch: its own request is in it
            self._run_batch()
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    def _run_batch(self) -> None:
        with self._lock:
            batch, n = [], 0
            while self._queue and (not batch or n + len(self._queue[0].texts) <= self.max_batch):
                r = self._queue.pop(0)
                batch.append(r)
                n += len(r.texts)
        try:
            rows = list(self._encode([t for r in batch for t in r.texts]))
            if len(rows) != n:
                raise RuntimeError(f"the encoder gave {len(rows)} rows for {n} queries")
            at = 0
            for r in batch:
                r.result = rows[at:at + len(r.texts)]
                at += len(r.texts)
        except BaseException as exc:  # every caller of the batch hears of it
            for r in batch:
                r.error = exc
        self.calls += 1
        self.texts += n
        with self._lock:
            nxt = self._queue[0] if self._queue else None
            if nxt is None:
                self._busy = False
            else:
                nxt.lead = True  # the first waiter encodes what queued meanwhile
        for r in batch:
            r.ready.set()
        if nxt is not None:
            nxt.ready.set()


class _Batched:
    """A model whose query encodings go through a :class:`QueryBatcher`; everything else (its
    identity, page encoding, passage encoding) is the model's own."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __repr__(self) -> str:
        return f"batched queries of {self._model!r}"


class BatchedPageEncoder(_Batched):
    def __init__(self, model: Any, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__(model)
        self.queries = QueryBatcher(model.encode_queries, max_batch)

    def encode_queries(self, texts: Sequence[str]) -> list[Any]:
        return self.queries(list(texts))


class BatchedDenseEncoder(_Batched):
    def __init__(self, model: Any, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__(model)
        self.queries = QueryBatcher(lambda texts: model.encode(texts, kind="query"), max_batch)

    def encode(self, texts: Sequence[str], kind: str = "query") -> Any:
        if kind != "query":
            return self._model.encode(texts, kind=kind)
        import numpy as np

        rows = self.queries(list(texts))
        return np.stack(rows) if rows else self._model.encode([], kind="query")
