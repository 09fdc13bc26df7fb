"""OCR engine benchmark: seconds per full A4 page and what is still read, by render dpi.

    .venv/bin/python bench/ocr_engine.py [--dpi 100 150 200] [--repeat 3] [--threads N]
                                         [--source-dpi 300] [--json]

The page is synthetic and built here (no data files): an A4 report page with a red 14 pt
bold "RESTRICTED" stamp at the top, a 16 pt heading, 9 pt Helvetica body text (as many
paragraphs of varied sentences with numbers as fill the page: about 50 lines), a Chinese line, a 6.5 pt source note (chart-label size), and a 9 pt footer
"Classification: RESTRICTED". It is rasterised at ``--source-dpi`` into a page without a
text layer (a scan), then read with ``ragspine.ocr.ocr_page`` in ``full`` mode with
``RapidOcrEngine`` at each ``--dpi``; one warm-up call first, then ``--repeat`` timed calls
(median and min reported). No cache: every call runs the engine.

What "read" means, per dpi:
* ``stamp``: a line whose text, spaces removed, is "RESTRICTED" (the 14 pt stamp);
* ``footer``: a line containing "RESTRICTED" in the bottom 10 % of the page (9 pt);
* ``body_token_recall``: share of the body's lower-cased alphanumeric tokens found in the
  OCR tokens (multiset), after glued words are split: what BM25 would match;
* ``small_6pt5_token_recall``: the same for the 6.5 pt source note;
* ``body_char_ratio``: difflib ratio of the body and the OCR text of the body area, both with
  all whitespace removed: recognition accuracy regardless of spacing.

The load average is printed: on a shared 2-core machine, other work inflates the times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path

import pymupdf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ragspine.ocr import PageOcr, RapidOcrEngine, ocr_page  # noqa: E402

A4 = (595.0, 842.0)  # PDF points
MARGIN = 56.0
BODY_TOP, BODY_BOTTOM = 150.0, 740.0  # PDF points: the body text box

SENTENCES = [
    "Global smartphone shipments fell 3.2% year on year to 1.17 billion units in 2023.",
    "Mobile developers reported that cross-platform frameworks now account for 46% of new apps.",
    "Revenue from cloud services grew 21% while on-premise licences declined for the fifth year.",
    "In Southeast Asia, average selling prices rose to $283 as buyers moved to mid-range models.",
    "The survey covered 12,400 respondents across 18 markets between March and June.",
    "Operating margin narrowed by 140 basis points because of component inflation.",
    "Subscription revenue represented 38 percent of the total, up from 31 percent last year.",
    "Enterprise adoption of generative assistants doubled, led by customer support workloads.",
    "Inventory days fell from 74 to 52 after distributors cleared older stock in the quarter.",
    "Regulators in the European Union opened consultations on app store payment rules.",
]
CHINESE = "移动开发者市场份额增长至百分之四十六"
#: Chart-label size: a 6.5 pt source note under the body.
SMALL = "Source: IDC Worldwide Quarterly Mobile Phone Tracker, February 2024; company filings and analyst estimates."
SMALL_Y = 775.0  # PDF points, baseline


def build_page() -> pymupdf.Document:
    doc = pymupdf.open()
    page = doc.new_page(width=A4[0], height=A4[1])
    page.insert_text((MARGIN, 60), "RESTRICTED", fontsize=14, fontname="hebo", color=(0.8, 0.0, 0.0))
    page.insert_text((MARGIN, 110), "Quarterly Market Review: Devices and Services", fontsize=16, fontname="hebo")
    page.insert_text((MARGIN, 135), CHINESE, fontsize=11, fontname="china-s")
    paragraphs = [" ".join(SENTENCES[(p * 3 + k) % len(SENTENCES)] for k in range(5)) for p in range(12)]
    box = pymupdf.Rect(MARGIN, BODY_TOP, A4[0] - MARGIN, BODY_BOTTOM)
    while True:  # as many paragraphs as fill the body box
        shape = page.new_shape()
        rest = shape.insert_textbox(box, "\n".join(paragraphs), fontsize=9, fontname="helv", lineheight=1.25)
        if rest >= 0:
            shape.commit()
            break
        paragraphs.pop()
    page.insert_text((MARGIN, SMALL_Y), SMALL, fontsize=6.5, fontname="helv")
    page.insert_text((MARGIN, 815), "Classification: RESTRICTED   Page 4 of 31", fontsize=9, fontname="helv")
    return doc


def scan_of(doc: pymupdf.Document, dpi: int) -> pymupdf.Document:
    pix = doc[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csRGB, alpha=False)
    out = pymupdf.open()
    page = out.new_page(width=A4[0], height=A4[1])
    page.insert_image(page.rect, pixmap=pix)
    return out


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def body_text(doc: pymupdf.Document) -> str:
    clip = pymupdf.Rect(0, BODY_TOP - 5, A4[0], BODY_BOTTOM + 5)
    return doc[0].get_text("text", clip=clip)


class Recording:
    """Wraps an engine and keeps the raw lines (pixels, text before glued words are split)."""

    def __init__(self, engine: RapidOcrEngine) -> None:
        self.engine, self.name, self.raw = engine, engine.name, []

    def recognize(self, image):  # type: ignore[no-untyped-def]
        self.raw = self.engine.recognize(image)
        return self.raw


def score(result: PageOcr, truth_body: str, raw: list, zoom: float) -> dict[str, object]:
    stamp = any(ln.text.replace(" ", "") == "RESTRICTED" and ln.box[3] < 100 for ln in result.lines)
    footer = any("RESTRICTED" in ln.text and ln.box[1] > 0.9 * A4[1] for ln in result.lines)
    body_lines = [ln.text for ln in result.lines if BODY_TOP - 5 <= ln.box[1] and ln.box[3] <= BODY_BOTTOM + 5]
    ocr_body = "\n".join(body_lines)
    want, got = Counter(tokens(truth_body)), Counter(tokens(ocr_body))
    recall = sum((want & got).values()) / max(1, sum(want.values()))
    a, b = re.sub(r"\s+", "", truth_body), re.sub(r"\s+", "", ocr_body)
    chinese = any(CHINESE[:6] in ln.text.replace(" ", "") for ln in result.lines)
    long_tokens = [t for t in ocr_body.split() if len(t) >= 16 and t.isalpha()]
    small_read = " ".join(ln.text for ln in result.lines if SMALL_Y - 12 <= ln.box[1] <= SMALL_Y + 2)
    small_want = Counter(tokens(SMALL))
    small_recall = sum((small_want & Counter(tokens(small_read))).values()) / sum(small_want.values())
    raw_body = "\n".join(
        ln.text for ln in raw if (BODY_TOP - 5) * zoom <= ln.box[1] and ln.box[3] <= (BODY_BOTTOM + 5) * zoom
    )
    raw_recall = sum((want & Counter(tokens(raw_body))).values()) / max(1, sum(want.values()))
    return {
        "stamp": stamp,
        "footer": footer,
        "chinese": chinese,
        "body_token_recall": round(recall, 4),
        "body_token_recall_unsplit": round(raw_recall, 4),
        "body_char_ratio": round(SequenceMatcher(None, a, b, autojunk=False).ratio(), 4),
        "body_lines": len(body_lines),
        "small_6pt5_token_recall": round(small_recall, 4),
        "glued_16plus_tokens": len(long_tokens),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpi", type=int, nargs="+", default=[100, 150, 200])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default: all cores)")
    ap.add_argument("--backend", nargs="+", default=["onnxruntime", "openvino"],
                    help="engine backends to compare in this run (the first is the baseline)")
    ap.add_argument("--source-dpi", type=int, default=300, help="dpi of the synthetic scan")
    ap.add_argument("--json", action="store_true", help="print one JSON object per dpi")
    args = ap.parse_args()

    doc = build_page()
    truth = body_text(doc)
    scan = scan_of(doc, args.source_dpi)
    rows = []
    for backend in args.backend:
        rows += run(backend, args, scan, truth)
    base = rows[0]["median_s"]
    for row in rows:
        print(f"{row['backend']} {row['dpi']} dpi: {row['median_s']} s, {base / row['median_s']:.2f}x the "
              f"first backend's ({args.backend[0]}) {rows[0]['dpi']} dpi, body_token_recall {row['body_token_recall']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)


def run(backend: str, args: argparse.Namespace, scan: pymupdf.Document, truth: str) -> list[dict[str, object]]:
    engine = Recording(RapidOcrEngine(threads=args.threads, backend=backend))  # type: ignore[arg-type]
    print(f"body: {len(truth.splitlines())} lines, {len(tokens(truth))} tokens", file=sys.stderr)
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    t = time.perf_counter()
    ocr_page(scan[0], engine, mode="full", dpi=72, min_text_chars=0, min_image_fraction=1.0)
    print(f"model load + warm-up at 72 dpi: {time.perf_counter() - t:.2f} s", file=sys.stderr)

    rows = []
    for dpi in args.dpi:
        times, cpu, result = [], [], None
        for _ in range(args.repeat):
            c0 = time.process_time()
            result = ocr_page(scan[0], engine, mode="full", dpi=dpi, min_text_chars=0, min_image_fraction=1.0)
            cpu.append(time.process_time() - c0)
            times.append(result.seconds)
        assert result is not None
        row = {
            "backend": engine.engine.backend,
            "threads": args.threads or "all",
            "dpi": dpi,
            "pixels": f"{round(A4[0] * dpi / 72)}x{round(A4[1] * dpi / 72)}",
            "median_s": round(statistics.median(times), 2),
            "min_s": round(min(times), 2),
            "cpu_s": round(statistics.median(cpu), 2),  # CPU seconds, all threads: less sensitive to load
            "lines": len(result.lines),
            **score(result, truth, engine.raw, dpi / 72.0),
        }
        rows.append(row)
        if args.json:
            print(json.dumps(row))
        else:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
    return rows


if __name__ == "__main__":
    main()
