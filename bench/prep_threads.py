"""Does page preprocessing scale over threads? The processors' image work on 1, 2, ... threads.

    .venv/bin/python bench/prep_threads.py [--data ../shared/data/mmlongbench_dev] [--pages 64]
        [--threads 1,2] [--batch 16] [--rounds 2]

The ingest's encode stage prepares page batches (the processor's resize, rescale and normalise)
on prep threads, not processes (``indexing/encode_stage.py``: the encoder's prefetch, 4 on CUDA).
Threads pay only where the work leaves the GIL: PIL's resampling and numpy's arithmetic do,
Python's per-image bookkeeping does not. This times three processors, built offline from
transformers with the checkpoints' image settings: ColPali's ``SiglipImageProcessor`` (every page
to 448 x 448), ColQwen2's ``Qwen2VLImageProcessor`` (a page at its own aspect, at most 768 merged
tokens: colqwen2's ``max_pixels``, 28 x 28 pixels a token) and ColSmol's
``Idefics3ImageProcessor`` (512 px tiles and a thumbnail), on the same pages rendered as the
ingest renders the model image.

Baseline in the same run: one thread. Each thread count takes batches of ``--batch`` pages from
a shared list; printed: pages a second, and the ratio to one thread (perfect scaling: the thread
count, up to the cores).

ColSmol's page preparation is also timed as its encoder runs it, with the processor's text and
tokenizer (``ColIdefics3Processor.process_images``, SmolVLM's image settings, the tiny offline
tokenizer), against ``models/idefics3_prep`` (the same inputs, bit for bit, as uint8 tiles and a
table the device applies) and against that path with the table applied on the CPU as well (what
a CPU encoder pays). Each prep thread has its own processor copy, made before the clock starts.
Rounds alternate the order of the paths and of the thread counts; the last line is the uint8
path's pages a second over the processor's on each thread count, medians of the same run:

    nice -n 10 .venv/bin/python bench/prep_threads.py --only colidefics3 --pages 64 --rounds 3

``--gil SECONDS`` measures instead what page preparation and the ingesting thread (parse, BM25
weights, points: Python work holding the GIL) do to each other, on a machine with cores to
spare: the main thread counts in a pure-Python loop busy ``--duty`` of the time (the rest
asleep), for SECONDS alone, then while one thread prepares batches without a pause, then alone
again. The paths are the encoders' own (``models/page_prep``, the full architectures' processors
with the tests' tiny tokenizers): on the thread itself, and handed by the thread to one prep
process (``models/prep_processes``, RAGSPINE_PREP_WORKERS). Printed per path and duty: the pages
a second prepared beside the loop against alone (a thread that leaves the GIL for C code must
win it back from a thread that holds it, at every return), and the share of the loop's work
taken. Run it on 2 cores or more, so that the two threads need not share a core::

    .venv/bin/python bench/prep_threads.py --gil 4 --pages 32 --batch 4 --rounds 2
"""

from __future__ import annotations

import argparse
import copy
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
#: colqwen2-v1.0's processor: at most 768 visual tokens of 28 x 28 pixels.
QWEN_MAX_PIXELS = 768 * 28 * 28


def processors() -> dict[str, Any]:
    from transformers import Idefics3ImageProcessor, Qwen2VLImageProcessor, SiglipImageProcessor

    siglip = SiglipImageProcessor(size={"height": 448, "width": 448})
    qwen = Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=QWEN_MAX_PIXELS, patch_size=14, merge_size=2)
    # SmolVLM-256M's (ColSmol): the page brought to 2,048 px long, split into 512 px tiles plus a
    # global 512 px thumbnail (models.testing.colidefics3_parts("full") builds the same); one
    # list of images per page, as ColIdefics3's processor passes them.
    idefics = Idefics3ImageProcessor(size={"longest_edge": 2048}, max_image_size={"longest_edge": 512})
    return {
        "colpali (Siglip, 448 x 448)": lambda batch: siglip(images=batch, return_tensors="np"),
        "colqwen2 (Qwen2-VL, <= 768 tokens)": lambda batch: qwen(images=batch, return_tensors="np"),
        "colidefics3 (Idefics3, 512 px tiles)": lambda batch: idefics(images=[[im] for im in batch],
                                                                      return_tensors="np"),
    }


#: The ColSmol paths compared on the last line: the uint8 tiles over the processor.
IDEFICS_PROCESSOR = "colidefics3 processor (ColIdefics3Processor.process_images)"
IDEFICS_TILES = "colidefics3 uint8 tiles (models/idefics3_prep), table on the device"
IDEFICS_TILES_CPU = "colidefics3 uint8 tiles, table applied on the CPU too"


