"""Which pages the RESTRICTED marker rule drops from public PDFs: the rule before commit bc37982
(the baseline, copied below) against ragspine's rule today (``ragspine.policy.PagePolicy``).

    .venv/bin/python bench/marker_pages.py [FOLDER ...] [--ocr off|stamps|all] [--band 0.12]

Every ``*.pdf`` of ``../shared/data/mmlongbench_dev/documents`` and of each FOLDER is opened with
ragspine's own parser (``ragspine.indexing.pdf.open_pdf``). ``--ocr stamps`` also reads the
images that reach into the marker bands through the product's OCR stage, as the first phase of
an ingest does (about a second a stamp on 2 cores); ``--ocr all`` reads every page ``auto``
would (scans, large raster images: minutes per document on 2 cores). Printed:

1. every page either rule drops, with the line that triggers it (these are public PDFs);
2. pages dropped per document and in total, for each rule;
3. every line anywhere on a page that either rule reads as a label if it stood in a band
   (a figure that does not depend on where a filing happens to put its prose), and its totals;
4. the time both predicates took over every line, and the ratio of today's to the baseline's.

None of these documents is classified: every page dropped is a false positive.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DOCS = ROOT.parent / "shared" / "data" / "mmlongbench_dev" / "documents"


# -- BASELINE: the marker rule as it stood before commit bc37982 (src/ragspine/policy/markers.py
# at commit 2d40a15), copied here unchanged so that the bench can measure against it. It is not
# used by ragspine. --------------------------------------------------------------------------------

BASELINE_LABEL_MAX_CHARS = 48
_B_SPACES = re.compile(r"\s+")
_B_LABEL_WORDS = r"(?:classification|classified|sensitivity|security\s+level|密级|分类)"


def _baseline_pattern(markers: Iterable[str], flags: int = 0) -> re.Pattern[str]:
    alts = []
    for m in markers:
        m = m.strip()
        if not m:
            continue
        esc = re.escape(m)
        if m.isascii():
            esc = rf"(?<![A-Za-z0-9]){esc}(?![A-Za-z0-9])"
        alts.append(esc)
    return re.compile("|".join(alts), flags)


class BaselinePolicy:
    """BASELINE (the old rule): a band line counts when it holds the marker as configured, or
    the marker in any case when the line is at most 48 characters, or after a label word; an
    OCR line anywhere counts when it is short and holds the marker as configured."""

    def __init__(self, markers: Sequence[str], band: float) -> None:
        self.band = band
        self._exact = _baseline_pattern(markers)
        self._any_case = _baseline_pattern(markers, re.IGNORECASE)
        self._labelled = re.compile(rf"{_B_LABEL_WORDS}\s*[:：]?\s*(?:{self._any_case.pattern})", re.IGNORECASE)

    def band_line(self, raw: str) -> bool:
        text = unicodedata.normalize("NFKC", raw)
        if self._exact.search(text):
            return True
        if len(text.strip()) <= BASELINE_LABEL_MAX_CHARS and (
            self._any_case.search(text) or self._any_case.search(_B_SPACES.sub("", text))
        ):
            return True
        return bool(self._labelled.search(text))

    def stamp(self, raw: str) -> bool:
        text = unicodedata.normalize("NFKC", raw)
        if len(text.strip()) > BASELINE_LABEL_MAX_CHARS:
            return False
        return bool(self._exact.search(text) or self._exact.search(_B_SPACES.sub("", text))
                    or self._labelled.search(text))


# -- the bench -----------------------------------------------------------------------------------


@dataclass
class Verdict:
    """Why one rule drops one page: the first line that triggers it, and where (band / stamp)."""

    line: str | None = None
    where: str = ""


def page_verdict(lines: list[tuple[str, tuple[float, float, float, float]]],
                 ocr: list[tuple[str, tuple[float, float, float, float]]], height: float, band: float,
                 in_band: Callable[[str], bool], stamp: Callable[[str], bool]) -> Verdict:
    """The page walk of ``PagePolicy.marked``, with the line that decides it."""
    top, bottom = height * band, height * (1.0 - band)
    for src, group in (("text", lines), ("ocr", ocr)):
        for raw, (_x0, y0, _x1, y1) in group:
            if (y0 <= top or y1 >= bottom) and in_band(raw):
                return Verdict(raw, f"{src} band")
    for raw, _ in ocr:
        if stamp(raw):
            return Verdict(raw, "ocr stamp")
    return Verdict()


def pdfs_of(folders: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            raise SystemExit(f"no such folder: {folder} (give folders of PDFs)")
        found = sorted(folder.glob("*.pdf"))
        if not found:
            raise SystemExit(f"no *.pdf in {folder}")
        out.extend(found)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="more folders of PDFs (the dev PDFs are always read)")
    ap.add_argument("--ocr", choices=("off", "stamps", "all"), default="off",
                    help="read pixels through the product's OCR stage: images in the bands, or every page auto would")
    ap.add_argument("--band", type=float, default=0.12, help="marker band, as RAGSPINE_MARKER_BAND (default 0.12)")
    ap.add_argument("--markers", nargs="+", default=["RESTRICTED", "受限"], help="as RAGSPINE_RESTRICTED_MARKERS")
    args = ap.parse_args(argv)

    from ragspine.indexing.pdf import open_pdf
    from ragspine.policy import PagePolicy

    folders = list(args.folders)
    if DEFAULT_DOCS.is_dir():
        folders.insert(0, DEFAULT_DOCS)
    else:
        print(f"skipped: the dev PDFs are not at {DEFAULT_DOCS} (shared data absent)")
    if not folders:
        print("nothing to read: give a folder of PDFs")
        return 0
    files = pdfs_of(folders)

    new = PagePolicy(tuple(args.markers), args.band)
    old = BaselinePolicy(args.markers, args.band)
    stage = None
    if args.ocr != "off":
        from ragspine.config import Settings
        from ragspine.indexing.ocr import OcrStage

        stage = OcrStage(Settings(ocr="auto", marker_band=args.band, dense_model="none", reranker="none"))

    print(f"# RESTRICTED marker rule on {len(files)} PDFs (band {args.band}, OCR {args.ocr}, markers {args.markers})")
    print("\n## pages dropped by either rule (doc, page, baseline, today, where, triggering line)")
    per_doc: list[tuple[str, int, int, int]] = []
    label_lines: list[tuple[str, int, str, bool, bool]] = []
    n_lines = n_pages = 0
    t_old = t_new = t_ocr = 0.0
    for path in files:
        parsed = open_pdf(path)
        try:
            if stage is not None:
                t0 = time.perf_counter()
                stage.apply(parsed, part="stamps" if args.ocr == "stamps" else "all")
                t_ocr += time.perf_counter() - t0
            d_old = d_new = 0
            for p in parsed.pages:
                n_pages += 1
                lines, ocr = list(p.lines), list(p.ocr_lines)
                t0 = time.perf_counter()
                v_old = page_verdict(lines, ocr, p.height, args.band, old.band_line, old.stamp)
                t1 = time.perf_counter()
                v_new = page_verdict(lines, ocr, p.height, args.band, new.label_line,
                                     lambda raw: new.label_line(raw, stamp=True))
                t2 = time.perf_counter()
                t_old += t1 - t0
                t_new += t2 - t1
                assert (v_new.line is not None) == new.marked(p), (path.name, p.number)  # the same walk
                d_old += v_old.line is not None
                d_new += v_new.line is not None
                for v, name in ((v_old, "baseline"), (v_new, "today")):
                    if v.line is not None:
                        print(f"{path.name}\tp{p.number}\t{'DROP' if v_old.line else 'keep'}\t"
                              f"{'DROP' if v_new.line else 'keep'}\t{name}: {v.where}\t{v.line!r}")
                for raw, _box in [*lines, *ocr]:
                    n_lines += 1
                    a, b = old.band_line(raw), new.label_line(raw)
                    if a or b:
                        label_lines.append((path.name, p.number, raw, a, b))
            per_doc.append((path.name, len(parsed.pages), d_old, d_new))
        finally:
            parsed.close()

    print("\n## pages dropped per document (documents with a drop by either rule)")
    print("doc\tpages\tbaseline\ttoday")
    for name, pages, a, b in per_doc:
        if a or b:
            print(f"{name}\t{pages}\t{a}\t{b}")
    tot_old = sum(a for *_, a, _b in per_doc)
    tot_new = sum(b for *_, b in per_doc)
    docs_old = sum(1 for *_, a, _b in per_doc if a)
    docs_new = sum(1 for *_, b in per_doc if b)
    print(f"TOTAL\t{n_pages} pages, {len(per_doc)} PDFs\tbaseline {tot_old} pages of {docs_old} PDFs\t"
          f"today {tot_new} pages of {docs_new} PDFs")

    print("\n## lines anywhere on a page read as a label if they stood in a band (doc, page, baseline, today, line)")
    for name, number, raw, a, b in label_lines:
        print(f"{name}\tp{number}\t{'LABEL' if a else '-'}\t{'LABEL' if b else '-'}\t{raw!r}")
    print(f"TOTAL\t{n_lines} lines\tbaseline {sum(a for *_, a, _b in label_lines)}\t"
          f"today {sum(b for *_, b in label_lines)}")

    print("\n## cost of the page walk over every page (both rules, same run)")
    print(f"baseline {t_old * 1e3:.1f} ms, today {t_new * 1e3:.1f} ms, ratio {t_new / max(t_old, 1e-9):.2f}x"
          + (f"; OCR ({args.ocr}) {t_ocr:.1f} s" if stage is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
