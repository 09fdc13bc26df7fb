"""How the BM25 paths grow with a library: the in-memory index against the store's sparse search.

    .venv/bin/python bench/capacity.py [--sizes 10000 100000] [--queries 60] [--data-dir DIR]

For each size N (passages), grown in the same library one size after the other:

1. Ingest synthetic report text (``Engine.ingest_text``, one page per document, 12 passages of
   ~60 words a page drawn from a 3,000-term vocabulary with report words) until the library
   holds N passages. Only the count matters here; the ingest rate is printed for the record.
2. In-memory index (``RAGSPINE_LEXICAL_INDEX=memory``, :class:`LexicalIndex`): cold build time
   (a new index, first ``refresh``), its bytes (``LexicalIndex.info``) per passage and per
   page, and the process's RSS growth while it was built.
3. Query p50 / p99, one BM25 search at a time (passage + page channels fused, top 10), with the
   in-memory index and with the store's sparse search (``lexical=None``, what
   ``RAGSPINE_LEXICAL_INDEX=store`` does), alternating query by query; the ratio store/memory.
   Both must rank the same pages (checked).
4. Disk: the data dir's growth over the empty library, per page.

Prints one table; sizes larger than this machine can build in a sitting are left to arithmetic
in docs/capacity.md (marked as such there).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPORT_WORDS = ("revenue margin growth segment operating cash flow capital expenditure dividend region asia "
                "europe energy robotics services percent million quarter annual subsidiary guidance outlook "
                "ebitda impairment goodwill leverage liquidity").split()
PASSAGES_PER_PAGE_TARGET = 12


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


class Corpus:
    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.vocab = REPORT_WORDS + [f"term{i}" for i in range(3000)]

    def page(self) -> str:
        return "\n\n".join(" ".join(self.rng.choice(self.vocab) for _ in range(60)) + "."
                           for _ in range(6))

    def query(self) -> str:
        return " ".join(self.rng.choice(self.vocab) for _ in range(self.rng.randint(2, 5)))


def measure(engine: Any, name: str, queries: list[str]) -> dict[str, Any]:
    import gc

    from ragspine.retrieval.lexical import LexicalIndex
    from ragspine.retrieval.search import Searcher
    from ragspine.scoring import BM25Params

    s = engine.settings
    gc.collect()
    before = rss_mb()
    index = LexicalIndex(engine.store, engine.libraries, BM25Params(s.bm25_k1, s.bm25_b),
                         max_postings=1 << 62, background=False)
    t0 = time.perf_counter()
    index.refresh(name)
    build_s = time.perf_counter() - t0
    info = index.info(name)
    grown = rss_mb() - before
    memory = Searcher(s, engine.store, engine.libraries, engine.models, lexical=index)
    store = Searcher(s, engine.store, engine.libraries, engine.models, lexical=None)
    from ragspine.api import SearchRequest

    mem_ms: list[float] = []
    store_ms: list[float] = []
    differ = 0
    for q in queries:
        req = SearchRequest(query=q, libraries=[name], mode="bm25", top_k=10)
        t0 = time.perf_counter()
        a = memory.search(req)
        t1 = time.perf_counter()
        b = store.search(req)
        t2 = time.perf_counter()
        mem_ms.append((t1 - t0) * 1000)
        store_ms.append((t2 - t1) * 1000)
        differ += [h.key() for h in a.hits] != [h.key() for h in b.hits]
    index.close()
    return {"build_s": build_s, "bytes": info["bytes"], "postings": info["postings"], "rss_mb": grown,
            "mem_p50": pct(mem_ms, 50), "mem_p99": pct(mem_ms, 99), "store_p50": pct(store_ms, 50),
            "store_p99": pct(store_ms, 99), "differ": differ}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    from ragspine.config import Settings
    from ragspine.engine import Engine

    data = Path(args.data_dir or tempfile.mkdtemp(prefix="ragspine-capacity-"))
    engine = Engine(Settings(data_dir=data, dense_model="none", ocr="off", lexical_index="store"))
    name = "capacity"
    engine.create_library(name)
    empty_disk = dir_mb(data)  # Qdrant Edge pre-allocates page files: growth is what a page costs
    corpus = Corpus()
    queries = [corpus.query() for _ in range(args.queries)]
    passages = pages = 0
    rows = []
    for size in sorted(args.sizes):
        t0 = time.perf_counter()
        added = 0
        while passages < size:
            r = engine.ingest_text(name, f"d{pages}", corpus.page())
            passages += r.chunks
            pages += 1
            added += 1
            if added % 500 == 0:
                print(f"  {passages} passages, {pages} pages ({added / (time.perf_counter() - t0):.0f} pages/s)",
                      file=sys.stderr, flush=True)
        ingest_s = time.perf_counter() - t0
        m = measure(engine, name, queries)
        rows.append((passages, pages, ingest_s, added, m, dir_mb(data) - empty_disk))
        print(f"{passages} passages measured", file=sys.stderr, flush=True)
    engine.close()

    print(f"\nload average {os.getloadavg()[0]:.2f}; {args.queries} queries of 2-5 terms, BM25 mode, top 10")
    print(f"{'passages':>9} {'pages':>7} {'index MB':>9} {'B/passage':>9} {'B/page':>8} {'RSS +MB':>8} "
          f"{'build s':>8} {'mem p50':>8} {'mem p99':>8} {'store p50':>9} {'store p99':>9} {'store/mem':>9} "
          f"{'disk +MB':>8} {'disk B/page':>11} {'differ':>6}")
    for passages, pages, ingest_s, added, m, disk in rows:
        print(f"{passages:9d} {pages:7d} {m['bytes'] / 1e6:9.1f} {m['bytes'] / passages:9.0f} "
              f"{m['bytes'] / pages:8.0f} {m['rss_mb']:8.1f} {m['build_s']:8.2f} {m['mem_p50']:8.2f} "
              f"{m['mem_p99']:8.2f} {m['store_p50']:9.2f} {m['store_p99']:9.2f} "
              f"{m['store_p50'] / m['mem_p50']:9.2f} {disk:8.1f} {disk * 1e6 / pages:11.0f} {m['differ']:6d}")
    print("\ningest (setup): " + "; ".join(f"{added} pages in {s:.0f} s ({added / s:.0f} pages/s)"
                                        for _, _, s, added, _, _ in rows))
    print(f"postings at the largest size: {rows[-1][4]['postings']}")
    print(f"statistics.fmean of store/mem over sizes: "
          f"{statistics.fmean(m['store_p50'] / m['mem_p50'] for *_, m, _ in rows):.2f}")


if __name__ == "__main__":
    main()
