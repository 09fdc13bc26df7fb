"""MUVERA page encodings of a whole batch on the page model's device (torch), for the ingest's
encode stage on a GPU.

:class:`ragspine.scoring.muvera.Muvera` encodes a page in ~2.8 ms of numpy on the ingesting
thread, which holds the GIL: on a GPU node that thread's own work per page bounds the ingest
(docs/measured.md, "The ingest ceiling as users ingest"), and MUVERA is a seventh of it. Here the
same arithmetic runs for every page of a batch at once, one set of torch operations per batch,
on the encode thread, on the device that just made the vectors; what the host keeps is one
float32 row a page.

The same encodings as the numpy code, with its random matrices (drawn by it, for the library's
recorded parameters), its float64 hyperplane signs and bucket sums, and its rule for an empty
bucket (the first token of the nearest occupied bucket by Hamming distance, ties to the lowest
id); sums differ only in their order, within float32 rounding
(``tests/models/test_muvera_device.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ragspine.scoring.muvera import Muvera


class DeviceMuvera:
    """Document encodings of :class:`Muvera` ``base``'s parameters on ``device``."""

    def __init__(self, base: Muvera, device: torch.device | str) -> None:
        p = base.params
        self.params = p
        self.device = torch.device(device)
        self.buckets = base.buckets
        self._planes = torch.as_tensor(base._planes, dtype=torch.float64, device=self.device)  # (dim, r*k)
        self._proj = torch.as_tensor(base._proj, dtype=torch.float64, device=self.device)  # (dim, r*dp)
        self._bits = torch.as_tensor(base._bits, dtype=torch.int64, device=self.device)  # (k,)
        # An occupied bucket's distance from each bucket, ties broken towards the lowest id:
        # Hamming distance * buckets + id, so one argmin picks what the numpy rule picks.
        ham = torch.as_tensor(base._hamming, dtype=torch.int64, device=self.device)  # (b, b)
        self._rank = ham * self.buckets + torch.arange(self.buckets, device=self.device)[None, :]

    def documents(self, pages: Sequence[np.ndarray | torch.Tensor]) -> list[np.ndarray]:
        """One ``(size,)`` float32 encoding per page multivector ``(n_i, dim)``."""
        if not pages:
            return []
        p, b, dev = self.params, self.buckets, self.device
        r, k, dp = p.r_reps, p.k_sim, p.dim_proj
        lengths = [int(v.shape[0]) for v in pages]
        if min(lengths) == 0:
            raise ValueError("MUVERA: cannot encode an empty multivector")
        v = torch.cat([torch.as_tensor(x, device=dev).float() for x in pages])  # (N, dim)
        if v.shape[1] != p.dim:
            raise ValueError(f"MUVERA: expected multivectors of shape (n, {p.dim}), got (n, {v.shape[1]})")
        m, total = len(pages), v.shape[0]
        page_of = torch.repeat_interleave(torch.arange(m, device=dev), torch.as_tensor(lengths, device=dev))  # (N,)
        signs = (v.double() @ self._planes > 0).view(total, r, k).long()  # (N, r, k)
        bucket = (signs * self._bits).sum(-1)  # (N, r)
        # float64, as the sums: a float32 product could run in TF32 where a process allows it.
        projected = (v.double() @ self._proj).view(total, r, dp)  # (N, r, dp)
        # Every (page, repetition, bucket) cell of the batch in one table: page * r * b + rep * b + bucket.
        slot = page_of[:, None] * (r * b) + torch.arange(r, device=dev)[None, :] * b + bucket  # (N, r)
        flat = slot.reshape(-1)
        sums = torch.zeros(m * r * b, dp, dtype=torch.float64, device=dev).index_add_(0, flat, projected.reshape(-1, dp))
        counts = torch.zeros(m * r * b, dtype=torch.float64, device=dev).index_add_(
            0, flat, torch.ones_like(flat, dtype=torch.float64))
        out = sums / counts.clamp(min=1)[:, None]  # (m*r*b, dp): bucket means
        # The first token of each cell (an empty cell keeps N, never read).
        token = torch.arange(total, device=dev)[:, None].expand(total, r).reshape(-1)
        first = torch.full((m * r * b,), total, dtype=torch.int64, device=dev).scatter_reduce_(
            0, flat, token, reduce="amin")
        occupied = (counts > 0).view(m * r, b)  # (m*r, b)
        if not bool(occupied.all()):
            # Each empty bucket takes the first token of the nearest occupied one (by rank).
            big = torch.iinfo(torch.int64).max
            rank = torch.where(occupied[:, None, :], self._rank[None, :, :], big)  # (m*r, b, b)
            near = rank.argmin(-1)  # (m*r, b): for each bucket, the occupied bucket it borrows from
            cells = (torch.arange(m * r, device=dev)[:, None] * b + near).reshape(-1)  # (m*r*b,)
            src = first[cells]  # (m*r*b,) token index
            rep = (torch.arange(m * r * b, device=dev) // b) % r
            empty = ~occupied.reshape(-1)
            out[empty] = projected[src[empty], rep[empty]]
        enc = out.view(m, r * b * dp).float().cpu().numpy()  # (m, size)
        return list(enc)
