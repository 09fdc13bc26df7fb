"""Relation graph benchmark: neighbour and path lookups on a generated graph.

    .venv/bin/python bench/graph.py [--nodes 100000] [--edges 1000000] [--queries 1000]
                                    [--data-dir DIR] [--tracemalloc] [--seed 7]

1. Generate a graph shaped like a large library's: entities of every type and documents
   (10 % of the nodes), declared ``subsidiary_of`` / ``peer_of`` / ``derived_from`` edges in one
   ``declared`` source, and per document a ``meta:`` and a ``text:`` source with ``mentions``
   and ``co_occurs_with`` edges, each edge cited like the real ones. Endpoints follow a
   power law (a few hubs, e.g. "revenue", many leaves), as mentions do.
2. Build: every source through ``GraphStore.replace_sources`` (the default networkx store),
   persisted to SQLite under the data dir, in batches; time and resident memory.
3. In a fresh process (what a replica does at start): cold load from the file; resident memory
   of the loaded graph (and the Python heap by tracemalloc with ``--tracemalloc``, slower);
   then lookups from seeded random entities: neighbours at depth 1, 2 and 3 (limit 100, the API
   default, and 1,000, the maximum; one relation filter), shortest paths with max_hops 4 and 6
   (either direction, all relations). p50 / p99 latency per kind, and for paths how many were
   found.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ragspine.graph._model import (  # noqa: E402
    CITE_DECLARED,
    CITE_METADATA,
    CITE_TEXT,
    DOCUMENT,
    RANK_EXPLICIT,
    RANK_METADATA,
    Contribution,
    EdgeSpec,
    NodeSpec,
    canonical,
)

LIB = "bench"
DOC_SHARE = 0.10
#: Share of the edges declared (the rest come from documents: mentions and co-occurrences).
DECLARED_SHARE = 0.15
ENTITY_TYPES = ("company", "subsidiary", "segment", "metric", "geography", "period")
BATCH_SOURCES = 500


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def power_law_picker(rng: random.Random, n: int, alpha: float = 0.8) -> Any:
    """Draws ids 0..n-1 with P(i) ∝ 1 / (i+1)^alpha (cumulative weights, bisect)."""
    import bisect
    import itertools

    cum = list(itertools.accumulate(1.0 / (i + 1) ** alpha for i in range(n)))
    total = cum[-1]
    order = list(range(n))
    rng.shuffle(order)  # hubs spread over the id space

    def pick() -> int:
        return order[bisect.bisect_left(cum, rng.random() * total)]

    return pick


def generate(n_nodes: int, n_edges: int, seed: int) -> tuple[dict[str, Contribution], list[str]]:
    rng = random.Random(seed)
    n_docs = int(n_nodes * DOC_SHARE)
    n_ent = n_nodes - n_docs
    ents = [f"e{i}" for i in range(n_ent)]
    types = [ENTITY_TYPES[i % len(ENTITY_TYPES)] for i in range(n_ent)]
    pick = power_law_picker(rng, n_ent)
    sources: dict[str, Contribution] = {}

    # Declared: a forest of subsidiary_of (child -> smaller id: no cycles), peers, metric inputs.
    n_decl = int(n_edges * DECLARED_SHARE)
    decl_nodes = tuple(NodeSpec(e, f"Entity {i}", types[i], RANK_EXPLICIT, (f"alias {i}",)) for i, e in enumerate(ents))
    decl_edges = []
    for k in range(n_decl):
        r = rng.random()
        if r < 0.5:
            child = rng.randrange(1, n_ent)
            u, rel, v = ents[child], "subsidiary_of", ents[rng.randrange(0, child)]
        elif r < 0.8:
            u, rel, v = ents[pick()], "peer_of", ents[pick()]
        else:
            a, b = sorted(rng.sample(range(n_ent), 2))
            u, rel, v = ents[b], "derived_from", ents[a]
        if u == v:
            continue
        u, v = canonical(u, rel, v)
        decl_edges.append(EdgeSpec(u, rel, v, {"kind": CITE_DECLARED, "provenance": f"source {k}",
                                                "file": "relations.csv", "row": k + 2}))
    sources["declared"] = Contribution(decl_nodes, tuple(decl_edges))

    # Documents: metadata entity + passages mentioning power-law entities, pairs co-occurring.
    per_doc = (n_edges - len(decl_edges)) // n_docs
    for d in range(n_docs):
        doc_id = f"doc-{d}"
        dn = f"doc:{doc_id}"
        own = ents[pick()]
        sources[f"meta:{doc_id}"] = Contribution(
            (NodeSpec(dn, f"Report {d}", DOCUMENT, RANK_METADATA),),
            (EdgeSpec(dn, "mentions", own, {"kind": CITE_METADATA, "doc_id": doc_id, "version": 1, "field": "entity"}),),
        )
        edges: list[EdgeSpec] = []
        page = 0
        while len(edges) < per_doc - 1:
            page += 1
            cite = {"kind": CITE_TEXT, "doc_id": doc_id, "version": 1, "page": page,
                    "chunk_id": f"{doc_id}/p{page}/c0", "bbox": [56.0, 100.0, 540.0, 300.0]}
            found = sorted({ents[pick()] for _ in range(3)})
            for e in found:
                edges.append(EdgeSpec(dn, "mentions", e, {**cite, "match": e}))
            for i, a in enumerate(found):
                for b in found[i + 1:]:
                    edges.append(EdgeSpec(a, "co_occurs_with", b, cite))
        sources[f"text:{doc_id}"] = Contribution((), tuple(edges))
    return sources, ents


def build(data_dir: Path, sources: dict[str, Contribution]) -> dict[str, float]:
    from ragspine.graph import open_graph_store

    store = open_graph_store(data_dir)
    gc.collect()
    rss0 = rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    keys = sorted(sources)
    for i in range(0, len(keys), BATCH_SOURCES):
        store.replace_sources(LIB, {k: sources[k] for k in keys[i : i + BATCH_SOURCES]})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = store.stats(LIB)
    store.close()
    return {"build_s": seconds, "build_cpu_s": cpu, "rss_build_mb": rss_mb() - rss0, "nodes": stats["nodes"], "edges": stats["edges"],
            "sources": stats["sources"], "file_mb": (data_dir / "graphs" / LIB / "graph.sqlite").stat().st_size / 2**20}


def lookups(data_dir: Path, n_queries: int, seed: int, trace: bool) -> dict[str, Any]:
    """Runs in a fresh process: cold load, memory, then timed lookups."""
    import tracemalloc

    from ragspine.graph import open_graph_store

    if trace:
        tracemalloc.start()
    gc.collect()
    rss0 = rss_mb()
    store = open_graph_store(data_dir)
    t0, c0 = time.perf_counter(), time.process_time()
    stats = store.stats(LIB)  # first read: loads the file
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "load_cpu_s": time.process_time() - c0,
                           "rss_loaded_mb": rss_mb() - rss0, **stats}
    if trace:
        out["heap_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
    ents = [n.id for n in store.nodes(LIB) if n.type != DOCUMENT]
    rng = random.Random(seed)
    starts = [rng.choice(ents) for _ in range(n_queries)]
    pairs = [(rng.choice(ents), rng.choice(ents)) for _ in range(n_queries)]
    rows: list[dict[str, Any]] = []

    def timed(label: str, fn: Any, args: list[Any]) -> None:
        lat, cpu, sizes = [], [], []
        for a in args:
            t, c = time.perf_counter(), time.process_time()
            r = fn(a)
            cpu.append((time.process_time() - c) * 1000)
            lat.append((time.perf_counter() - t) * 1000)
            sizes.append(r)
        rows.append({"lookup": label, "n": len(args), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                     "cpu_p50_ms": pct(cpu, 50), "cpu_p99_ms": pct(cpu, 99), "mean_result": sum(sizes) / len(sizes)})

    for depth in (1, 2, 3):
        for limit in (100, 1000):
            timed(f"neighbors depth={depth} limit={limit}",
                  lambda s, d=depth, lim=limit: len(store.neighbors(LIB, s, depth=d, limit=lim)[0]), starts)
    timed("neighbors depth=3 relation=subsidiary_of", lambda s: len(
        store.neighbors(LIB, s, depth=3, relations=["subsidiary_of"], limit=1000)[0]), starts)
    for hops in (4, 6):
        timed(f"shortest path max_hops={hops}", lambda p, h=hops: int(
            store.shortest_path(LIB, p[0], p[1], max_hops=h) is not None), pairs)
    timed("shortest path max_hops=6 declared relations", lambda p: int(store.shortest_path(
        LIB, p[0], p[1], max_hops=6, relations=["subsidiary_of", "peer_of", "derived_from"]) is not None), pairs)
    out["rows"] = rows
    store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-dir", type=Path, default=None, help="where the graph file goes (default: a temp dir)")
    ap.add_argument("--tracemalloc", action="store_true", help="also measure the Python heap of the loaded graph")
    ap.add_argument("--_lookups", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._lookups is not None:
        print(json.dumps(lookups(args._lookups, args.queries, args.seed, args.tracemalloc)))
        return 0

    tmp = None
    if args.data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ragspine-graph-bench-")
        data_dir = Path(tmp.name)
    else:
        data_dir = args.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    try:
        t0 = time.perf_counter()
        sources, _ = generate(args.nodes, args.edges, args.seed)
        gen_s = time.perf_counter() - t0
        b = build(data_dir, sources)
        del sources
        cmd = [sys.executable, __file__, "--_lookups", str(data_dir), "--queries", str(args.queries),
               "--seed", str(args.seed)] + (["--tracemalloc"] if args.tracemalloc else [])
        child = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    finally:
        if tmp is not None:
            tmp.cleanup()

    print(f"load average at start: {load[0]:.1f} on {os.cpu_count()} CPUs (wall times suffer when it exceeds them; "
          "CPU times do not)")
    print(f"graph: {b['nodes']:,} nodes, {b['edges']:,} edges (distinct source-relation-target), "
          f"{b['sources']:,} sources; generated in {gen_s:.1f}s")
    print(f"build (replace_sources, networkx + SQLite): {b['build_s']:.1f}s wall, {b['build_cpu_s']:.1f}s CPU, RSS +{b['rss_build_mb']:,.0f} MB "
          f"(the generated contributions were in memory before), file {b['file_mb']:,.0f} MB")
    heap = f", Python heap {child['heap_mb']:,.0f} MB (tracemalloc)" if "heap_mb" in child else ""
    print(f"cold load in a fresh process: {child['load_s']:.1f}s wall, {child['load_cpu_s']:.1f}s CPU, RSS +{child['rss_loaded_mb']:,.0f} MB{heap}")
    print()
    print(f"{'lookup':<46}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}{'CPU p50':>9}{'CPU p99':>9}{'mean result':>13}")
    for r in child["rows"]:
        print(f"{r['lookup']:<46}{r['n']:>6}{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['cpu_p50_ms']:>9.3f}"
              f"{r['cpu_p99_ms']:>9.3f}{r['mean_result']:>13.1f}")
    print("\n(mean result: neighbours returned; for paths, the share of pairs with a path)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
