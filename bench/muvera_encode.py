"""What a page's and a query's MUVERA encoding costs, against fastembed's reference in the same run.

    .venv/bin/python bench/muvera_encode.py [--tokens 1030] [--query-tokens 20] [--repeats 200]
                                            [--blas-threads 1]

Every page written to a MUVERA library is encoded on the ingesting thread (and every visual
query at search time), so its cost is part of the per-page budget that feeds a GPU encoder
(``bench/ingest_ceiling.py``). The inputs are unit vectors of a ColPali page's shape (1,030 x
128) and of a query's; the baseline is fastembed's ``Muvera`` (a per-token Python loop: the
reference ``tests/scoring/test_muvera.py`` checks ragspine's values against). BLAS threads
default to one, as a server and ``ragspine ingest`` run (``Settings.thread_rule``; 0: numpy's
own pool).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def per_call_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1030, help="vectors in a page (ColPali: 1,030)")
    ap.add_argument("--query-tokens", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--blas-threads", type=int, default=1, help="numpy's BLAS threads (0: its own pool)")
    args = ap.parse_args()

    from fastembed.postprocess import Muvera as Reference
    from threadpoolctl import threadpool_limits

    from ragspine.scoring.muvera import Muvera, MuveraParams

    if args.blas_threads:
        threadpool_limits(limits=args.blas_threads, user_api="blas")
    rng = np.random.default_rng(0)

    def unit(n: int) -> np.ndarray:
        x = rng.standard_normal((n, 128)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    page, query = unit(args.tokens), unit(args.query_tokens)
    params = MuveraParams(dim=128)
    ours = Muvera(params)
    ref = Reference(params.dim, params.k_sim, params.dim_proj, params.r_reps, params.seed)
    np.testing.assert_allclose(ours.document(page), ref.process_document(page), rtol=1e-5, atol=1e-6)
    reps_ref = max(5, args.repeats // 20)  # the reference is slow: fewer repeats
    rows = [
        ("page", per_call_ms(lambda: ours.document(page), args.repeats),
         per_call_ms(lambda: ref.process_document(page), reps_ref)),
        ("query", per_call_ms(lambda: ours.query(query), args.repeats),
         per_call_ms(lambda: ref.process_query(query), reps_ref)),
    ]
    print(f"MUVERA {params.size} dims (k_sim {params.k_sim}, dim_proj {params.dim_proj}, r_reps {params.r_reps}); "
          f"page {args.tokens} tokens, query {args.query_tokens}; BLAS threads {args.blas_threads or 'numpy default'}")
    print("| encoding | ragspine ms | fastembed ms | ragspine / fastembed |")
    print("|---|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a:.2f} | {b:.2f} | x{a / b:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
