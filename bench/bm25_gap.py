"""ragspine's ``bm25`` mode against a plain BM25 over the same tokens with the same k1/b, per
dev set: is the lexical base that the dense channel is fused onto what it claims to be?

    .venv/bin/python bench/bm25_gap.py [--datasets tatqa_dev,cranfield,...] [--limit N]

For each set (``../shared/data``; MMLongBench with OCR off) the corpus is indexed as
``ragspine eval`` indexes it, and every judged query is run twice, top 100:

- ``ragspine``: ``Engine.search`` in ``bm25`` mode (today's default: the whole-page channel
  ranks, the passage channel only picks each page's citation);
- ``plain``: bm25s (Lucene IDF, k1 and b from the settings) indexed on the page texts ragspine
  stored, tokenized by ragspine's own tokenizer, queried with the query's BM25 tokens (its
  question words left out as ragspine leaves them out, ``scoring.query_terms``). Pages without
  a word are left out of its index, as ragspine gives them no BM25 vector
  (``--count-empty-pages`` puts them in: they raise bm25s's N, hence every IDF).

Printed per set: both nDCG@10 of each engine's own order and the gap; the queries whose top 10
differ, sorted into causes by looking at the two engines' scores of the same pages: **ties**
(the same pages with proportional scores, within 1e-4 relative, in another order: only the
tie-break differs), **scores** (scores not proportional: the formula, the statistics, or the
query's term counts), and **depth** (a page one engine returns within its 100 that the other
does not score at all); and both nDCG@10 again with each engine's pages ranked by their scores
(ranx puts equal scores in one order for both), which is equal when ties are the whole story.
A gap over 0.001 must be explained by these before anything is fused on top.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {"tatqa_dev": DATA / "text" / "tatqa_dev", "cranfield": DATA / "text" / "cranfield",
        "cmrc2018_dev_retrieval": DATA / "text" / "cmrc2018_dev_retrieval",
        "mmlongbench_dev": DATA / "mmlongbench_dev"}
TOP = 100


def cause(ours: list[tuple[str, float]], plain: dict[str, float], plain_top: list[str]) -> str | None:
    """Why two top-10s differ (None: they do not): a page of either top 10 the other did not
    score (``depth``), scores not proportional to each other (``scores``: the two may differ by
    a constant factor, Lucene's BM25 leaves out the ``k1 + 1`` of the numerator), else only the
    order of equal scores (``ties``)."""
    a, b = [d for d, _ in ours[:10]], plain_top[:10]
    if a == b:
        return None
    mine = dict(ours)
    for d in a + b:
        if d not in mine or d not in plain:
            return "depth"
    scale = mine[a[0]] / plain[a[0]] if plain[a[0]] else 1.0
    for d in a + b:
        if abs(mine[d] - scale * plain[d]) > 1e-4 * max(1.0, abs(mine[d])):
            return "scores"
    return "ties"


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import bm25s
    import ranx

    from ragspine.config import Settings
    from ragspine.evaluation import clean_query, indexed
    from ragspine.scoring.query_terms import query_tokens
    from ragspine.scoring.tokenizer import tokenize
    from ragspine.store.base import KIND_PAGE, Where

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(SETS))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--count-empty-pages", action="store_true",
                    help="index pages without a word in bm25s too (they change its N, hence every IDF)")
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"no evaluation data at {DATA}; nothing to compare")
        return 0
    s = Settings(reranker="none", device="cpu", ocr="off", dense_model="none")
    print(f"bm25 k1 {s.bm25_k1} b {s.bm25_b}; plain = bm25s {bm25s.__version__} (Lucene IDF) on ragspine's tokens")
    for name in args.datasets.split(","):
        root = SETS.get(name, Path(name))
        if not root.is_dir():
            print(f"{name}: not found at {root}; skipped", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        with indexed(s, root) as ix:
            pdf = ix.dataset.layout == "pdf"

            def cid(doc_id: str, page: int) -> str:
                n = ix.names.get(doc_id, doc_id)
                return f"{n}#p{page}" if pdf else n

            recs = ix.engine.store.scroll(ix.library, Where(kind=KIND_PAGE, live=True), fields=("doc_id", "page", "text"))
            tokens = [tokenize(r.payload.get("text", "")) for r in recs]
            # A page without a word (an image-only page with OCR off) has no BM25 vector in
            # ragspine, so it is no document for the IDF; bm25s would count it in N.
            empty = sum(1 for t in tokens if not t)
            if args.count_empty_pages:
                kept = list(range(len(recs)))
            else:
                kept = [i for i, t in enumerate(tokens) if t]
            ids = [cid(recs[i].payload["doc_id"], int(recs[i].payload["page"])) for i in kept]
            plain_index = bm25s.BM25(k1=s.bm25_k1, b=s.bm25_b, method="lucene")
            plain_index.index([tokens[i] for i in kept], show_progress=False)
            judged = [q for q in ix.dataset.queries if q in ix.dataset.qrels][: args.limit]
            run_ours: dict[str, dict[str, float]] = {}
            run_plain: dict[str, dict[str, float]] = {}
            causes: dict[str, int] = {}
            by_score_ours: dict[str, dict[str, float]] = {}
            by_score_plain: dict[str, dict[str, float]] = {}
            for q in judged:
                text = clean_query(ix.dataset.queries[q], s.max_query_chars)
                toks = query_tokens(text, drop_question_words=s.bm25_drop_question_words)
                if not toks:
                    continue
                hits = ix.engine.search({"query": text, "libraries": [ix.library], "mode": "bm25", "top_k": TOP}).hits
                ours = [(cid(h.doc_id, h.page), float(h.scores["bm25_page"] or 0.0)) for h in hits]
                docs, scores = plain_index.retrieve([toks], k=min(TOP, len(ids)), show_progress=False)
                plain = {ids[i]: float(sc) for i, sc in zip(docs[0], scores[0]) if sc > 0}
                plain_top = [d for d in plain]  # retrieve returns best first
                run_ours[q] = {d: float(TOP - i) for i, (d, _) in enumerate(ours)} or {"-": 0.0}
                run_plain[q] = {d: float(TOP - i) for i, d in enumerate(plain_top)} or {"-": 0.0}
                # the same pages by their own scores: ranx orders equal scores alike for both
                scale = (ours[0][1] / plain[ours[0][0]]) if ours and plain.get(ours[0][0]) else 1.0
                by_score_ours[q] = {d: sc for d, sc in ours} or {"-": 0.0}
                by_score_plain[q] = {d: round(scale * sc, 6) for d, sc in plain.items()} or {"-": 0.0}
                c = cause(ours, plain, plain_top)
                if c is not None:
                    causes[c] = causes.get(c, 0) + 1
            qrels = ranx.Qrels({q: dict(ix.dataset.qrels[q]) for q in run_ours})
            a = float(ranx.evaluate(qrels, ranx.Run(run_ours), "ndcg@10", make_comparable=True))
            b = float(ranx.evaluate(qrels, ranx.Run(run_plain), "ndcg@10", make_comparable=True))
            flag = "  <- over 0.001" if abs(a - b) > 0.001 else ""
            so = float(ranx.evaluate(qrels, ranx.Run({q: {d: round(v, 6) for d, v in r.items()} for q, r in by_score_ours.items()}),
                                     "ndcg@10", make_comparable=True))
            sp = float(ranx.evaluate(qrels, ranx.Run(by_score_plain), "ndcg@10", make_comparable=True))
            print(f"{name}: {len(recs)} pages ({empty} without a word, {'in' if args.count_empty_pages else 'left out of'} "
                  f"bm25s's N); {len(run_ours)} queries; nDCG@10 ragspine {a:.4f}, plain {b:.4f}, gap {a - b:+.4f}{flag}; "
                  f"top 10 differ on {sum(causes.values())} ({', '.join(f'{k} {v}' for k, v in sorted(causes.items())) or '-'}); "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            print(f"  by their own scores (equal scores in one order for both): ragspine {so:.4f}, plain {sp:.4f}, "
                  f"gap {so - sp:+.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
