"""How fast the ingest path could feed a page model: ingest with an instant encoder.

    .venv/bin/python bench/ingest_ceiling.py [--data ../shared/data/mmlongbench_dev] [--docs 6]
                                             [--render-workers 0,2] [--batch-size 16]

A GPU encodes ColPali pages at 86-120+ pages/s; everything else ingest does per page (parse,
policy, BM25, render the thumbnail and the model image, pool, write the multivectors) must keep
up or the GPU waits. This replaces the model with one that returns a precomputed
ColPali-shaped page (1,030 x 128 float32, a 32 x 32 patch grid) at no cost, so the rate printed
is the CPU side's ceiling. Baseline in the same run: rendering alone (thumbnail + model image,
one thread, the same pages), the stage that bounds it on these machines; the ratio says how
close ingest comes to it. Rows per ``--render-workers`` value (1 = the helper thread), each with the share of each
ingest stage (:mod:`ragspine.indexing.stages`): the one that bounds it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--docs", type=int, default=6, help="first N PDFs")
    ap.add_argument("--render-workers", default="1,2", help="comma list of RAGSPINE_RENDER_WORKERS values")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    import pymupdf

    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.indexing.pdf import render_page_image, render_page_png
    from ragspine.indexing.stages import add as add_stages
    from ragspine.indexing.stages import summary as stage_summary
    from ragspine.models.modelset import ModelSet

    pdfs = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    if not pdfs:
        print(f"no PDFs under {args.data / 'documents'}", file=sys.stderr)
        return 2
    s0 = Settings()
    # Baseline: rendering alone, as ingest does it per page.
    pages, t0 = 0, time.perf_counter()
    for pdf in pdfs:
        with pymupdf.open(pdf) as doc:
            for n in range(1, doc.page_count + 1):
                render_page_png(doc, n, s0.thumbnail_dpi, s0.thumbnail_max_px)
                render_page_image(doc, n, s0.page_render_dpi, 2048)
                pages += 1
    render_rate = pages / (time.perf_counter() - t0)
    load = os.getloadavg()[0]
    print(f"{len(pdfs)} PDFs, {pages} pages; {os.cpu_count()} CPUs, load average {load:.1f}")
    print(f"baseline, rendering alone (thumbnail {s0.thumbnail_dpi} dpi + model image "
          f"{s0.page_render_dpi} dpi, one thread): {render_rate:.1f} pages/s")
    for workers in (int(w) for w in args.render_workers.split(",")):
        tmp = Path(tempfile.mkdtemp(prefix="ragspine-ceiling-"))
        try:
            settings = Settings(data_dir=tmp, reranker="none", page_batch_size=args.batch_size,
                                render_workers=workers)
            eng = Engine(settings, models=ModelSet(page=InstantEncoder()))
            try:
                eng.create_library("bench")
                n, t0 = 0, time.perf_counter()
                times: dict[str, float] = {}
                for i, pdf in enumerate(pdfs):
                    r = eng.ingest("bench", pdf, {"doc_id": f"d{i}"})
                    n += r.pages_indexed
                    add_stages(times, r.stages)
                rate = n / (time.perf_counter() - t0)
            finally:
                eng.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"ingest with an instant encoder, render_workers={workers}: {rate:.1f} pages/s "
              f"(ratio to rendering alone {rate / render_rate:.2f})")
        print(f"  {stage_summary(times)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
