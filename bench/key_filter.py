"""What an API key's filter costs a search: the same filter carried by the key against the same
filter in the request, through the REST API, alternating per query over one library.

    .venv/bin/python bench/key_filter.py [--dataset tatqa_dev] [--modes bm25,economy]
                                         [--limit 200] [--rounds 3] [--regions 4]

The corpus (a BEIR set of ``../shared/data``) is ingested as one-page documents whose metadata
``region`` cycles over ``--regions`` values. Then every query runs, per mode, three ways in turn:
through a key that reads the library through ``region in [r0]``; through a key for the whole
library with ``{"field": "region", "op": "in", "value": ["r0"]}`` in the request; and through
the whole-library key without a filter (the unfiltered cost, for scale), each way first in
turn. Prints p50/p95 per way,
the ratio key filter / request filter, and how many answers were the same hits in the same
order (they must all be: the two are one filter).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from long_reports import SETS  # noqa: E402

ADMIN, SCOPED = "bench-admin-key", "bench-scoped-key"
LIB = "bench"


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fastapi.testclient import TestClient

    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.evaluation import clean_query, load_dataset
    from ragspine.serving.app import create_app

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="tatqa_dev")
    ap.add_argument("--modes", default="bm25,economy")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--regions", type=int, default=4)
    args = ap.parse_args()
    root = SETS.get(args.dataset, Path(args.dataset))
    if not (root / "corpus.jsonl").exists():
        print(f"{args.dataset}: no BEIR corpus at {root}; this bench needs ../shared/data", file=sys.stderr)
        return 2
    ds = load_dataset(root, "dev")
    modes = [m for m in args.modes.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="ragspine-keyfilter-") as tmp:
        settings = Settings(data_dir=Path(tmp), reranker="none", device="cpu", gap_log=False,
                            api_keys=f"{ADMIN}=*;{SCOPED}={LIB}(region in [r0])",
                            **({} if "economy" in modes else {"dense_model": "none"}))
        engine = Engine(settings)
        engine.create_library(LIB)
        t0 = time.perf_counter()
        n = 0
        with open(root / "corpus.jsonl", encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                text = f"{d.get('title') or ''}\n\n{d.get('text') or ''}".strip()
                if text:
                    engine.ingest_text(LIB, f"d{n}", text, {"region": f"r{n % args.regions}"})
                    n += 1
        engine.reweight(LIB)
        print(f"{args.dataset}: {n} documents in {time.perf_counter() - t0:.1f} s, {args.regions} regions",
              flush=True)
        queries = [clean_query(ds.queries[q], settings.max_query_chars) for q in list(ds.queries)[: args.limit]]
        flt = [{"field": "region", "op": "in", "value": ["r0"]}]
        ways = {"key filter": (SCOPED, []), "request filter": (ADMIN, flt), "no filter": (ADMIN, [])}
        with TestClient(create_app(settings, engine, close_engine=True)) as c:
            for mode in modes:
                lat: dict[str, list[float]] = {w: [] for w in ways}
                same = total = 0
                names = list(ways)
                for r in range(args.rounds):
                    for i, q in enumerate(queries):
                        hits: dict[str, list[tuple[str, int, str]]] = {}
                        # Each way goes first in turn: a query's first search pays for what the
                        # next ones find cached (its encoding), whichever way it is.
                        turn = (r * len(queries) + i) % len(names)
                        for way in names[turn:] + names[:turn]:
                            key, filters = ways[way]
                            t = time.perf_counter()
                            resp = c.post("/v1/search", headers={"X-API-Key": key}, json={
                                "query": q, "libraries": [LIB], "mode": mode, "top_k": 10, "filters": filters})
                            lat[way].append((time.perf_counter() - t) * 1000)
                            resp.raise_for_status()
                            hits[way] = [(h["doc_id"], h["page"], h["chunk_id"]) for h in resp.json()["hits"]]
                        if r == 0:
                            total += 1
                            same += hits["key filter"] == hits["request filter"]
                p50 = {w: statistics.median(v) for w, v in lat.items()}
                p95 = {w: sorted(v)[int(0.95 * (len(v) - 1))] for w, v in lat.items()}
                for w in ways:
                    print(f"  {mode:8} {w:15} p50 {p50[w]:7.2f} ms  p95 {p95[w]:7.2f} ms  ({len(lat[w])} searches)")
                print(f"  {mode:8} key filter / request filter: p50 x{p50['key filter'] / p50['request filter']:.3f}"
                      f", p95 x{p95['key filter'] / p95['request filter']:.3f}; same hits in {same}/{total}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