def idefics3_paths(threads: int) -> dict[str, Callable[[list[Any]], Any]]:
    """ColSmol's page preparation as its encoder runs it: the processor, and the uint8 tiles
    (with the table applied on the device, which is not timed, or on the CPU). ``threads``
    processor copies are made now: a prep thread takes one for a batch (fast tokenizers are not
    shared between threads), as the encoder's prep threads each keep their own."""
    import torch

    from ragspine.models.idefics3_prep import Idefics3Tiles
    from ragspine.models.testing import colidefics3_parts

    _, proc = colidefics3_parts("full")  # SmolVLM-256M's image settings, tiny tokenizer
    tiles = Idefics3Tiles.for_processor(proc)
    if tiles is None:
        raise SystemExit("the uint8 path does not reproduce this processor (see the log)")
    copies: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for _ in range(threads):
        copies.put(copy.deepcopy(proc))

    def with_copy(fn: Callable[[Any, list[Any]], Any]) -> Callable[[list[Any]], Any]:
        def run(batch: list[Any]) -> Any:
            own = copies.get()
            try:
                return fn(own, batch)
            finally:
                copies.put(own)

        return run

    return {
        IDEFICS_PROCESSOR: with_copy(lambda p, batch: p.process_images(batch)),
        IDEFICS_TILES: with_copy(tiles.prepare),
        IDEFICS_TILES_CPU: with_copy(
            lambda p, batch: tiles.model_inputs(dict(tiles.prepare(p, batch)), torch.float32)),
    }


def encoder_paths() -> tuple[dict[str, Callable[[list[Any]], Any]], list[Any]]:
    """Each family's page preparation as its encoder runs it, on the calling thread and in one
    prep process; and the process pools, for the caller to close."""
    from ragspine.models import testing
    from ragspine.models.page_prep import ColIdefics3Prep, ColPaliPrep, ColQwen2Prep
    from ragspine.models.prep_processes import PrepProcesses

    cfg, proc = testing.colpali_parts("full")
    preps = {"colpali": ColPaliPrep(proc, "colpali", cfg.vision_config.patch_size)}
    cfg, proc = testing.colqwen2_parts("full")
    preps["colqwen2"] = ColQwen2Prep(proc, "colqwen2", cfg.vision_config.spatial_merge_size)
    _, proc = testing.colidefics3_parts("full")
    preps["colidefics3"] = ColIdefics3Prep(proc, "colidefics3")
    paths: dict[str, Callable[[list[Any]], Any]] = {}
    pools = []
    for name, prep in preps.items():
        pool = PrepProcesses(prep, 1)
        pools.append(pool)
        paths[f"{name} on the thread"] = prep.prepare
        paths[f"{name} in a prep process"] = pool.prepare
    return paths, pools


def pages(data: Path, n: int) -> list[Any]:
    """The model images of the first ``n`` pages, rendered as the ingest renders them."""
    import pymupdf

    from ragspine.config import Settings
    from ragspine.indexing.pdf import render_page_image
    from ragspine.indexing.render import MODEL_IMAGE_MAX_PX

    dpi = Settings().page_render_dpi
    out: list[Any] = []
    for pdf in sorted((data / "documents").glob("*.pdf")):
        with pymupdf.open(pdf) as doc:
            for i in range(1, doc.page_count + 1):
                out.append(render_page_image(doc, i, dpi, MODEL_IMAGE_MAX_PX))
                if len(out) >= n:
                    return out
    return out


