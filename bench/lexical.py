"""Lexical path benchmark: ingest throughput and BM25 query latency, against bm25s.

    .venv/bin/python bench/lexical.py [--data ../shared/data/mmlongbench_dev] [--queries N]
                                      [--data-dir DIR] [--profile]

1. Ingest: every PDF of the dataset through ``Engine.ingest`` (parse, RESTRICTED policy,
   passages, BM25 vectors, thumbnails, versioned write to the embedded Qdrant Edge store,
   flush) into a fresh data dir; pages/s from PDF to searchable. ``--profile`` runs it under
   cProfile and says where the time goes.
2. Query: single-query latency (p50/p99) and queries/s through ``Engine.search`` in BM25
   mode (passage + page channels, RRF, citations), one query at a time, top 10.
3. Baseline in the same run: bm25s (k1=1.5, b=0.75, Lucene IDF) indexed on the SAME tokens
   (``ragspine.retrieval.tokenizer.tokenize`` on the very page texts stored by step 1),
   queried one at a time, top 10; and the ratio ragspine / bm25s.

Goals stated in the issue: ingest >= 25 pages/s on a 2-core machine; query latency within 2x
of bm25s. nDCG@10 of both is printed as a sanity check that they rank alike.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[i]


def load_queries(data: Path, limit: int | None) -> tuple[list[tuple[str, str]], dict[str, dict[str, int]]]:
    qs = [json.loads(l) for l in open(data / "queries.jsonl", encoding="utf-8") if l.strip()]
    qrels: dict[str, dict[str, int]] = {}
    qpath = data / "qrels" / "dev.tsv"
    if qpath.is_file():
        for n, line in enumerate(open(qpath, encoding="utf-8")):
            parts = line.rstrip("\n").split("\t")
            if n == 0 and parts[0] == "query-id":
                continue
            if len(parts) >= 3 and float(parts[2]) > 0:
                qrels.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))
    out = [(str(q["_id"]), str(q["text"])) for q in qs]
    return (out[:limit] if limit else out), qrels


# Where ingest time goes: (label, substring of "file:function" in the profile).
_BUCKETS = [
    ("PDF parse (open_pdf: text blocks + lines)", "pdf.py:open_pdf"),
    ("render thumbnails (render_page_png)", "pdf.py:render_page_png"),
    ("RESTRICTED policy", "policy.py:restricted_pages"),
    ("chunking", "chunking.py:chunk_spans"),
    ("tokenize", "tokenizer.py:tokenize"),
    ("BM25 vectors (document_vector)", "bm25.py:document_vector"),
    ("store upsert", "edge.py:upsert"),
    ("store set_payload (go live)", "edge.py:set_payload"),
    ("store flush (fsync)", "edge.py:flush"),
    ("BM25 re-weight on drift", "pipeline.py:reweight"),
]


def profile_buckets(prof: cProfile.Profile, total: float) -> str:
    st = pstats.Stats(prof)
    cum: dict[str, float] = {label: 0.0 for label, _ in _BUCKETS}
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        key = f"{Path(file).name}:{func}"
        for label, pat in _BUCKETS:
            if key == pat:
                cum[label] += ct
    lines = [f"  {'stage':45s} {'seconds':>8s} {'share':>6s}"]
    for label, _ in _BUCKETS:
        lines.append(f"  {label:45s} {cum[label]:8.2f} {100 * cum[label] / total:5.1f}%")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    return "\n".join(lines) + "\n\n  top functions by own time:\n" + "\n".join(
        "  " + ln for ln in buf.getvalue().splitlines() if ln.strip() and not ln.startswith(("   Ordered", "   List"))
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="page-level PDF dataset (documents/*.pdf)")
    ap.add_argument("--queries", type=int, default=None, help="use the first N queries (default: all)")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="where the index is built (default: a fresh temp dir, removed afterwards)")
    ap.add_argument("--profile", action="store_true", help="profile ingest and say where the time goes")
    ap.add_argument("--top-k", type=int, default=10)
    args = ap.parse_args(argv)

    docs_dir = args.data / "documents"
    if not docs_dir.is_dir():
        print(f"no dataset at {args.data} (expected documents/*.pdf); pass --data", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    import bm25s
    import numpy as np

    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.retrieval.tokenizer import tokenize
    from ragspine.store.base import KIND_PAGE, Where

    tmp = None
    if args.data_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="ragspine-bench-"))
    data_dir = args.data_dir or tmp
    assert data_dir is not None
    files = sorted(docs_dir.glob("*.pdf"))
    queries, qrels = load_queries(args.data, args.queries)
    lib = "bench"
    engine = Engine(Settings(data_dir=data_dir))
    try:
        if lib in engine.list_libraries():
            engine.delete_library(lib)
        engine.create_library(lib)

        # -- 1. ingest ---------------------------------------------------------------------
        prof = cProfile.Profile() if args.profile else None
        pages = 0
        names: dict[str, str] = {}
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        for f in files:
            res = engine.ingest(lib, f)
            pages += res.pages_total
            names[str(res.doc_id)] = f.name
        if prof is not None:
            prof.disable()
        ingest_s, ingest_cpu = time.perf_counter() - t0, time.process_time() - c0

        # -- 2. ragspine queries --------------------------------------------------------------
        qlist = [(qid, q) for qid, q in queries if tokenize(q)]
        for _, q in qlist[:10]:  # warm caches, as a running server has them warm
            engine.search({"query": q, "libraries": [lib], "mode": "bm25", "top_k": args.top_k})
        rs_lat: list[float] = []
        rs_run: dict[str, list[str]] = {}
        t1, c1 = time.perf_counter(), time.process_time()
        for qid, q in qlist:
            a = time.perf_counter()
            resp = engine.search({"query": q, "libraries": [lib], "mode": "bm25", "top_k": args.top_k})
            rs_lat.append(time.perf_counter() - a)
            rs_run[qid] = [f"{names.get(h.doc_id, h.doc_id)}#p{h.page}" for h in resp.hits]
        rs_total, rs_cpu = time.perf_counter() - t1, time.process_time() - c1

        # -- 3. bm25s on the same tokens ------------------------------------------------------
        recs = sorted(
            engine.store.scroll(lib, Where(kind=KIND_PAGE, live=True)),
            key=lambda r: (r.payload["doc_id"], r.payload["page"]),
        )
        ids = [f"{names.get(r.payload['doc_id'], r.payload['doc_id'])}#p{r.payload['page']}" for r in recs]
        corpus_tokens = [tokenize(r.payload.get("text", "")) for r in recs]
        retriever = bm25s.BM25(k1=1.5, b=0.75)
        ta = time.perf_counter()
        retriever.index(corpus_tokens, show_progress=False)
        bm_index_s = time.perf_counter() - ta
        qtoks = [tokenize(q) for _, q in qlist]
        k = min(args.top_k, len(ids))
        for t in qtoks[:10]:
            retriever.retrieve([t], k=k, show_progress=False)
        bm_lat: list[float] = []
        bm_run: dict[str, list[str]] = {}
        t2, c2 = time.perf_counter(), time.process_time()
        for (qid, _), t in zip(qlist, qtoks):
            a = time.perf_counter()
            docs, scores = retriever.retrieve([t], k=k, show_progress=False)
            bm_lat.append(time.perf_counter() - a)
            bm_run[qid] = [ids[i] for i, s in zip(docs[0], scores[0]) if s > 0]
        bm_total, bm_cpu = time.perf_counter() - t2, time.process_time() - c2
    finally:
        engine.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    def ndcg10(run: dict[str, list[str]]) -> float:
        vals = []
        for qid, rel in qrels.items():
            if qid not in run:
                continue
            got = run[qid][:10]
            dcg = sum(rel.get(d, 0) / np.log2(i + 2) for i, d in enumerate(got))
            ideal = sorted(rel.values(), reverse=True)[:10]
            idcg = sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
            vals.append(dcg / idcg if idcg else 0.0)
        return float(np.mean(vals)) if vals else float("nan")

    n = len(qlist)
    rs50, rs99 = 1000 * pct(rs_lat, 50), 1000 * pct(rs_lat, 99)
    bm50, bm99 = 1000 * pct(bm_lat, 50), 1000 * pct(bm_lat, 99)
    print(f"dataset: {args.data}  ({len(files)} PDFs, {pages} pages, {n} queries, top {args.top_k})")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the end, Python {sys.version.split()[0]}, "
          f"bm25s {bm25s.__version__}")
    if load > (os.cpu_count() or 1):
        print("  NOTE: the machine was busy with other work; wall-clock figures are inflated, the "
              "CPU-time figures less so")
    print()
    print(f"ingest (Engine.ingest, PDF -> searchable): {pages} pages in {ingest_s:.1f} s wall = "
          f"{pages / ingest_s:.1f} pages/s   [goal >= 25 pages/s: {'met' if pages / ingest_s >= 25 else 'NOT met'}]")
    print(f"  CPU time of this process: {ingest_cpu:.1f} s = {pages / ingest_cpu:.1f} pages per CPU-second")
    print(f"bm25s index build on the same tokens:        {bm_index_s:.2f} s")
    print()
    print(f"{'query path':34s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'q/s':>8s} {'nDCG@10':>8s}")
    print(f"{'ragspine Engine.search (bm25)':34s} {rs50:8.2f} {rs99:8.2f} {1000 * rs_total / n:8.2f} "
          f"{n / rs_total:8.1f} {ndcg10(rs_run):8.3f}")
    print(f"{'bm25s, same tokens':34s} {bm50:8.2f} {bm99:8.2f} {1000 * bm_total / n:8.2f} "
          f"{n / bm_total:8.1f} {ndcg10(bm_run):8.3f}")
    ratio = rs50 / bm50
    print(f"{'ratio ragspine / bm25s':34s} {ratio:8.2f} {rs99 / bm99:8.2f} {rs_total / bm_total:8.2f} "
          f"{bm_total / rs_total:8.2f}")
    print(f"{'CPU ms per query: ragspine, bm25s':34s} {1000 * rs_cpu / n:8.2f} {1000 * bm_cpu / n:8.2f}")
    print(f"[goal: latency within 2x of bm25s (p50 ratio <= 2): {'met' if ratio <= 2 else 'NOT met'}]")
    if prof is not None:
        print()
        print(f"where ingest time goes ({ingest_s:.1f} s total, cumulative, stages may nest):")
        print(profile_buckets(prof, ingest_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
