"""Page-model queries replayed from CUDA graphs: a query in a few launches, not hundreds.

Why: one query through a ColPali-family model is a short sequence (~15-60 tokens) through 18-36
transformer layers: a few hundred small kernels, each launched from Python. On one H200 the
plain forward of ColPali took 12 ms alone and ``encode_queries`` 66 ms p50 (docs/measured.md,
"GPU anchors"): the device waits for the host to launch. A CUDA graph records the kernels of one
forward once and replays them in one call.

How:
- A batch of queries is packed into a static ``(batch, length)`` shape and run through its
  family's static forward (:mod:`ragspine.models.static_queries`: nothing read back to the
  host, so it can be captured).
- One graph per shape of :data:`~ragspine.models.static_queries.BATCHES` x
  :data:`~ragspine.models.static_queries.LENGTHS`, all captured when the model loads (about
  three forwards each), into one memory pool: replays are serialised under a lock and each
  output is copied to the host before the next, so the graphs may share their scratch memory.
- A batch too long or too wide for every shape takes the plain forward (``shape_of`` is None).

:func:`checked` builds the graphs and compares every shape with the plain forward, token by
token, on a probe batch that lands on it; a capture that fails or vectors that differ leave the
encoder on its plain forward, with the reason logged and kept (``ColVisionEncoder.query_path``).

Without ``capture`` (on a CPU, in tests) the static forward runs eagerly on the same buffers: the
packing, the static forward and the slicing are then what is checked, everything but the graph.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ragspine.models.static_queries import BATCHES, LENGTHS, StaticForward, pack, round_up

logger = logging.getLogger(__name__)

#: Lowest cosine between a graph's token vector and the plain forward's of the same query alone
#: that :func:`checked` accepts. bf16 at another shape differs in the last bits (the full
#: ColQwen2 architecture in bf16 on a CPU, padded static batch against the plain batch: 0.99908;
#: ColPali 0.99945); a wrong mask or position differs by far more (on the tiny models: tokens
#: shifted one position -0.42 to -1.0, ColPali attending to its padding 0.25).
MIN_COSINE = 0.995
#: Probe queries for the check, and the words longer probes are grown from
#: (:func:`probe_batches`).
PROBES = (
    "revenue",
    "How did the gross margin of the consumer segment change between 2019 and 2021?",
    "Which region had the highest share of mobile subscribers in the survey of 2018, and by how "
    "much did it grow against the previous year's figure in the table on the operators' page?",
)
#: Eager runs on a side stream before each capture (CUDA's lazy init of kernels and workspaces
#: must not fall inside it).
WARM_RUNS = 2


class QueryGraphs:
    """Static-shape query batches, replayed from one CUDA graph per shape."""

    def __init__(
        self,
        forward: StaticForward,
        *,
        device: torch.device,
        pad_id: int,
        capture: bool,
        batches: Sequence[int] = BATCHES,
        lengths: Sequence[int] = LENGTHS,
    ) -> None:
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {device}")
        self.forward = forward
        self.device = device
        self.pad_id = pad_id
        self.capture = capture
        self.batches = tuple(batches)
        self.lengths = tuple(lengths)
        #: (batch, length) -> (ids, mask, output, graph): static buffers; graph None uncaptured.
        self._shapes: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]] = {}
        self._lock = threading.Lock()
        self._pool: Any = torch.cuda.graph_pool_handle() if capture else None

    @property
    def captured(self) -> int:
        return sum(1 for *_, g in self._shapes.values() if g is not None)

    def shape(self, n: int, longest: int) -> tuple[int, int] | None:
        b, n_tok = round_up(n, self.batches), round_up(longest, self.lengths)
        return None if b is None or n_tok is None else (b, n_tok)

    @torch.inference_mode()
    def build(self) -> None:
        """Every shape's buffers (and graph), the largest first: the pool then holds the
        largest forward's scratch memory, which every smaller one fits into."""
        for b in sorted(self.batches, reverse=True):
            for n_tok in sorted(self.lengths, reverse=True):
                self._build(b, n_tok)

    def _build(self, b: int, n_tok: int) -> None:
        ids = torch.full((b, n_tok), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, n_tok), dtype=torch.long, device=self.device)
        ids[:, :2], mask[:, :2] = self.pad_id, 1  # any real-looking row: the values are replaced
        graph = None
        if self.capture:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARM_RUNS):
                    self.forward(ids, mask)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a page batch encoding on another thread may allocate meanwhile.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                out = self.forward(ids, mask)
        else:
            out = self.forward(ids, mask)
        self._shapes[(b, n_tok)] = (ids, mask, out, graph)

    def drop_except(self, keep: set[tuple[int, int]]) -> int:
        """Forget every shape not in ``keep`` (its batches take the plain forward); how many."""
        with self._lock:
            gone = [shape for shape in self._shapes if shape not in keep]
            for shape in gone:
                del self._shapes[shape]
        return len(gone)

    def shape_of(self, attention_mask: torch.Tensor) -> tuple[int, int] | None:
        """The kept shape a processor batch (its attention mask) runs at; None when it fits none
        (the caller runs the plain forward)."""
        counts = attention_mask.sum(1)
        shape = self.shape(len(counts), int(counts.max()))
        return shape if shape in self._shapes else None

    @torch.inference_mode()
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[np.ndarray]:
        """One processor batch of queries -> each query's ``(n_tokens, dim)`` float32 vectors,
        at :meth:`shape_of` (ValueError when that is None)."""
        shape = self.shape_of(attention_mask)
        if shape is None:
            raise ValueError(f"no kept shape holds a batch of {attention_mask.shape[0]} queries of up to "
                             f"{int(attention_mask.sum(1).max())} tokens")
        p_ids, p_mask, n_tok = pack(input_ids, attention_mask, *shape, self.pad_id)
        width = max(n_tok)
        with self._lock:
            ids, mask, out, graph = self._shapes[shape]
            ids.copy_(p_ids)
            mask.copy_(p_mask)
            if graph is not None:
                graph.replay()
            else:
                out = self.forward(ids, mask)
            host = out[: len(n_tok), :width].float().cpu().numpy()  # (n, width, dim); syncs
        return [np.ascontiguousarray(host[i, :k]) for i, k in enumerate(n_tok)]


