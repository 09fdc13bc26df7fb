"""Document profiles of a folder of PDFs (ragspine.indexing.profile), and what they cost.

For each PDF: the profile derived from the file alone (title, issuer, period, fiscal year, kind,
language, outline size, how many pages print a number other than their place, how many
numbered figures and tables have a caption, and where each came from), the time to parse it (``open_pdf``) and the time to derive its profile; at the end the
totals and the profile's cost as a share of parsing, and that of reading the printed page numbers
(``page_labels``, part of the profile) on its own.
Every page counts as kept (no policy runs here).

    .venv/bin/python bench/profiles.py [../shared/data/mmlongbench_dev/documents] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ragspine.indexing.page_labels import pdf_page_labels, printed_pages
from ragspine.indexing.pdf import open_pdf
from ragspine.indexing.profile import document_profile

DEFAULT = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "mmlongbench_dev" / "documents"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=str(DEFAULT))
    ap.add_argument("--json", action="store_true", help="one JSON object per document instead of a table")
    args = ap.parse_args()
    folder = Path(args.folder)
    pdfs = sorted(folder.glob("*.pdf"))
    if not pdfs:
        print(f"no PDFs under {folder} (the evaluation data is not on this machine): nothing to measure")
        return 0
    parse_s = profile_s = labels_s = 0.0
    printed_docs = printed_n = captions_n = 0
    for path in pdfs:
        t0 = time.perf_counter()
        parsed = open_pdf(path)
        t1 = time.perf_counter()
        try:
            prof = document_profile(parsed, path.name, {}, parsed.pages)
            t2 = time.perf_counter()
            printed_pages(parsed.pages, pdf_page_labels(parsed.doc, [p.number for p in parsed.pages]))
            t3 = time.perf_counter()
        finally:
            parsed.close()
        parse_s += t1 - t0
        profile_s += t2 - t1
        labels_s += t3 - t2
        printed_docs += bool(prof.printed_pages)
        printed_n += len(prof.printed_pages)
        captions_n += len(prof.captions)
        if args.json:
            print(json.dumps({"file": path.name, "parse_ms": round(1000 * (t1 - t0), 1),
                              "profile_ms": round(1000 * (t2 - t1), 2), **prof.to_json()}, ensure_ascii=False))
            continue
        src = ",".join(f"{k}={v}" for k, v in prof.sources.items())
        print(f"{path.name[:44]:44} | {str(prof.title)[:60]:60} | {str(prof.issuer)[:28]:28} | {prof.period or '-':10} "
              f"| {prof.fiscal_year or '-':5} | {prof.doc_type or '-':15} | {prof.language or '-':3} "
              f"| outline {len(prof.outline):3} | printed {len(prof.printed_pages):3} | captions {len(prof.captions):3} | {1000 * (t2 - t1):6.1f} ms | {src}")
    n = len(pdfs)
    print(f"\n{n} documents: parse {1000 * parse_s / n:.1f} ms/doc, profile {1000 * profile_s / n:.2f} ms/doc, "
          f"profile/parse = {profile_s / parse_s:.3f}; printed page numbers {1000 * labels_s / n:.2f} ms/doc, "
          f"printed/parse = {labels_s / parse_s:.4f} ({printed_n} pages of {printed_docs} documents print a number "
          f"other than their place); {captions_n} figure and table captions", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
