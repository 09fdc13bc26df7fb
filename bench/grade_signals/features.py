"""Per-example grade signals from /tmp/ragspine-grade-signals/SET.{npz,json} (written by collect.py).

An example is (query, pool): answerable = the query over the whole library; for the
calibration sets also the in-domain "unanswerable" twin of bench/grade_calibration.py: the
same query with its judged documents taken out - out of the product's hits (as
grade_calibration does) AND out of the exhaustive pool (the library without those documents).
MMLongBench: answerable = judged queries, unanswerable = queries without qrels.

Every feature is oriented later (analyse.py); here they are raw.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ragspine.chain.grade import STOPWORDS, content_terms  # noqa: F401  (the grade's own term rule)
from ragspine.scoring.tokenizer import token_id, tokenize

OUT = Path(__import__("os").environ.get("GRADE_SIGNALS_OUT", "/tmp/ragspine-grade-signals"))
CAL = ("tatqa_dev", "cranfield", "cmrc2018_dev_retrieval")
TARGET = "mmlongbench_dev"


def _kth(x: np.ndarray, k: int) -> float:
    """k-th largest (1-based); the smallest when fewer than k."""
    if len(x) == 0:
        return float("nan")
    k = min(k, len(x))
    return float(np.partition(x, len(x) - k)[len(x) - k])


def _topk_mean(x: np.ndarray, k: int) -> float:
    k = min(k, len(x))
    return float(np.partition(x, len(x) - k)[len(x) - k:].mean())


def _rank_of(scores: np.ndarray, idx: int) -> int:
    """1-based rank of element idx in descending order (ties: optimistic)."""
    return int((scores > scores[idx]).sum()) + 1


def load(name: str) -> list[dict]:
    z = np.load(OUT / f"{name}.npz")
    m = json.loads((OUT / f"{name}.json").read_text())
    COS, BM, idf = z["COS"], z["BM"], z["idf"]
    n = m["n_passages"]
    vocab = {int(k): v for k, v in m["vocab"].items()}
    # page of every passage
    pkeys: dict[tuple[str, int], int] = {}
    pg = np.array([pkeys.setdefault((d, p), len(pkeys)) for d, p in zip(m["docs"], m["pages"])])
    npg = len(pkeys)
    names = np.array([x if x is not None else "" for x in m["names"]], dtype=object)
    ptoks = [set(tokenize(t)) for t in m["ptexts"]]
    # term -> passages containing it (for library coverage)
    term_rows: dict[str, np.ndarray] = {}
    k1 = m["k1"]
    depth = m["depth"]
    out: list[dict] = []
    for qi, r in enumerate(m["queries"]):
        if not r["tokens"]:
            continue
        terms = content_terms(r["text"])
        tid = [vocab.get(token_id(t)) for t in terms]
        tidf = np.array([idf[j] if j is not None else float(np.log(1.0 + (n + 0.5) / 0.5)) for j in tid])
        for t in terms:
            if t not in term_rows:
                term_rows[t] = np.array([i for i, s in enumerate(ptoks) if t in s], dtype=int)
        # BM25 ideal: sum over query tokens (with counts) of idf * (k1 + 1)
        qt = tokenize(r["text"])
        ideal = 0.0
        for t in qt:
            j = vocab.get(token_id(t))
            ideal += (idf[j] if j is not None else 0.0) * (k1 + 1.0)
        if m["set"] == TARGET:
            variants = [("answerable" if r["judged"] else "unanswerable", np.ones(n, bool), r["hits"], r["grade"])]
        else:
            gold = set(r["gold"])
            mask = ~np.isin(names, list(gold))
            hits_rm = [h for h in r["hits"] if h["name"] not in gold]
            variants = [("answerable", np.ones(n, bool), r["hits"], r["grade"]),
                        ("unanswerable", mask, hits_rm, r["grade_removed"])]
        for kind, mask, hits, g in variants:
            f: dict[str, float] = {}
            c = COS[qi][mask]
            b = BM[qi][mask].astype(np.float64)
            rows = np.flatnonzero(mask)
            # -- dense, exhaustive -----------------------------------------------------------------
            dmax = float(c.max())
            mu, sd = float(c.mean()), float(c.std())
            med = float(np.median(c))
            q75, q25, p99 = np.percentile(c, [75, 25, 99])
            f["d_max"] = dmax
            f["d_z"] = (dmax - mu) / sd
            f["d_rz"] = (dmax - med) / (q75 - q25) if q75 > q25 else float("nan")
            f["d_gap99"] = dmax - float(p99)
            f["d_z99"] = (dmax - float(p99)) / sd
            f["d_m10"] = dmax - _kth(c, 10)
            f["d_m50"] = dmax - _kth(c, 50)
            sd100 = float(np.std(np.partition(c, len(c) - min(100, len(c)))[-100:]))
            f["d_ztop100"] = (dmax - _topk_mean(c, 100)) / sd100 if sd100 > 0 else float("nan")
            pd_ = np.full(npg, -np.inf)
            np.maximum.at(pd_, pg[rows], c)
            pdv = pd_[np.isfinite(pd_)]
            f["dp_m10"] = dmax - _kth(pdv, 10)
            f["dp_m50"] = dmax - _kth(pdv, 50)
            # product's similarity (best dense cosine of the first `depth` hits), raw and z-scored
            sim = g.get("similarity")
            f["g_sim"] = sim if sim is not None else float("nan")
            f["g_simz"] = (sim - mu) / sd if sim is not None else float("nan")
            # -- BM25, exhaustive ------------------------------------------------------------------
            bmax = float(b.max())
            f["b_max"] = bmax
            f["b_norm"] = bmax / ideal if ideal > 0 else 0.0
            f["b_r10"] = bmax / _topk_mean(b, 10) if bmax > 0 else 0.0
            f["b_r100"] = bmax / _topk_mean(b, 100) if bmax > 0 else 0.0
            f["b_z"] = (bmax - b.mean()) / b.std() if b.std() > 0 else 0.0
            f["b_m10"] = (bmax - _kth(b, 10)) / bmax if bmax > 0 else 0.0
            # coverage (the grade's terms) of the product hits, of the library
            f["g_cov"] = g.get("coverage") if g.get("coverage") is not None else float("nan")
            f["g_agree"] = g.get("agreement") if g.get("agreement") is not None else float("nan")
            if terms:
                def cov(rowset: list[int], weighted: bool) -> float:
                    found = set().union(*(ptoks[i] for i in rowset)) if rowset else set()
                    hit = np.array([t in found for t in terms], float)
                    return float((hit * tidf).sum() / tidf.sum()) if weighted else float(hit.mean())
                top_rows = [h["row"] for h in hits[:depth] if h["row"] is not None]
                f["cov1"] = cov(top_rows[:1], False)
                f["covw1"] = cov(top_rows[:1], True)
                f["covw3"] = cov(top_rows, True)
                bt = int(rows[int(np.argmax(b))])
                f["covw_bm"] = cov([bt], True)
                inlib = np.array([bool(mask[term_rows[t]].any()) if len(term_rows[t]) else False for t in terms], float)
                f["lib_cov"] = float(inlib.mean())
                f["lib_covw"] = float((inlib * tidf).sum() / tidf.sum())
                # rarest query term (highest idf) present in the top-depth hits?
                topset = set().union(*(ptoks[i] for i in top_rows)) if top_rows else set()
                f["rare_in_top"] = float(terms[int(np.argmax(tidf))] in topset)
            else:
                for k in ("cov1", "covw1", "covw3", "covw_bm", "lib_cov", "lib_covw", "rare_in_top"):
                    f[k] = float("nan")
            # -- agreement, exhaustive (page level) -------------------------------------------------
            pb = np.full(npg, -np.inf)
            np.maximum.at(pb, pg[rows], b)
            live = np.isfinite(pb)
            pbv, pdv2 = pb[live], pd_[live]
            if bmax > 0:
                tb = set(np.argsort(-pbv, kind="stable")[:10].tolist())
                td = set(np.argsort(-pdv2, kind="stable")[:10].tolist())
                f["ov10"] = len(tb & td) / 10
                f["r_dinb"] = -np.log(_rank_of(pbv, int(np.argmax(pdv2))))
                f["r_bind"] = -np.log(_rank_of(pdv2, int(np.argmax(pbv))))
            else:
                f["ov10"], f["r_dinb"], f["r_bind"] = 0.0, -np.log(len(pbv)), -np.log(len(pbv))
            f["f_top"] = float(hits[0]["scores"].get("fused") or 0.0) if hits else 0.0
            f["has_hits"] = float(bool(hits))
            out.append({"set": m["set"], "qid": r["qid"], "kind": kind, "f": f})
    return out