def lowest_cosine(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """The lowest cosine between matching token vectors of two encodings of the same queries
    (-1.0 when any query's token count differs)."""
    low = 1.0
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return -1.0
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        cos = (x64 * y64).sum(1) / (np.linalg.norm(x64, axis=1) * np.linalg.norm(y64, axis=1))
        low = min(low, float(np.nan_to_num(cos, nan=-1.0).min()))
    return low


def probe_batches(count: Callable[[str], int], graphs: QueryGraphs,
                  probes: Sequence[str] = PROBES) -> dict[tuple[int, int], list[str]]:
    """Probe batches that land on every shape of ``graphs``: for each length, a text whose token
    count (``count``) falls in it, grown from the probes a word at a time, first in its batch and
    followed by shorter texts; for each batch size that many texts. A length no text reaches
    (a processor that truncates) has no probe."""
    words = " ".join(probes).split()
    by_length: dict[int, str] = {}
    text = ""
    for i in range(8 * len(words)):
        text = f"{text} {words[i % len(words)]}".strip()
        bucket = round_up(count(text), graphs.lengths)  # None past the last length
        if bucket is not None:
            by_length.setdefault(bucket, text)
        if len(by_length) == len(graphs.lengths):
            break
    shorter = list(probes)
    out: dict[tuple[int, int], list[str]] = {}
    for n_tok, longest in by_length.items():
        # ``longest`` itself is one of these: every batch has texts to fill it.
        fill = [t for t in shorter + list(by_length.values()) if count(t) <= n_tok]
        for b in graphs.batches:
            out[(b, n_tok)] = [longest] + [fill[i % len(fill)] for i in range(b - 1)]
    return out


def checked(
    graphs: QueryGraphs,
    prepare: Callable[[list[str]], Any],
    plain: Callable[[list[str]], list[np.ndarray]],
    probes: Sequence[str] = PROBES,
) -> tuple[QueryGraphs | None, str]:
    """``graphs`` built, and every shape compared with ``plain`` (each probe text encoded alone,
    unpadded) on a probe batch that lands on it (:func:`probe_batches`); or None and why not.
    ``prepare`` is the encoder's query processor (texts -> batch). A shape no probe batch reached
    (by the batch's own token counts) is dropped: its batches take the plain forward."""
    try:
        graphs.build()
        batches = probe_batches(lambda t: int(prepare([t])["attention_mask"].sum()), graphs, probes)
        alone = {t: plain([t])[0] for t in {t for texts in batches.values() for t in texts}}
        low, reached = 1.0, set()
        for texts in batches.values():
            batch = prepare(texts)
            reached.add(graphs.shape_of(batch["attention_mask"]))
            fast = graphs.encode(batch["input_ids"], batch["attention_mask"])
            low = min(low, lowest_cosine(fast, [alone[t] for t in texts]))
        unchecked = graphs.drop_except(reached)
    except Exception as e:  # noqa: BLE001  (any failure to capture or run leaves the plain forward)
        return None, f"could not capture: {type(e).__name__}: {e}"
    if low < MIN_COSINE:
        return None, f"vectors differ from the plain forward's (lowest token cosine {low:.4f})"
    kind = "CUDA graphs" if graphs.capture else "static shapes, eager"
    dropped = f", {unchecked} unreached by any probe dropped" if unchecked else ""
    return graphs, f"{kind}: {len(reached)} shapes{dropped}, lowest token cosine {low:.5f}"
