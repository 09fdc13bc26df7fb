"""OCR cost and gain on real long PDFs (MMLongBench dev: reports, slide decks, papers, manuals).

    .venv/bin/python bench/ocr.py [--docs 8] [--dpi 120] [--json]

Per page, in one run on the same machine:

* the baseline: what ingest pays per page without OCR (parse: text blocks and lines with
  boxes, plus the OCR plan that decides whether a page needs reading);
* the page's kind from the plan (``auto`` mode): ``born-digital`` (no region), ``chart``
  (raster images on a page with a text layer), ``scanned`` (no text layer: the page is read
  whole);
* OCR with the product's settings (``ragspine.indexing.ocr`` defaults, ``--dpi``): seconds per
  page of each kind, seconds per region read, pages/s of each kind, and the ratio of the whole
  document set's OCR time to its no-OCR baseline.

Quality, on the queries whose evidence documents are in the set: page-level BM25 (ragspine's
tokenizer, k1 1.5, b 0.75) nDCG@10 with the text layer alone, with OCR text appended, and with
OCR text whose glued words were not split (the engine's raw lines: read from the same cache, so
the second reading costs no OCR), overall and per evidence type; and the share of OCR tokens of
16+ letters before and after splitting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


def bm25_ndcg(pages: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10 per query of a plain page-level BM25 (k1 1.5, b 0.75, ragspine's tokenizer)."""
    from ragspine.scoring import tokenize

    ids = list(pages)
    docs = [Counter(tokenize(pages[i])) for i in ids]
    lens = [sum(d.values()) for d in docs]
    avg = sum(lens) / max(len(lens), 1) or 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    n = len(docs)
    out = {}
    for qid, text in queries.items():
        q = Counter(tokenize(text))
        scores = []
        for i, d in enumerate(docs):
            s = 0.0
            for t, c in q.items():
                tf = d.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += c * idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * lens[i] / avg))
            scores.append((-s, ids[i]))
        ranked = [pid for s, pid in sorted(scores)[:10] if s < 0]
        rel = qrels[qid]
        dcg = sum(1 / math.log2(r + 2) for r, pid in enumerate(ranked) if rel.get(pid, 0) > 0)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(10, len(rel))))
        out[qid] = dcg / ideal if ideal else 0.0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--docs", type=int, default=6, help="PDFs to read (half chart-heavy, half scanned)")
    ap.add_argument("--dpi", type=int, default=None, help="OCR dpi (default: RAGSPINE_OCR_DPI's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import pymupdf

    from ragspine.config import Settings
    from ragspine.indexing.ocr import OcrOptions
    from ragspine.indexing.pdf import open_pdf
    from ragspine.ocr import OcrCache, RapidOcrEngine, ocr_page, plan_page
    from ragspine.ocr import page as ocr_page_module

    docs_dir = args.data / "documents"
    if not docs_dir.is_dir():
        print(f"no data at {docs_dir} (../shared/data is only on development machines)", file=sys.stderr)
        return 2
    s = Settings()
    opts = OcrOptions.from_settings(s)
    dpi = args.dpi or opts.dpi
    # The documents whose queries have the most Chart/Figure evidence and image pages first.
    queries_all = [json.loads(line) for line in (args.data / "queries.jsonl").open()]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (args.data / "qrels" / "dev.tsv").open():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) > 0:
            qrels[parts[0]][parts[1]] = int(parts[2])
    plans: dict[str, list[tuple[int, str]]] = {}
    for f in sorted(docs_dir.glob("*.pdf")):
        doc = pymupdf.open(f)
        kinds = []
        for i in range(doc.page_count):
            regions = plan_page(doc.load_page(i), opts.mode, opts.min_text_chars, opts.min_image_fraction,
                                opts.band)  # type: ignore[arg-type]
            kinds.append((i + 1, "born-digital" if not regions else
                          "scanned" if regions[0].reason == "no_text_layer" else "chart"))
        doc.close()
        plans[f.name] = kinds
    # Half the documents with the most raster-image (chart) pages, half with the most scanned
    # pages, fewest pages first among equals: every kind of page is measured.
    def most(kind: str) -> list[str]:
        have = [n for n in plans if any(k == kind for _, k in plans[n])]
        return sorted(have, key=lambda n: (-sum(k == kind for _, k in plans[n]) / len(plans[n]), len(plans[n]), n))

    chosen: list[str] = []
    for name in [x for pair in zip(most("chart"), most("scanned")) for x in pair]:
        if name not in chosen and len(chosen) < args.docs:
            chosen.append(name)

    engine = RapidOcrEngine()
    raw_split = ocr_page_module.split_glued
    per_kind: dict[str, list[float]] = defaultdict(list)
    base_s = ocr_s = 0.0
    regions_read = 0
    region_seconds: list[float] = []
    layer: dict[str, str] = {}
    with_ocr: dict[str, str] = {}
    unsplit: dict[str, str] = {}
    long_tokens = Counter()
    engine.recognize(__import__("numpy").full((64, 256, 3), 255, dtype="uint8"))  # load the models first
    for name in chosen:
        path = docs_dir / name
        t = time.perf_counter()
        parsed = open_pdf(path.read_bytes(), max_pages=s.max_pages, max_page_side_pt=s.max_page_side_pt)
        for i, _ in enumerate(parsed.pages):
            plan_page(parsed.doc.load_page(i), opts.mode, opts.min_text_chars, opts.min_image_fraction, opts.band)
        base_s += time.perf_counter() - t
        cache = OcrCache()
        for page, (n, kind) in zip(parsed.pages, plans[name]):
            pid = f"{name}#p{n}"
            layer[pid] = page.text
            if kind == "born-digital":
                with_ocr[pid] = unsplit[pid] = page.text
                continue
            t = time.perf_counter()
            res = ocr_page(parsed.doc.load_page(n - 1), engine, mode=opts.mode, dpi=dpi,  # type: ignore[arg-type]
                           min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction,
                           band=opts.band, cache=cache)
            dt = time.perf_counter() - t
            ocr_s += dt
            per_kind[kind].append(dt)
            if res.engine_calls:
                regions_read += res.engine_calls
                region_seconds.append(dt / res.engine_calls)
            with_ocr[pid] = page.text + "\n\n" + res.text
            # The same page without splitting glued words: the cache answers, no OCR.
            ocr_page_module.split_glued = lambda x, **k: x  # type: ignore[assignment]
            try:
                raw = ocr_page(parsed.doc.load_page(n - 1), engine, mode=opts.mode, dpi=dpi,  # type: ignore[arg-type]
                               min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction,
                               band=opts.band, cache=cache)
            finally:
                ocr_page_module.split_glued = raw_split
            unsplit[pid] = page.text + "\n\n" + raw.text
            for label, text in (("unsplit", raw.text), ("split", res.text)):
                toks = [w for w in text.split() if w.isalpha()]
                long_tokens[label + "_all"] += len(toks)
                long_tokens[label + "_long"] += sum(len(w) >= 16 for w in toks)
        parsed.close()
        print(f"{name}: {len(plans[name])} pages, read {sum(k != 'born-digital' for _, k in plans[name])}",
              file=sys.stderr)

    chosen_set = set(chosen)
    queries = {q["_id"]: q["text"] for q in queries_all
               if q["_id"] in qrels and all(pid.split("#p")[0] in chosen_set for pid in qrels[q["_id"]])}
    types = {q["_id"]: (q.get("metadata") or {}).get("evidence_sources") or [] for q in queries_all}
    figures: dict[str, Any] = {}
    for label, pages in (("text layer", layer), ("+ OCR", with_ocr), ("+ OCR, glued words kept", unsplit)):
        per_q = bm25_ndcg(pages, queries, qrels)
        row = {"all": round(statistics.fmean(per_q.values()), 4) if per_q else None, "queries": len(per_q)}
        for t in ("Chart", "Figure", "Table", "Pure-text (Plain-text)", "Generalized-text (Layout)"):
            vals = [v for q, v in per_q.items() if t in types.get(q, [])]
            row[t] = round(statistics.fmean(vals), 4) if vals else None
        figures[label] = row

    n_pages = sum(len(plans[n]) for n in chosen)
    out = {
        "documents": len(chosen), "pages": n_pages, "dpi": dpi,
        "load_avg": os.getloadavg()[0],
        "baseline_no_ocr_s": round(base_s, 2),
        "baseline_pages_per_s": round(n_pages / base_s, 1) if base_s else None,
        "ocr_s": round(ocr_s, 1),
        "ratio_ocr_over_baseline": round((base_s + ocr_s) / base_s, 1) if base_s else None,
        "pages_by_kind": {k: sum(1 for n in chosen for _, kk in plans[n] if kk == k)
                          for k in ("born-digital", "chart", "scanned")},
        "seconds_per_page": {k: round(statistics.fmean(v), 2) for k, v in per_kind.items()},
        "pages_per_s": {k: round(len(v) / sum(v), 3) for k, v in per_kind.items() if sum(v)},
        "seconds_per_region": round(statistics.median(region_seconds), 2) if region_seconds else None,
        "regions_read": regions_read,
        "long_token_share": {k: round(long_tokens[k + "_long"] / max(long_tokens[k + "_all"], 1), 4)
                             for k in ("unsplit", "split")},
        "ndcg@10": figures,
        "all_documents_by_kind": {k: sum(1 for n in plans for _, kk in plans[n] if kk == k)
                                  for k in ("born-digital", "chart", "scanned")},
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
