"""Does ingest keep a GPU busy? Ingest with a page model shaped like one, the encoder inline or a
batch ahead (``indexing.encode_stage``), in turns.

    .venv/bin/python bench/encode_overlap.py [--data ../shared/data/mmlongbench_dev] [--docs 6]
        [--device-rates 20,40] [--rounds 2] [--render-workers 2] [--prep-threads 1]

No GPU is needed: the model stands in for one. Each batch is preprocessed on the CPU by
transformers' ``SiglipImageProcessor`` at 448 x 448 (what ColPali's processor does to a page:
resize, rescale, normalise) on the encoder's prep threads, then "encoded" by sleeping
``pages / rate`` seconds, which releases the GIL as a CUDA forward does, and answered with a
precomputed ColPali-shaped page (1,030 x 128), so the MUVERA first stage and the writes cost what
they cost. ``--device-rates``: the model-only rates to stand in for (ColPali on an H200: 82.6
pages/s, measured in docs/measured.md "GPU anchors"; the 2 development cores render 37-44).

Baseline in the same run: the same ingest with the encoder inline (``ENCODE_AHEAD = 0``: the
ingesting thread waits for each batch's encoding, then builds its points while the device sits
idle), in turns with a batch ahead (1, the default). Printed per rate: pages a second of the first
phase, its ratio to the model-only rate (the issue's target on a GPU: 0.6x), the stage shares, and
ahead / inline. OCR is off: this measures the page model's stage, not OCR.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_ceiling import DEFAULT_DATA, InstantEncoder, ingest  # noqa: E402

from ragspine.models.base import BasePageEncoder, EncodedPage  # noqa: E402


class DeviceShapedEncoder(BasePageEncoder):
    """A page model with a GPU's shape: real preprocessing on the CPU, a forward that sleeps."""

    model_id, revision, dim = "bench/device-shaped-colpali", "0", 128

    def __init__(self, rate: float, prep_threads: int, batch_size: int) -> None:
        from transformers import SiglipImageProcessor

        self.rate = rate
        self.prefetch = prep_threads
        self.batch_size = batch_size
        self.processor = SiglipImageProcessor(size={"height": 448, "width": 448})
        self.page: EncodedPage = InstantEncoder().page

    def _bucket_key(self, image: Any) -> Hashable:
        return 0  # every page becomes the same square, as ColPali's

    def _prepare_pages(self, images: list[Any]) -> Any:
        return self.processor(images=images, return_tensors="np")["pixel_values"]  # (b, 3, 448, 448)

    def _encode_pages(self, prepared: Any) -> list[EncodedPage]:
        time.sleep(len(prepared) / self.rate)  # the device's time; the GIL is free meanwhile
        return [self.page for _ in range(len(prepared))]

    def _encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [self.page.vectors[:20] for _ in texts]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--docs", type=int, default=6, help="first N PDFs")
    ap.add_argument("--device-rates", default="20,40", help="comma list of model-only pages/s to stand in for")
    ap.add_argument("--rounds", type=int, default=2, help="turns of inline and ahead per rate (ABBA...)")
    ap.add_argument("--render-workers", type=int, default=2)
    ap.add_argument("--prep-threads", type=int, default=1, help="the encoder's prefetch threads (4 on CUDA)")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    from ragspine.config import Settings
    from ragspine.indexing import encode_stage
    from ragspine.indexing.stages import summary
    from ragspine.runtimes import limit_threads

    limit_threads(*Settings().thread_rule())  # as ragspine ingest sizes its pools
    pdfs = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    if not pdfs:
        print(f"no PDFs under {args.data / 'documents'}", file=sys.stderr)
        return 2
    print(f"{len(pdfs)} PDFs; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"render workers {args.render_workers}, prep threads {args.prep_threads}, batches of {args.batch_size}")
    for rate in [float(r) for r in args.device_rates.split(",")]:
        got: dict[int, list[float]] = {0: [], 1: []}
        for rnd in range(args.rounds):
            for ahead in ((0, 1) if rnd % 2 == 0 else (1, 0)):
                encode_stage.ENCODE_AHEAD = ahead
                enc = DeviceShapedEncoder(rate, args.prep_threads, args.batch_size)
                row = ingest(pdfs, ocr="off", workers=args.render_workers, batch_size=args.batch_size, jobs=None,
                             label=f"rate {rate:g}, ahead {ahead}", encoder=enc)
                got[ahead].append(row.rate)
                print(f"model {rate:g} pages/s, {'a batch ahead' if ahead else 'inline      '}: {row.rate:5.1f} pages/s "
                      f"(x{row.rate / rate:.2f} the model's rate), {row.jobs} files at once")
                print(f"    {summary(row.stages)}")
        inline, ahead_ = float(np.median(got[0])), float(np.median(got[1]))
        print(f"model {rate:g} pages/s: medians inline {inline:.1f}, ahead {ahead_:.1f} pages/s "
              f"(x{inline / rate:.2f} -> x{ahead_ / rate:.2f} the model's rate; ahead / inline x{ahead_ / inline:.2f})")
    encode_stage.ENCODE_AHEAD = 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
