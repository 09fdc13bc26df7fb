"""Does ingest keep a GPU busy? Ingest with a page model shaped like one, the encoder inline or a
batch ahead (``indexing.encode_stage``), in turns.

    .venv/bin/python bench/encode_overlap.py [--data ../shared/data/mmlongbench_dev] [--docs 6]
        [--device-rates 20,40] [--rounds 2] [--render-workers 2] [--prep-threads 1] [--jobs N] [--muvera-on-encoder]

No GPU is needed: the model stands in for one. Each batch is preprocessed on the CPU by
transformers' ``SiglipImageProcessor`` at 448 x 448 (what ColPali's processor does to a page:
resize, rescale, normalise) on the encoder's prep threads, then "encoded" by sleeping
``pages / rate`` seconds on one device (the files ingested at once take turns), which releases
the GIL as a CUDA forward does, and answered with a
precomputed ColPali-shaped page (1,030 x 128), so the MUVERA first stage and the writes cost what
they cost. ``--device-rates``: the model-only rates to stand in for (ColPali on an H200: 82.6
pages/s, measured in docs/measured.md "GPU anchors"; the 2 development cores render 37-44).

Baseline in the same run: the same ingest with the encoder inline (``ENCODE_AHEAD = 0``: the
ingesting thread waits for each batch's encoding, then builds its points while the device sits
idle), in turns with a batch ahead (1, the default). ``--muvera-on-encoder`` adds a third variant:
a batch ahead with the MUVERA first stage made on the encode thread by ``models.muvera_device``
(torch on the CPU standing in for the GPU, as ``FIRST_STAGE_DEVICES`` allows on CUDA), which
takes it off the ingesting thread. Printed per variant: pages a second of the first phase, its
ratio to the model-only rate (the issue's target on a GPU: 0.6x), the ingesting thread's own
work a page ("points"), the stage shares, and each variant against inline. OCR is off: this
measures the page model's stage, not OCR.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
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

    def __init__(self, rate: float, prep_threads: int, batch_size: int, device: Any = None) -> None:
        from transformers import SiglipImageProcessor

        self.rate = rate
        self.device = device  # a torch device: where MUVERA is made, with FIRST_STAGE_DEVICES
        self.prefetch = prep_threads
        self.batch_size = batch_size
        self.processor = SiglipImageProcessor(size={"height": 448, "width": 448})
        self.page: EncodedPage = InstantEncoder().page
        self._device = threading.Lock()  # one device: two files' encode threads take turns on it

    def _bucket_key(self, image: Any) -> Hashable:
        return 0  # every page becomes the same square, as ColPali's

    def _prepare_pages(self, images: list[Any]) -> Any:
        return self.processor(images=images, return_tensors="np")["pixel_values"]  # (b, 3, 448, 448)

    def _encode_pages(self, prepared: Any) -> list[EncodedPage]:
        with self._device:
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
    ap.add_argument("--jobs", type=int, default=None,
                    help="files at once (default: as ragspine ingest, 2 here; 1: an upload at a time, as a server)")
    ap.add_argument("--muvera-on-encoder", action="store_true",
                    help="a third variant: MUVERA made on the encode thread (torch on the CPU for the device)")
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
    variants = ["inline", "ahead"] + (["ahead, MUVERA on the encode thread"] if args.muvera_on_encoder else [])
    for rate in [float(r) for r in args.device_rates.split(",")]:
        got: dict[str, list[float]] = {v: [] for v in variants}
        for rnd in range(args.rounds):
            for variant in (variants if rnd % 2 == 0 else variants[::-1]):
                encode_stage.ENCODE_AHEAD = 0 if variant == "inline" else 1
                on_encoder = "MUVERA" in variant
                encode_stage.FIRST_STAGE_DEVICES = ("cuda", "cpu") if on_encoder else ("cuda",)
                device = None
                if on_encoder:
                    import torch

                    device = torch.device("cpu")
                enc = DeviceShapedEncoder(rate, args.prep_threads, args.batch_size, device)
                row = ingest(pdfs, ocr="off", workers=args.render_workers, batch_size=args.batch_size, jobs=args.jobs,
                             label=f"rate {rate:g}, {variant}", encoder=enc)
                got[variant].append(row.rate)
                points_ms = 1000 * row.stages.get("points", 0.0) / max(row.pages, 1)
                print(f"model {rate:g} pages/s, {variant}: {row.rate:5.1f} pages/s (x{row.rate / rate:.2f} the "
                      f"model's rate), points {points_ms:.1f} ms a page; {row.pages} pages, {row.jobs} files at once")
                print(f"    {summary(row.stages)}")
        med = {v: float(np.median(got[v])) for v in variants}
        print(f"model {rate:g} pages/s, medians: " + "; ".join(
            f"{v} {med[v]:.1f} pages/s (x{med[v] / rate:.2f} the model's rate, x{med[v] / med['inline']:.2f} inline)"
            for v in variants))
    encode_stage.FIRST_STAGE_DEVICES = ("cuda",)
    encode_stage.ENCODE_AHEAD = 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
