"""The first stage alone: how each way Qdrant can keep and scan the MUVERA encodings trades
recall for time, on the pages of ``bench/scale.py``.

    .venv/bin/python bench/first_stage.py                      # 20,000 pages, the hard workload
    .venv/bin/python bench/first_stage.py --pages 5000 --configs int8,turbo4,bin1-q8
    .venv/bin/python bench/first_stage.py --cache /tmp/fde-cache # reuse the encodings next time

Pages and queries are ``bench/scale.py``'s (ColPali-shaped random pages, each query planted in
10 of them); ``--run 1`` (the default here) plants each query token in one patch, the case a
first stage sees least of. Every page is encoded with ragspine's MUVERA encoder (the library
default parameters: 10,240 dims) and written to a bare Qdrant Edge shard, one per
configuration, with no graph (the field is scanned) and the configuration's quantized copy in
RAM; the shard is optimized (which builds the copy; the time is printed) and each query asks
for the best ``C`` pages by the quantized inner product, oversampled and rescored with the
float16 originals as ragspine's first stage does.

Printed per configuration: **recall**, the share of the exhaustive top 10 (exact MaxSim over
every page's full vectors, numpy) found among the ``C`` candidates (``--candidates``; what the
exact stage can at best recover), the first stage's p50 / p99 latency, the build time, and the
quantized copy's bytes a page. The baseline is the same scan of the float16 originals with no
quantized copy, in the same run; each configuration's p50 is also given as a ratio to it.

Configurations (``--configs``, comma-separated): ``f16`` (no copy: the baseline), ``int8``
(scalar int8, ragspine's default before this bench), ``turboN`` (TurboQuant with N bits a
component: 8, 4, 2, 1.5 as ``turbo1.5``, 1), ``binN-qM`` (binary quantization storing N bits
a component, 1, 1.5 or 2, the query encoded with M bits: 8, 4, or ``b`` for binary), each
followed by ``xK`` for an oversampling of K (default 2): ``turbo4x4``.

Measured on the 2-core development machine (load average ~2, the defaults: 20,000 pages, run 1,
20 queries, p50 of 60 timed queries). The ceiling, exact inner products of the float32
encodings, is recall 0.830 at 100 candidates and 0.885 at 200: at this size the encoding, not
its quantized copy, is what loses pages. p50 at 100 candidates; recall at 100 / 200:

| configuration | recall 100 / 200 | p50 (x of f16) | build | copy a page |
|---|---|---|---|---|
| f16 (scan of the originals) | 0.830 / 0.885 | 36.2 ms (1.00) | 1.6 s | - |
| int8x2 (ragspine's default) | 0.815 / 0.880 | 12.1 ms (0.33) | 4.6 s | 10 KB |
| turbo8x2 | 0.830 / 0.885 | 17.1 ms (0.47) | 6.2 s | 10 KB |
| turbo4x2 | 0.830 / 0.885 | 14.0 ms (0.39) | 10.2 s | 5 KB |
| turbo2x4 | 0.830 / 0.885 | 9.8 ms (0.27) | 7.8 s | 2.5 KB |
| turbo1x8 | 0.815 / 0.880 | 8.4 ms (0.23) | 5.7 s | 1.25 KB |
| bin2-q8x4 | 0.830 / 0.875 | 24.9 ms (0.69) | 4.8 s | 2.5 KB |
| bin1-q8x8 | 0.795 / 0.855 | 16.6 ms (0.46) | 3.6 s | 1.25 KB |
| bin1-q8x16 | 0.815 / 0.875 | 20.2 ms (0.56) | 3.9 s | 1.25 KB |

Two repeat runs of int8x2 and turbo2x4 (20,000 pages, with and without 20,000 vectorless
points beside them, UUID or integer ids, sparse vectors): 11-15 ms and 7-10 ms. TurboQuant at
2 bits keeps the ceiling's recall at ~20-30% less time and a quarter of int8's RAM; asymmetric
binary (float query, binary pages) is slower here than int8 because its oversampling rescoring
reads more float16 originals. The same int8 scan inside a library built by ``bench/scale.py``
(``--store-only 20000``: pages, passages, payload indexes) took 19-22 ms; removing the
payload indexes, the filter, the payload or re-optimizing did not change it, and the cause is
not found yet.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import TOP_K, Workload, exact_scores, pct, top_k  # noqa: E402 - the workload of bench/scale.py

DEFAULT_CONFIGS = "f16,int8x2,turbo8x2,turbo4x2,turbo4x4,turbo2x4,turbo2x8,turbo1x8,bin2-q8x4,bin1-q8x8,bin1-q8x16"
_CONFIG = re.compile(r"^(f16|int8|turbo(8|4|2|1\.5|1)|bin(2|1\.5|1)-q(8|4|b))(?:x(\d+(?:\.\d+)?))?$")


def parse_config(name: str) -> dict[str, Any]:
    """``turbo4x4`` -> the Qdrant Edge quantization config and the oversampling."""
    import qdrant_edge as qe

    m = _CONFIG.match(name)
    if m is None:
        raise ValueError(f"unknown configuration {name!r}; see --help")
    kind, turbo_bits, bin_bits, q_bits, over = m.groups()
    oversampling = float(over) if over else 2.0
    if kind == "f16":
        return {"name": name, "quant": None, "oversampling": None, "bits": 0.0}
    if kind == "int8":
        quant = qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=0.99, always_ram=True)
        return {"name": name, "quant": quant, "oversampling": oversampling, "bits": 8.0}
    if turbo_bits:
        size = {"8": qe.TurboQuantBitSize.Bits8, "4": qe.TurboQuantBitSize.Bits4, "2": qe.TurboQuantBitSize.Bits2,
                "1.5": qe.TurboQuantBitSize.Bits1_5, "1": qe.TurboQuantBitSize.Bits1}[turbo_bits]
        quant = qe.TurboQuantQuantizationConfig(always_ram=True, bits=size)
        return {"name": name, "quant": quant, "oversampling": oversampling, "bits": float(turbo_bits)}
    enc = {"1": qe.BinaryQuantizationEncoding.OneBit, "1.5": qe.BinaryQuantizationEncoding.OneAndHalfBits,
           "2": qe.BinaryQuantizationEncoding.TwoBits}[bin_bits]
    qenc = {"8": qe.BinaryQuantizationQueryEncoding.Scalar8Bits, "4": qe.BinaryQuantizationQueryEncoding.Scalar4Bits,
            "b": qe.BinaryQuantizationQueryEncoding.Binary}[q_bits]
    quant = qe.BinaryQuantizationConfig(always_ram=True, encoding=enc, query_encoding=qenc)
    return {"name": name, "quant": quant, "oversampling": oversampling, "bits": float(bin_bits)}


def encodings(workload: Workload, n: int, cache: Path | None) -> tuple[np.ndarray, list[list[int]], Any]:
    """MUVERA encodings of pages ``0..n-1`` (float32, ``(n, dims)``), the exhaustive top 10 of
    each query, and the encoder; cached in ``cache`` when given."""
    from ragspine.scoring.muvera import Muvera, MuveraParams

    enc = Muvera(MuveraParams(dim=workload.queries.shape[2]))
    path = cache / f"fde-{workload.seed}-{workload.run}-{n}-{len(workload.texts)}.npz" if cache else None
    if path is not None and path.exists():
        z = np.load(path)
        return z["fde"], z["exact"].tolist(), enc
    t = time.perf_counter()
    fde = np.empty((n, enc.params.size), dtype=np.float32)
    for k in range(n):
        fde[k] = enc.document(workload.page(k))
        if k and k % 2000 == 0:
            print(f"  ... encoded {k:,} pages ({k / (time.perf_counter() - t):.0f} pages/s)", flush=True)
    scores, _ = exact_scores(workload, range(n))
    exact = top_k(scores)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, fde=fde, exact=np.asarray(exact))
    return fde, exact, enc


def measure(cfg: dict[str, Any], fde: np.ndarray, queries: np.ndarray, exact: Sequence[Sequence[int]],
            candidates: Sequence[int], root: Path, repeats: int) -> dict[str, Any]:
    import qdrant_edge as qe

    dims = fde.shape[1]
    field = "fde"
    config = qe.EdgeConfig(
        vectors={field: qe.EdgeVectorParams(
            size=dims, distance=qe.Distance.Dot, datatype=qe.VectorStorageDatatype.Float16,
            hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000), quantization_config=cfg["quant"])},
        wal_enabled=False,
    )
    path = root / f"{len(list(root.iterdir())) if root.exists() else 0}-{cfg['name']}"
    path.mkdir(parents=True)
    shard = qe.EdgeShard.create(str(path), config)
    try:
        for s in range(0, len(fde), 500):
            shard.update(qe.UpdateOperation.upsert_points(
                [qe.Point(s + i, {field: v.tolist()}, {}) for i, v in enumerate(fde[s : s + 500])]))
        t = time.perf_counter()
        shard.optimize()
        shard.flush()
        build_s = time.perf_counter() - t
        qp = qe.QuantizationSearchParams(rescore=True, oversampling=cfg["oversampling"]) if cfg["quant"] else None
        out: dict[str, Any] = {"name": cfg["name"], "bits": cfg["bits"], "build_s": build_s,
                               "copy_bytes_per_page": dims * cfg["bits"] / 8}
        for c in candidates:
            lat: list[float] = []
            rec: list[float] = []
            for rep in range(repeats):
                for qi, q in enumerate(queries):
                    req = qe.QueryRequest(limit=c, query=qe.Query.Nearest(q.tolist(), using=field),
                                          params=qe.SearchParams(quantization=qp), with_payload=False)
                    t = time.perf_counter()
                    got = shard.query(req)
                    lat.append((time.perf_counter() - t) * 1000)
                    if rep == 0:
                        ids = {int(p.id) for p in got}
                        rec.append(len(ids & set(exact[qi])) / TOP_K)
            out[str(c)] = {"recall": float(np.mean(rec)), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}
        return out
    finally:
        shard.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--run", type=int, default=1, help="adjacent patches each planted query token is written into")
    ap.add_argument("--candidates", default="100,200")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--repeats", type=int, default=3, help="times each query is timed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=None, help="keep the encodings and exact top 10 here")
    args = ap.parse_args(argv)
    try:
        configs = [parse_config(c.strip()) for c in args.configs.split(",") if c.strip()]
        candidates = [int(c) for c in args.candidates.split(",")]
    except ValueError as e:
        ap.error(str(e))
    if min(candidates) < 1 or args.repeats < 1:
        ap.error("--candidates and --repeats must be at least 1")
    if args.pages < args.queries * TOP_K:
        ap.error(f"--pages must be at least {args.queries * TOP_K} (10 planted pages a query)")
    import os

    print(f"bench/first_stage.py: {args.pages:,} pages, {args.queries} queries, run {args.run}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    workload = Workload(args.seed, args.queries, args.pages, run=args.run)
    fde, exact, enc = encodings(workload, args.pages, args.cache)
    queries = np.stack([enc.query(q) for q in workload.queries])
    # The first stage's ceiling: the exact inner products of the float32 encodings.
    ceiling = {c: float(np.mean([len(set(np.argsort(-(fde @ q), kind="stable")[:c].tolist()) & set(exact[i])) / TOP_K
                                 for i, q in enumerate(queries)])) for c in candidates}
    print("  ceiling (exact inner product of the encodings): "
          + ", ".join(f"recall {ceiling[c]:.3f} at {c}" for c in candidates))
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragspine-first-stage-") as tmp:
        for cfg in configs:
            row = measure(cfg, fde, queries, exact, candidates, Path(tmp), args.repeats)
            rows.append(row)
            base = rows[0][str(candidates[0])]["p50_ms"]
            cells = "  ".join(f"@{c}: recall {row[str(c)]['recall']:.3f} p50 {row[str(c)]['p50_ms']:6.2f} "
                              f"p99 {row[str(c)]['p99_ms']:6.2f} ms" for c in candidates)
            print(f"  {row['name']:<12} {cells}  x{row[str(candidates[0])]['p50_ms'] / base:.2f} of "
                  f"{rows[0]['name']}  build {row['build_s']:.1f} s  copy {row['copy_bytes_per_page'] / 1024:.1f} KB/page",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
