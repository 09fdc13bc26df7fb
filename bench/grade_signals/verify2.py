import json, sys, numpy as np
s = sys.argv[1]
m = json.load(open(f"/tmp/ragspine-grade-signals/{s}.json")); z = np.load(f"/tmp/ragspine-grade-signals/{s}.npz")
COS = z["COS"]
key = [(d, p) for d, p in zip(m["docs"], m["pages"])]
rows = {}
for i, k in enumerate(key): rows.setdefault(k, []).append(i)
dd = []
for qi, r in enumerate(m["queries"]):
    for h in r["hits"]:
        if h["scores"].get("dense") is not None:
            dd.append(abs(COS[qi, rows[(h["doc"], h["page"])]].max() - h["scores"]["dense"]))
dd = np.array(dd); print(s, "page-best dense |diff| max", dd.max(), "n>1e-3", (dd > 1e-3).sum(), len(dd))
