"""Ceiling: how well can ALL the signals together separate MMLongBench's unanswerable questions
when the combination is fitted ON MMLongBench itself (5-fold stratified cross-validation,
repeated 20 times, out-of-fold scores)? In-sample fitting, for the record only.
    nice -n 10 .venv/bin/python bench/grade_signals/ceiling.py"""
import sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from features import load
from analyse import auc, best_t, rate
from sklearn.linear_model import LogisticRegression
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.model_selection import StratifiedKFold
ex = load("mmlongbench_dev")
feats = [f for f in ex[0]["f"] if f not in ("g_agree", "has_hits")]
X = np.nan_to_num(np.array([[e["f"][f] for f in feats] for e in ex]), nan=-5.0)
y = np.array([e["kind"] == "answerable" for e in ex], int)
for name, mk in [("logistic, all %d signals" % len(feats), lambda: LogisticRegression(C=1.0, max_iter=5000, class_weight="balanced")),
                 ("gradient boosting, all signals", lambda: HistGradientBoostingClassifier(max_depth=3, max_iter=100, learning_rate=0.05, class_weight="balanced"))]:
    res = []
    for rep in range(20 if "logistic" in name else 5):
        oof = np.zeros(len(y))
        for tr, te in StratifiedKFold(5, shuffle=True, random_state=rep).split(X, y):
            mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-9
            m = mk().fit((X[tr] - mu) / sd, y[tr])
            oof[te] = m.predict_proba((X[te] - mu) / sd)[:, 1]
        a, u = oof[y == 1], oof[y == 0]
        r = [auc(a, u)]
        for b in (0.05, 0.10):
            t = best_t([a], b); r += [rate(u, t)]
        res.append(r)
    res = np.array(res)
    print(f"{name}: AUC {res[:,0].mean():.3f} (sd {res[:,0].std():.3f}); unanswerable abstained at 5% answerable {res[:,1].mean():.1%}, at 10% {res[:,2].mean():.1%}")
