"""Why nothing separates on MMLongBench: AUC of key signals on subsets (diagnostic only).
    nice -n 10 .venv/bin/python bench/grade_signals/diag_mmlb.py"""
import json, sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from features import load
from analyse import auc, best_t, rate
m = json.load(open("/tmp/ragspine-grade-signals/mmlongbench_dev.json"))
meta = {json.loads(l)["_id"]: json.loads(l)["metadata"] for l in open("/work/shared/data/mmlongbench_dev/queries.jsonl")}
indexed_docs = {n for n in m["names"] if n}
recs = {r["qid"]: r for r in m["queries"]}
ex = load("mmlongbench_dev")
def retrieved(q, k=10):
    r = recs[q]; gold = set(r["gold"])
    return any(f"{h['name']}#p{h['page']}" in gold for h in r["hits"][:k])
def doc_in(q): return meta[q]["doc_id"] in indexed_docs
def doc_top(q, k=3): return any(h["name"] == meta[q]["doc_id"] for h in recs[q]["hits"][:k])
A = [e for e in ex if e["kind"] == "answerable"]; U = [e for e in ex if e["kind"] == "unanswerable"]
print(f"answerable {len(A)}: doc indexed {sum(doc_in(e['qid']) for e in A)}, gold page in top-10 {sum(retrieved(e['qid']) for e in A)}, own doc in top-3 {sum(doc_top(e['qid']) for e in A)}")
print(f"unanswerable {len(U)}: doc indexed {sum(doc_in(e['qid']) for e in U)}, own doc in top-3 {sum(doc_top(e['qid']) for e in U)}")
from collections import Counter
print("answerable evidence sources:", Counter(s for e in A for s in meta[e['qid']]['evidence_sources']))
subsets = {
  "all ans vs all unans": (A, U),
  "ans, doc indexed vs unans, doc indexed": ([e for e in A if doc_in(e['qid'])], [e for e in U if doc_in(e['qid'])]),
  "ans, gold in top10 vs all unans": ([e for e in A if retrieved(e['qid'])], U),
  "ans, gold NOT in top10 vs all unans": ([e for e in A if not retrieved(e['qid'])], U),
  "ans Pure-text only vs unans": ([e for e in A if all(s.startswith('Pure-text') for s in meta[e['qid']]['evidence_sources'])], U),
}
feats = ["d_max", "g_sim", "d_z", "d_m50", "g_simz", "b_norm", "covw1", "covw_bm", "r_dinb", "f_top", "g_cov"]
print("| subset (n ans / n unans) | " + " | ".join(feats) + " |")
print("|---|" + "---|" * len(feats))
for name, (a, u) in subsets.items():
    row = [auc(np.array([e['f'][f] for e in a]), np.array([e['f'][f] for e in u])) for f in feats]
    print(f"| {name} ({len(a)}/{len(u)}) | " + " | ".join(f"{v:.3f}" for v in row) + " |")