def rate(proc: Any, images: list[Any], threads: int, batch: int) -> float:
    """Pages a second preparing every batch of ``images`` with ``proc`` on ``threads`` threads."""
    batches = [images[i : i + batch] for i in range(0, len(images), batch)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(proc, batches):  # each batch dropped once made (ColSmol's: ~50 MB a page)
            pass
    return len(images) / (time.perf_counter() - t0)


def spin(seconds: float, duty: float = 1.0) -> int:
    """Pure-Python work for ``seconds``: additions counted, in slices of 1 ms holding the GIL
    followed, below full ``duty``, by a sleep that leaves the rest of each slice idle (the
    ingesting thread also waits: for renders, the encoder, the writer)."""
    n = 0
    end = time.perf_counter() + seconds
    pause = 0.001 * (1 - duty) / duty if duty < 1 else 0.0
    while True:
        slice_end = time.perf_counter() + 0.001
        while time.perf_counter() < slice_end:
            for _ in range(100):
                n += 1
        if pause:
            time.sleep(pause)
        if time.perf_counter() >= end:
            return n


def gil_share(proc: Any, images: list[Any], batch: int, seconds: float,
              duty: float = 1.0) -> tuple[float, float]:
    """What one thread running ``proc`` on batches of ``images`` without a pause and a Python
    thread at ``duty`` do to each other: (share of the Python loop's work lost beside the prep
    thread, pages a second the prep thread prepared meanwhile). The loop alone is counted before
    and after, and averaged."""
    batches = [images[i : i + batch] for i in range(0, len(images), batch)]
    stop = threading.Event()
    started = threading.Event()
    done = [0]

    def work() -> None:
        i = 0
        while not stop.is_set():
            started.set()
            b = batches[i % len(batches)]
            proc(b)
            done[0] += len(b)
            i += 1

    before = spin(seconds, duty)
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    started.wait()
    t0, d0 = time.perf_counter(), done[0]
    beside = spin(seconds, duty)
    pages, elapsed = done[0] - d0, time.perf_counter() - t0
    stop.set()
    worker.join()
    after = spin(seconds, duty)
    return max(0.0, 1.0 - beside / ((before + after) / 2)), pages / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--batch", type=int, default=16, help="pages a batch (the encoder's batch on CUDA)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="", help="time only the paths whose name contains this")
    ap.add_argument("--gil", type=float, default=0.0, metavar="SECONDS",
                    help="measure the GIL each path holds instead (a window of SECONDS each)")
    ap.add_argument("--duty", default="1,0.5", help="--gil: the Python thread's busy shares")
    args = ap.parse_args()

    from ragspine.config import Settings
    from ragspine.runtimes import limit_threads

    limit_threads(*Settings().thread_rule())  # one BLAS thread, as an ingest runs
    images = pages(args.data, args.pages)
    if not images:
        print(f"no PDFs under {args.data / 'documents'}", file=sys.stderr)
        return 2
    counts = [int(t) for t in args.threads.split(",")]
    pools: list[Any] = []
    if args.gil:
        paths, pools = encoder_paths()
    else:
        paths = {**processors(), **idefics3_paths(max(counts))}
    paths = {name: fn for name, fn in paths.items() if args.only in name}
    print(f"{len(images)} pages ({images[0].size[0]} x {images[0].size[1]} px first), batches of {args.batch}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for fn in paths.values():
        rate(fn, images[: args.batch], 1, args.batch)  # warm: imports, first allocations
    if args.gil:
        duties = [float(d) for d in args.duty.split(",")]
        alone: dict[str, list[float]] = {name: [] for name in paths}
        beside: dict[tuple[str, float], list[tuple[float, float]]] = {}
        for rnd in range(args.rounds):
            for name in (list(paths) if rnd % 2 == 0 else list(paths)[::-1]):
                alone[name].append(rate(paths[name], images, 1, args.batch))
                for d in (duties if rnd % 2 == 0 else duties[::-1]):
                    beside.setdefault((name, d), []).append(
                        gil_share(paths[name], images, args.batch, args.gil, d))
        for name in paths:
            solo = statistics.median(alone[name])
            parts = []
            for d in duties:
                lost = statistics.median(x[0] for x in beside[(name, d)])
                prepared = statistics.median(x[1] for x in beside[(name, d)])
                parts.append(f"beside Python busy {100 * d:.0f} %: it prepares {prepared:.1f} pages/s "
                             f"(x{prepared / solo:.2f}), the Python thread loses {100 * lost:.0f} %")
            print(f"{name}: alone {solo:.1f} pages/s; " + "; ".join(parts))
        for pool in pools:
            pool.close()
        return 0
    got: dict[str, dict[int, list[float]]] = {name: {t: [] for t in counts} for name in paths}
    for rnd in range(args.rounds):  # turns A B, B A: the machine's drift falls on every path alike
        for name in (list(paths) if rnd % 2 == 0 else list(paths)[::-1]):
            for t in (counts if rnd % 2 == 0 else counts[::-1]):
                got[name][t].append(rate(paths[name], images, t, args.batch))
    med = {name: {t: statistics.median(got[name][t]) for t in counts} for name in paths}
    for name in paths:
        one = med[name][counts[0]]
        print(f"{name}: " + "; ".join(
            f"{t} thread{'s' if t > 1 else ''} {med[name][t]:.1f} pages/s (x{med[name][t] / one:.2f})"
            for t in counts))
    if IDEFICS_PROCESSOR in med and IDEFICS_TILES in med:
        for name in (IDEFICS_TILES, IDEFICS_TILES_CPU):
            if name in med:
                print(f"{name} over the processor: " + "; ".join(
                    f"{t} thread{'s' if t > 1 else ''} x{med[name][t] / med[IDEFICS_PROCESSOR][t]:.2f}"
                    for t in counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
