"""Store micro-benchmark: sparse search latency with the whole payload vs a payload selector.

    .venv/bin/python bench/store_payload.py [--points 2000] [--text-bytes 3000] [--queries 300]
                                            [--limit 200] [--backend edge|server]

Builds a fresh collection of ``--points`` chunk points, each with a ``--text-bytes`` text
payload (like a page's text), a few small keys and a BM25-like sparse vector (Zipf-drawn terms,
so common query terms match hundreds of points), then times ``search_sparse(limit=200)``
filtered like the search hot path (``kind=chunk, live``), one query at a time, per variant:

- ``full``:       the whole payload (``fields=None``, the default);
- ``selected``:   ``fields=["doc_id", "page", "version"]``, selected inside the engine;
- ``ids-only``:   ``fields=[]``, no payload;
- ``post-filter``: the whole payload, then the three keys picked in Python — what a backend
  without an engine-side selector could do, to show whether that alone would help;
- ``ids+top10``:  ids first (``fields=[]``), then ``retrieve`` of the whole payload of the
  best 10 only — the shape of an ids-first search path, for comparison.

Variants are interleaved query by query (rotating order) so that load from other processes on
the machine hits them alike. Prints p50/p99 per variant and the ratio full / selected.

Measured on the 2-core development machine (other work running), Edge, defaults, p50 / p99 ms:
full 4.0-4.7 / 8.3-8.7, selected 2.6-3.1 / 5.2-5.4, ids-only 1.3-1.5 / 2.5-2.6, post-filter
4.3-5.0 / 9.5-11, ids+top10 1.7-2.1 / 3.7-9.4; full/selected 1.5x at p50. The engine decodes a
candidate's whole stored payload even to select three keys, so the big saving is ids-only
candidates with the payload fetched for the final top-k only.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ragspine.scoring.bm25 import SparseVector
from ragspine.store.base import KIND_CHUNK, SPARSE_CHUNK, CollectionSpec, Hit, PointData, Store, Where

SELECTED = ["doc_id", "page", "version"]
VOCAB = 20_000
WORDS = ["revenue", "segment", "quarter", "table", "figure", "total", "growth", "net", "asset", "cost"]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[i]


def make_points(n: int, text_bytes: int, rng: np.random.Generator) -> list[PointData]:
    pts = []
    for i in range(n):
        words = rng.choice(WORDS, size=text_bytes // 6 + 1)
        text = " ".join(words)[:text_bytes]
        terms = np.unique(rng.zipf(1.3, size=200) % VOCAB)  # ~100 distinct terms, Zipf-skewed
        tf = rng.integers(1, 5, size=len(terms)).astype(float)
        payload = {
            "kind": KIND_CHUNK,
            "state": "live",
            "doc_id": f"doc{i // 40}",
            "page": 1 + i % 40,
            "version": 1,
            "span": [0, len(text)],
            "bbox": [0.1, 0.2, 0.8, 0.9],
            "meta": {"year": 2000 + i % 20, "region": ["north", "south"][i % 2]},
            "text": text,
        }
        pts.append(
            PointData(str(uuid.UUID(int=i + 1)), payload, {SPARSE_CHUNK: SparseVector(terms.tolist(), tf.tolist())})
        )
    return pts


def open_backend(kind: str, root: Path) -> Store:
    if kind == "edge":
        from ragspine.store.edge import EdgeStore

        return EdgeStore(root)
    from ragspine.store.server import ServerStore

    return ServerStore.from_url(":memory:")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--text-bytes", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--backend", choices=["edge", "server"], default="edge")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Payload indexes have no effect")

    rng = np.random.default_rng(0)
    root = Path(tempfile.mkdtemp(prefix="ragspine-bench-"))
    store = open_backend(args.backend, root)
    try:
        store.create_collection("bench", CollectionSpec(sparse_idf=(SPARSE_CHUNK,)))
        pts = make_points(args.points, args.text_bytes, rng)
        t0 = time.perf_counter()
        for a in range(0, len(pts), 500):
            store.upsert("bench", pts[a : a + 500])
        store.optimize("bench")
        print(f"backend={args.backend} points={len(pts)} text={args.text_bytes} B "
              f"ingest={time.perf_counter() - t0:.2f} s")

        # Queries of 2-4 frequent-to-mid terms: most match well over ``limit`` points.
        queries = []
        for _ in range(args.queries):
            terms = sorted(set((rng.zipf(1.3, size=4) % 50).tolist()))
            queries.append(SparseVector(terms, [1.0] * len(terms)))
        where = Where(kind=KIND_CHUNK, live=True)

        def search(fields: list[str] | None) -> Callable[[SparseVector], list[Hit]]:
            return lambda q: store.search_sparse("bench", SPARSE_CHUNK, q, where, args.limit, fields=fields)

        def post_filter(q: SparseVector) -> list[Hit]:
            hits = store.search_sparse("bench", SPARSE_CHUNK, q, where, args.limit)
            return [Hit(h.id, h.score, {k: h.payload[k] for k in SELECTED if k in h.payload}) for h in hits]

        def ids_first(q: SparseVector) -> list[Hit]:
            hits = store.search_sparse("bench", SPARSE_CHUNK, q, where, args.limit, fields=[])
            top = {r.id: r.payload for r in store.retrieve("bench", [h.id for h in hits[:10]])}
            return [Hit(h.id, h.score, top.get(h.id, {})) for h in hits]

        variants: dict[str, Callable[[SparseVector], list[Hit]]] = {
            "full": search(None),
            "selected": search(SELECTED),
            "ids-only": search([]),
            "post-filter": post_filter,
            "ids+top10": ids_first,
        }
        names = list(variants)
        # Same hits in every variant (the selector only trims payloads).
        for q in queries[:20]:
            ref = [(h.id, h.score) for h in variants["full"](q)]
            for nm in names[1:]:
                assert [(h.id, h.score) for h in variants[nm](q)] == ref, nm
        n_hits = [len(variants["ids-only"](q)) for q in queries]
        for q in queries[:20]:  # warm up
            for fn in variants.values():
                fn(q)

        times: dict[str, list[float]] = {nm: [] for nm in names}
        for k, q in enumerate(queries):
            for j in range(len(names)):
                nm = names[(k + j) % len(names)]
                t = time.perf_counter()
                variants[nm](q)
                times[nm].append((time.perf_counter() - t) * 1000)

        print(f"queries={len(queries)} limit={args.limit} hits/query: median {int(np.median(n_hits))}, "
              f"min {min(n_hits)}")
        print(f"{'variant':<12} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for nm in names:
            xs = times[nm]
            print(f"{nm:<12} {pct(xs, 50):8.3f} {pct(xs, 99):8.3f} {sum(xs) / len(xs):8.3f}")
        f50, s50 = pct(times["full"], 50), pct(times["selected"], 50)
        f99, s99 = pct(times["full"], 99), pct(times["selected"], 99)
        print(f"ratio full/selected: p50 {f50 / s50:.1f}x, p99 {f99 / s99:.1f}x")
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
