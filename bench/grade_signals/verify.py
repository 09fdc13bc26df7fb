import json, sys, numpy as np
s = sys.argv[1]
m = json.load(open(f"/tmp/ragspine-grade-signals/{s}.json")); z = np.load(f"/tmp/ragspine-grade-signals/{s}.npz")
COS, BM = z["COS"], z["BM"]
dd, bd, miss = [], [], 0
for qi, r in enumerate(m["queries"]):
    for h in r["hits"]:
        if h["row"] is None: miss += 1; continue
        if h["scores"].get("dense") is not None: dd.append(abs(COS[qi, h["row"]] - h["scores"]["dense"]))
        if h["scores"].get("bm25") is not None: bd.append(abs(BM[qi, h["row"]] - h["scores"]["bm25"]) / max(1e-9, h["scores"]["bm25"]))
print(s, "hits w/o row", miss, "dense |diff| max", max(dd), "bm25 rel diff max", max(bd), "median", np.median(bd))
