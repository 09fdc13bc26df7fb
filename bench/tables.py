"""Tables read as tables (RAGSPINE_TABLES): what they cost at parse time and what they change.

    .venv/bin/python bench/tables.py [--docs DIR] [--repeats N] [--finder] [--json PATH]

Over the MMLongBench PDFs (``../shared/data/mmlongbench_dev/documents``, all 48 for the cost):

1. Parse time per page with ``tables="off"`` and ``"auto"``, each document parsed alternately
   off / on ``--repeats`` times (the best of each kept: the cores are shared), with the ratio;
   pages the gate passes (``table_regions``), pages with a table read, tables read.
2. With ``--finder``, on the five financial reports: PyMuPDF's own table finder
   (``Page.find_tables(strategy="text")``) on every page, its cost per page, and the gate's
   precision and recall against it. A page counts as holding a table for the finder when one
   of its tables has at least three rows with a text cell and a number cell (the gate's own
   definition of a value row, ``tables.MIN_VALUE_ROWS``). Minutes on two loaded cores.
3. For the judged pages of the financial-report questions whose evidence is a Table and whose
   answer is printed on the page (a computed ratio is not): whether some passage (chunking at
   the default 480 / 80 characters, as ingest does) holds both the answer's row label and the
   answer, off and on; and whether it also holds the year the question names (with tables on,
   in the passage or in the context ``passage_table_context`` gives it). The row label is found
   by geometry, independent of the table reader: the text line furthest left, with a letter,
   on the answer's line band.

``ragspine eval`` with tables off and on gives the retrieval figures (docs/measured.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
FINANCIAL = ("3M_2018_10K.pdf", "AMAZON_2017_10K.pdf", "BESTBUY_2023_10K.pdf", "NETFLIX_2015_10K.pdf",
             "f86d073b0d735ac873a65d906ba82758.pdf")


def parse_cost(docs: list[Path], repeats: int) -> dict:
    from ragspine.indexing.pdf import open_pdf
    from ragspine.indexing.tables import table_regions

    best = {"off": 0.0, "auto": 0.0}
    pages = gated = with_tables = n_tables = 0
    for path in docs:
        data = path.read_bytes()
        times = {"off": [], "auto": []}
        for _ in range(repeats):
            for mode in ("off", "auto"):
                t0 = time.perf_counter()
                parsed = open_pdf(data, tables=mode)
                times[mode].append(time.perf_counter() - t0)
                if mode == "auto":
                    last = parsed
                parsed.close()
        for mode in best:
            best[mode] += min(times[mode])
        pages += len(last.pages)
        gated += sum(1 for p in last.pages if table_regions(p.lines))
        with_tables += sum(1 for p in last.pages if p.tables)
        n_tables += sum(len(p.tables) for p in last.pages)
    return {"documents": len(docs), "pages": pages, "ms_per_page_off": 1000 * best["off"] / pages,
            "ms_per_page_on": 1000 * best["auto"] / pages, "ratio": best["auto"] / best["off"],
            "pages_gated": gated, "pages_with_tables": with_tables, "tables": n_tables}


def finder_truth(docs: list[Path]) -> dict:
    """PyMuPDF's table finder on every page against the gate."""
    os.environ.setdefault("PYMUPDF_SUGGEST_LAYOUT_ANALYZER", "0")  # its advice to install pymupdf_layout
    import pymupdf

    from ragspine.indexing.pdf import open_pdf
    from ragspine.indexing.tables import MIN_VALUE_ROWS, is_value, table_regions

    tp = fp = fn = 0
    finder_s = 0.0
    n = 0
    for path in docs:
        parsed = open_pdf(path.read_bytes(), tables="off")
        doc = pymupdf.open(path)
        for page, content in zip(doc, parsed.pages, strict=True):
            t0 = time.perf_counter()
            found = page.find_tables(strategy="text")
            cells = [tab.extract() for tab in found.tables]
            finder_s += time.perf_counter() - t0
            n += 1
            tables = 0
            for rows in cells:
                value_rows = sum(1 for row in rows
                                 if any(c and not is_value(c) for c in row) and any(c and is_value(c) for c in row))
                tables += value_rows >= MIN_VALUE_ROWS
            truth, gate = tables > 0, bool(table_regions(content.lines))
            tp += truth and gate
            fp += gate and not truth
            fn += truth and not gate
        doc.close()
        parsed.close()
    return {"pages": n, "finder_ms_per_page": 1000 * finder_s / n, "finder_pages": tp + fn, "gate_pages": tp + fp,
            "both": tp, "precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1)}


def _candidates(answer: str) -> list[str]:
    """How a numeric answer may be printed: 1577 -> 1,577 / 1577; Indian grouping too."""
    m = re.fullmatch(r"\$?\s*(-?[\d,]*\.?\d+)\s*%?", answer.strip())
    if not m:
        return []
    raw = m.group(1).replace(",", "")
    whole, _, frac = raw.partition(".")
    frac = frac.rstrip("0")
    tail = f".{frac}" if frac else ""
    n = int(whole or 0)
    us = f"{n:,}"
    indian = whole[-3:]
    rest = whole[:-3]
    while rest:
        indian = f"{rest[-2:]},{indian}"
        rest = rest[:-2]
    return sorted({f"{us}{tail}", f"{whole}{tail}", f"{indian}{tail}"}, key=len, reverse=True)


def _find(text: str, value: str) -> bool:
    return re.search(rf"(?<![\d,.]){re.escape(value)}(?![\d,]|\.\d)", text) is not None


def _label_of(content, value: str) -> str | None:
    """The text line furthest left on the band of the first line that holds ``value``."""
    from ragspine.indexing.tables import is_value

    for text, box in content.lines:
        if _find(text, value):
            mid = (box[1] + box[3]) / 2
            band = [(t, b) for t, b in content.lines
                    if b[1] <= mid <= b[3] and not is_value(t) and re.search(r"[A-Za-z]", t)]
            left = [(t, b) for t, b in band if b[2] <= box[0] + 1]
            if left:
                return min(left, key=lambda tb: tb[1][0])[0].strip()
            return None
    return None


def same_passage(docs_dir: Path) -> dict:
    from ragspine.indexing.chunking import chunk_spans
    from ragspine.indexing.pdf import open_pdf
    from ragspine.indexing.tables import passage_table_context

    queries = {}
    for line in (DATA / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        meta = q["metadata"]
        if meta["doc_type"] == "Financial report" and "Table" in meta["evidence_sources"]:
            queries[q["_id"]] = {**meta, "years": re.findall(r"(?:19|20)\d\d", q["text"])}
    judged: dict[str, list[int]] = {}
    for line in (DATA / "qrels" / "dev.tsv").read_text().splitlines()[1:]:
        qid, pid, score = line.split("\t")
        if qid in queries and int(score) > 0:
            judged.setdefault(qid, []).append(int(pid.rsplit("#p", 1)[1]))
    parsed = {}
    counts = {"questions": len(queries), "judged_pages": 0, "answer_on_page": 0, "label_found": 0,
              "together_off": 0, "together_on": 0, "with_year": 0, "year_off": 0, "year_on": 0, "cases": []}
    for qid, pages in sorted(judged.items()):
        doc = queries[qid]["doc_id"]
        if doc not in parsed:
            data = (docs_dir / doc).read_bytes()
            parsed[doc] = {m: open_pdf(data, tables=m) for m in ("off", "auto")}
        for number in pages:
            counts["judged_pages"] += 1
            off = parsed[doc]["off"].pages[number - 1]
            value = next((v for v in _candidates(queries[qid]["answer"]) if _find(off.text, v)), None)
            if value is None:
                continue
            counts["answer_on_page"] += 1
            label = _label_of(off, value)
            if not label:
                continue
            counts["label_found"] += 1
            years = queries[qid]["years"]
            counts["with_year"] += bool(years)
            case = {"query": qid, "page": f"{doc}#p{number}", "label": label, "value": value, "years": years}
            for mode in ("off", "auto"):
                page = parsed[doc][mode].pages[number - 1]
                spans = chunk_spans(page.text, [(b.start, b.end) for b in page.blocks if b.source == "pdf"])
                squash = " ".join(label.split())
                held = [s for s in spans if squash in " ".join(page.text[s.start:s.end].split())
                        and _find(page.text[s.start:s.end], value)]
                counts["together_on" if mode == "auto" else "together_off"] += bool(held)
                case[mode] = bool(held)
                # The asked year beside them: in the passage, or (tables on) in the context
                # passage_table_context gives it.
                seen = [page.text[s.start:s.end] + "\n" + passage_table_context(page, s.start, s.end) for s in held]
                year = bool(years) and any(all(_find(t, y) for y in years) for t in seen)
                counts["year_on" if mode == "auto" else "year_off"] += year
                case[f"{mode}_year"] = year
            counts["cases"].append(case)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=DATA / "documents")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--finder", action="store_true", help="also run PyMuPDF's table finder on every page "
                    "of the financial reports (minutes)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if not args.docs.is_dir():
        print(f"skipped: {args.docs} is absent (the shared evaluation data is not on this machine)")
        return 0
    all_docs = sorted(args.docs.glob("*.pdf"))
    fin = [args.docs / f for f in FINANCIAL if (args.docs / f).exists()]
    out: dict = {}
    for name, docs in (("financial", fin), ("all", all_docs)):
        c = out[f"cost_{name}"] = parse_cost(docs, args.repeats)
        print(f"{name}: {c['documents']} documents, {c['pages']} pages: parse {c['ms_per_page_off']:.2f} ms/page "
              f"off, {c['ms_per_page_on']:.2f} on (x{c['ratio']:.2f}); gated {c['pages_gated']} pages, "
              f"tables on {c['pages_with_tables']} pages ({c['tables']} tables)")
    if args.finder:
        f = out["finder"] = finder_truth(fin)
        print(f"finder on every page of the financial reports: {f['finder_ms_per_page']:.1f} ms/page; pages with a "
              f"table: finder {f['finder_pages']}, gate {f['gate_pages']}, both {f['both']}; gate precision "
              f"{f['precision']:.3f}, recall {f['recall']:.3f}")
    s = out["same_passage"] = same_passage(args.docs)
    print(f"financial Table questions: {s['questions']}, judged pages {s['judged_pages']}, answer printed on the "
          f"page {s['answer_on_page']}, row label found {s['label_found']}; label and answer in one passage: "
          f"off {s['together_off']}, on {s['together_on']}; of the {s['with_year']} whose question names a year, "
          f"that year too (on: in the passage or its table context): off {s['year_off']}, on {s['year_on']}")
    for c in s["cases"]:
        print(f"  {c['query']} {c['page']}: {c['label'][:60]!r} {c['value']} {c['years']}: off {c['off']}/"
              f"{c['off_year']}, on {c['auto']}/{c['auto_year']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
