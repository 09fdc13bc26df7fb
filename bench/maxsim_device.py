"""Exact MaxSim over a whole library on a device: the GPU exact stage's yardstick.

Fills a :class:`ragspine.store.resident.ResidentColumn` (the copy ``RAGSPINE_EXACT_DEVICE``
keeps of a library's int8 page column) with ColPali-shaped pages (1,030 tokens x 128, random
unit float16 tokens generated on the device, so no disk or model time is counted) and times:

- ``all``: :meth:`ResidentColumn.maxsim_all`, exact MaxSim of one query against every page;
- ``100``: :meth:`ResidentColumn.maxsim` of 100 random candidates (the exact stage after a
  first stage);

each as p50/p99 over ``--queries`` queries of ``--query-tokens`` tokens, with the device
synchronised before every clock read. The baseline, in the same run: numpy
:func:`ragspine.scoring.multivector.maxsim_int8` on the CPU over ``--cpu-pages`` pages of the
same shape, scaled to pages per second, and the ratio between the two.

A check, not a timing: the device scores of 50 pages equal numpy's MaxSim of the same float16
values to 1e-2 (exits non-zero otherwise).

    python bench/maxsim_device.py --pages 1000,10000,100000 --device cuda

Target (docs/visual-scale.md): exact MaxSim over 100,000 pages <= 20 ms p50 on one H200.
Not yet measured on a GPU: no session so far has had one. Without CUDA, ``--device cpu`` runs
the same code on torch's CPU device (small sizes only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

TOKENS, DIM = 1030, 128


class _Shape:
    """What ResidentColumn reads of its column when it is filled directly."""

    dim = DIM
    path = Path("bench")


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fill(torch: Any, device: str, pages: int, seed: int) -> Any:
    from ragspine.store.resident import ResidentColumn

    res = ResidentColumn(_Shape(), device)
    g = torch.Generator(device=device).manual_seed(seed)
    step = 1000
    for a in range(0, pages, step):
        n = min(step, pages - a)
        x = torch.randn((n * TOKENS, DIM), generator=g, device=device)
        x /= x.norm(dim=1, keepdim=True)
        res.append_tokens([f"p{a + i}" for i in range(n)], [TOKENS] * n, x.to(torch.float16))
    res.ready.set()
    return res


def timed(torch: Any, device: str, fn: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        _sync(torch, device)
        t = time.perf_counter()
        fn()
        _sync(torch, device)
        out.append((time.perf_counter() - t) * 1000)
    return out


def p(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", default="1000,10000,100000")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--query-tokens", type=int, default=20)
    ap.add_argument("--cpu-pages", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from ragspine.scoring.multivector import maxsim_int8, maxsim_many, quantize_int8

    dev = args.device
    name = torch.cuda.get_device_name(dev) if dev.startswith("cuda") else f"torch cpu ({os.cpu_count()} CPUs)"
    print(f"bench/maxsim_device.py: {name}; pages of {TOKENS} x {DIM}, queries of {args.query_tokens} tokens",
          flush=True)
    rng = np.random.default_rng(args.seed)

    # Baseline: numpy on the CPU, int8 pages (what the CPU exact stage runs).
    cpu_pages = [rng.standard_normal((TOKENS, DIM)).astype(np.float32) for _ in range(args.cpu_pages)]
    quant = [(x.codes, x.scale.reshape(-1)) for x in map(quantize_int8, cpu_pages)]
    qs = [rng.standard_normal((args.query_tokens, DIM)).astype(np.float32) for _ in range(args.queries)]
    cpu_ms = [timed(torch, "cpu", lambda q=q: maxsim_int8(q, quant), 1)[0] for q in qs[:5]]
    cpu_pages_per_s = args.cpu_pages / (statistics.median(cpu_ms) / 1000)
    print(f"  numpy int8 baseline: {args.cpu_pages} pages in {statistics.median(cpu_ms):.1f} ms p50 "
          f"({cpu_pages_per_s:,.0f} pages/s)", flush=True)

    rows: list[dict[str, Any]] = []
    failed = False
    for n in [int(x) for x in args.pages.split(",") if x.strip()]:
        t = time.perf_counter()
        try:
            res = fill(torch, dev, n, args.seed)
        except (RuntimeError, MemoryError) as exc:  # out of device memory: say so, go on
            print(f"  {n:,} pages: could not be held on {dev} ({str(exc).splitlines()[0]})", flush=True)
            rows.append({"pages": n, "skipped": str(exc).splitlines()[0]})
            break
        fill_s = time.perf_counter() - t
        # Check: device scores of 50 pages against numpy on the same float16 values.
        ids = [f"p{i}" for i in rng.choice(n, size=min(50, n), replace=False)]
        got = res.maxsim(qs[0], ids)
        slots = [res._index[i] for i in ids]
        ref = maxsim_many(qs[0].astype(np.float16).astype(np.float32),
                          [res._tokens[res._slot_start[k]: res._slot_start[k] + TOKENS].float().cpu().numpy()
                           for k in slots])
        err = max(abs(got[i] - r) for i, r in zip(ids, ref))
        failed |= err > 1e-2
        all_ms = [timed(torch, dev, lambda q=q: res.maxsim_all(q), 1)[0] for q in qs]
        cand = [list(f"p{i}" for i in rng.choice(n, size=min(100, n), replace=False)) for _ in qs]
        c_ms = [timed(torch, dev, lambda q=q, c=c: res.maxsim(q, c), 1)[0] for q, c in zip(qs, cand)]
        row = {"pages": n, "fill_s": round(fill_s, 1), "all_p50_ms": round(p(all_ms[1:], 50), 2),
               "all_p99_ms": round(p(all_ms[1:], 99), 2), "cand100_p50_ms": round(p(c_ms[1:], 50), 2),
               "max_abs_err": float(err),
               "pages_per_s": round(n / (p(all_ms[1:], 50) / 1000)),
               "ratio_vs_numpy": round(n / (p(all_ms[1:], 50) / 1000) / cpu_pages_per_s, 1)}
        rows.append(row)
        print(f"  {n:>7,} pages: all {row['all_p50_ms']} ms p50 / {row['all_p99_ms']} p99, "
              f"100 candidates {row['cand100_p50_ms']} ms p50; {row['pages_per_s']:,} pages/s = "
              f"{row['ratio_vs_numpy']}x numpy; check err {err:.1e}; filled in {fill_s:.1f} s", flush=True)
        res = None  # frees the device copy before the next size
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
    if args.json:
        tmp = args.json.with_name(args.json.name + ".tmp")  # whole or not at all
        tmp.write_text(json.dumps({"device": name, "rows": rows, "cpu_pages_per_s": cpu_pages_per_s}, indent=1))
        os.replace(tmp, args.json)
    if failed:
        print("FAILED: device scores differ from numpy's by more than 1e-2", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
