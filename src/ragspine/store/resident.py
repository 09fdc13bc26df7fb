"""A library's int8 page column held on a torch device (a GPU) as float16, for exact MaxSim as
one matrix product over any set of pages, or over all of them.

The reference figure: on one H200, exact brute-force MaxSim over 100,000 ColPali pages (103 M
tokens x 128) is one 20 x 128 by 128 x 103 M product, ~10 ms, and the library's float16
tokens are 26 GB. So a GPU replica keeps every page of a library that fits resident and the
exact stage stops costing a read per candidate. ``bench/maxsim_device.py`` measures it.

The copy is built in the background from the column (a library of 100,000 pages is 13.6 GB of
codes to read); until it is ready, and for a library that does not fit, searches score on the
CPU (:meth:`MultivectorColumn.maxsim`) and are exact all the same. Writes made during the build
are queued and applied after it, so the copy never misses one. Deleted pages are dropped from
the index at once; their rows are reclaimed when the garbage exceeds the live rows.

torch is imported only here, and only when a device is configured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)

#: Rows read from the column per transfer while building the copy.
_LOAD_BATCH = 256
#: Share of the device's free memory the copy may take (the rest: the page model, the
#: products of a query, other libraries).
DEVICE_MEMORY_SHARE = 0.6
#: Pages scored per product in :meth:`ResidentColumn.maxsim_all` (bounds the ``(nq, tokens)``
#: similarity block: 4,096 ColPali pages x 32 query tokens is 270 MB of float16).
_ALL_BLOCK_PAGES = 4096


#: The copy is rewritten when its garbage (deleted and replaced pages) exceeds its live tokens
#: plus this many (~1,000 ColPali pages: small libraries never pay for a rewrite).
COMPACT_SLACK_TOKENS = 1_000_000


def _torch() -> Any:
    import torch

    return torch


def resolve_device(setting: str) -> str | None:
    """``RAGSPINE_EXACT_DEVICE`` → a torch device string, or None for numpy on the CPU.
    ``auto`` is ``cuda`` when torch sees one."""
    if setting == "numpy":
        return None
    if setting == "auto":
        try:
            torch = _torch()
        except ImportError:
            return None
        return "cuda" if torch.cuda.is_available() else None
    return setting


class ResidentColumn:
    """The float16 tokens of one column on ``device``, page after page in slots: slot ``k`` is
    ``tokens[start[k] : start[k] + length[k]]``; ``id -> slot`` for the live pages."""

    def __init__(self, column: Any, device: str, *, budget_bytes: int | None = None) -> None:
        self.column = column
        self.device = device
        self.dim = int(column.dim)
        self.ready = threading.Event()
        self.error: str | None = None
        self._budget = budget_bytes
        self._lock = threading.Lock()
        self._tokens: Any = None  # torch (capacity, dim) float16
        self._used = 0
        self._slot_start: list[int] = []
        self._slot_len: list[int] = []
        self._slot_id: list[str | None] = []  # None: deleted
        self._index: dict[str, int] = {}  # id -> slot
        self._uniform: int | None = None  # the page length when every slot has the same one
        self._live: tuple[list[int], list[str]] | None = None  # live slots and their ids, cached
        self._pending: list[tuple[str, Any]] = []  # writes made while building

    # -- building ---------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.build, name=f"resident-{self.column.path.stem}", daemon=True)
        t.start()
        return t

    def build(self) -> None:
        """Copy every page of the column to the device; on any failure (no memory, no
        device) record why and leave searches on the CPU."""
        try:
            torch = _torch()
            tokens = self.column.token_count()
            need = tokens * self.dim * 2
            budget = self._budget
            if budget is None and str(self.device).startswith("cuda"):
                free, _total = torch.cuda.mem_get_info(torch.device(self.device))
                budget = int(free * DEVICE_MEMORY_SHARE)
            if budget is not None and need > budget:
                raise MemoryError(f"{need / 2**30:.1f} GiB of float16 page tokens; {budget / 2**30:.1f} GiB allowed")
            with self._lock:
                self._tokens = torch.empty((max(tokens, 1), self.dim), dtype=torch.float16, device=self.device)
            for batch in self.column.iter_rows(_LOAD_BATCH):
                with self._lock:
                    self._append(batch)
            with self._lock:
                pending, self._pending = self._pending, []
                for op, arg in pending:
                    self._append(arg) if op == "put" else self._drop(arg)
                self.ready.set()
            logger.info("%s: %d pages (%d tokens) resident on %s", self.column.path.stem, len(self._index),
                        self._used, self.device)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the CPU path serving
            self.error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._tokens, self._index, self._pending = None, {}, []
            logger.warning("%s stays on the CPU for exact MaxSim: %s", self.column.path.stem, self.error)

    def _append(self, rows: Sequence[tuple[str, int, bytes, bytes]]) -> None:
        """Dequantize ``(id, n, codes, scale)`` rows onto the device (lock held)."""
        if not rows:
            return
        torch = _torch()
        codes = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.int8).reshape(-1, self.dim)
        scale = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32)
        block = torch.from_numpy(codes.copy()).to(self.device).to(torch.float32)
        block *= torch.from_numpy(scale.copy()).to(self.device)[:, None]
        self.append_tokens([r[0] for r in rows], [r[1] for r in rows], block.to(torch.float16))

    def append_tokens(self, ids: Sequence[str], lengths: Sequence[int], tokens: Any) -> None:
        """Add pages given as float16 device tokens ``(sum(lengths), dim)`` (lock held, or
        before the copy is shared: ``bench/maxsim_device.py`` fills one this way)."""
        torch = _torch()
        n_new = int(tokens.shape[0])
        if n_new != sum(lengths):
            raise ValueError(f"{n_new} tokens for pages of {sum(lengths)}")
        if self._tokens is None:
            self._tokens = torch.empty((max(n_new, 1), self.dim), dtype=torch.float16, device=self.device)
        if self._used + n_new > self._tokens.shape[0]:
            grow = max(self._used + n_new, int(self._tokens.shape[0] * 1.5))
            bigger = torch.empty((grow, self.dim), dtype=torch.float16, device=self.device)
            bigger[: self._used] = self._tokens[: self._used]
            self._tokens = bigger
        self._tokens[self._used : self._used + n_new] = tokens
        for pid, n in zip(ids, lengths, strict=True):
            pid, n = str(pid), int(n)
            old = self._index.get(pid)
            if old is not None:
                self._slot_id[old] = None
            if not self._slot_len:
                self._uniform = n
            elif n != self._uniform:
                self._uniform = None
            self._index[pid] = len(self._slot_id)
            self._slot_start.append(self._used)
            self._slot_len.append(n)
            self._slot_id.append(pid)
            self._used += n
        self._live = None
        if self._used > 2 * sum(self._slot_len[k] for k in self._index.values()) + COMPACT_SLACK_TOKENS:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the live pages back to back, dropping the rows of deleted and replaced ones."""
        torch = _torch()
        order = sorted(self._index.items(), key=lambda kv: kv[1])
        ids = [pid for pid, _k in order]
        lengths = [self._slot_len[k] for _pid, k in order]
        idx = torch.cat([torch.arange(self._slot_start[k], self._slot_start[k] + self._slot_len[k])
                         for _pid, k in order]) if order else torch.arange(0)
        tokens = self._tokens[idx.to(self.device)].clone()
        self._tokens, self._used = None, 0
        self._slot_start, self._slot_len, self._slot_id, self._index = [], [], [], {}
        self._uniform = None
        if ids:
            self.append_tokens(ids, lengths, tokens)

    def _drop(self, ids: Sequence[str]) -> None:
        for pid in ids:
            slot = self._index.pop(str(pid), None)
            if slot is not None:
                self._slot_id[slot] = None
        self._live = None

    # -- writes from the column ----------------------------------------------------------------

    def put(self, rows: Sequence[tuple[str, int, bytes, bytes]]) -> None:
        with self._lock:
            if self.error is not None:
                return
            if not self.ready.is_set():
                self._pending.append(("put", list(rows)))
            else:
                self._append(rows)

    def delete(self, ids: Sequence[str]) -> None:
        with self._lock:
            if self.error is not None:
                return
            if not self.ready.is_set():
                self._pending.append(("delete", list(ids)))
            self._drop(ids)

    # -- scoring ------------------------------------------------------------------------------

    def _query(self, query: npt.ArrayLike) -> Any:
        torch = _torch()
        q = np.asarray(query, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim or not q.shape[0]:
            raise ValueError(f"query must be (tokens, {self.dim}), got {q.shape}")
        return torch.as_tensor(q, device=self.device).to(torch.float16)

    def _score_slots(self, q: Any, slots: Sequence[int]) -> Any:
        """MaxSim of ``q`` ``(nq, dim)`` against the pages in ``slots`` (lock held): one
        gather, one product, a per-page max."""
        torch = _torch()
        lengths = [self._slot_len[k] for k in slots]
        starts = torch.tensor([self._slot_start[k] for k in slots], device=self.device)
        if all(n == lengths[0] for n in lengths):  # one page length (ColPali): a reshape
            n = lengths[0]
            idx = (starts[:, None] + torch.arange(n, device=self.device)).reshape(-1)
            sim = (q @ self._tokens[idx].T).float()  # (nq, pages * n)
            return sim.reshape(q.shape[0], len(slots), n).amax(dim=2).sum(dim=0)
        lens = torch.tensor(lengths, device=self.device)
        offs = torch.repeat_interleave(starts - torch.cumsum(lens, 0) + lens, lens)
        idx = torch.arange(int(lens.sum()), device=self.device) + offs
        page = torch.repeat_interleave(torch.arange(len(slots), device=self.device), lens)
        sim = (q @ self._tokens[idx].T).float()  # (nq, tokens)
        best = torch.full((q.shape[0], len(slots)), float("-inf"), device=self.device)
        best.scatter_reduce_(1, page.expand(q.shape[0], -1), sim, reduce="amax")
        return best.sum(dim=0)

    def maxsim(self, query: npt.ArrayLike, ids: Sequence[str]) -> dict[str, float] | None:
        """Exact MaxSim of ``query`` against the resident pages of ``ids`` (absent ids are left
        out), or None while the copy is not ready."""
        if not self.ready.is_set() or self.error is not None:
            return None
        with self._lock:
            found = [(str(pid), self._index[pid]) for pid in ids if pid in self._index]
            if not found:
                return {}
            scores = self._score_slots(self._query(query), [k for _pid, k in found]).double().cpu().numpy()
        return {pid: float(s) for (pid, _k), s in zip(found, scores, strict=True)}

    def maxsim_all(self, query: npt.ArrayLike) -> tuple[list[str], np.ndarray] | None:
        """Exact MaxSim of ``query`` against every resident page: ``(ids, scores)``, or None
        while the copy is not ready. With one page length the tokens are scored in place,
        ``_ALL_BLOCK_PAGES`` slots per product (no gather)."""
        if not self.ready.is_set() or self.error is not None:
            return None
        torch = _torch()
        with self._lock:
            q = self._query(query)
            n_slots = len(self._slot_id)
            if self._uniform is not None and n_slots:
                n = self._uniform
                parts = []
                for a in range(0, n_slots, _ALL_BLOCK_PAGES):
                    b = min(a + _ALL_BLOCK_PAGES, n_slots)
                    block = self._tokens[a * n : b * n]  # (pages * n, dim), a view
                    parts.append((q @ block.T).reshape(q.shape[0], b - a, n).amax(dim=2).float().sum(dim=0))
                per_slot = torch.cat(parts).double().cpu().numpy()
            else:
                per_slot = np.full(n_slots, -np.inf)
                for a in range(0, n_slots, _ALL_BLOCK_PAGES):
                    slots = list(range(a, min(a + _ALL_BLOCK_PAGES, n_slots)))
                    per_slot[a : a + len(slots)] = self._score_slots(q, slots).double().cpu().numpy()
            if self._live is None:
                live = [k for k in range(n_slots) if self._slot_id[k] is not None]
                self._live = (live, [str(self._slot_id[k]) for k in live])
            live, ids = self._live
        return list(ids), per_slot[live]
