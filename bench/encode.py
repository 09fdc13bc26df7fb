"""Page-encoding throughput and query-encoding latency, per page-model architecture.

One command on a GPU box (after ``make setup-dev`` with the gpu extra)::

    .venv/bin/python bench/encode.py                    # all four architectures
    .venv/bin/python bench/encode.py --arch colpali,colqwen2 --pages 512 --batch-size 32
    .venv/bin/python bench/encode.py --model vidore/colqwen2-v1.0 --model /models/colsmol
    .venv/bin/python bench/encode.py --compile          # torch.compile the model first

Weights. ``--model NAME_OR_PATH`` (repeatable) benchmarks real checkpoints (a folder written by
``save_pretrained``, or a Hub id already in the Hugging Face cache); the architecture is
detected from the checkpoint. Otherwise each ``--arch`` is built from its config alone with
random weights: weights do not change the arithmetic. ``--size full`` (the default on CUDA) is
the real architecture - PaliGemma-3B at 448 px (1,024 image tokens), Qwen2-VL-2B and
Qwen2.5-VL-3B at colqwen2's 768 visual tokens max, SmolVLM-256M with 512 px tiles - in bf16.
``--size tiny`` (the default without CUDA) is the 2-layer test models: those figures measure the
pipeline's overhead, not the models, and the output says so.

Measured per architecture, on pages rendered from the PDFs in ``--data`` (PyMuPDF, ``--dpi``):

- render: PyMuPDF ms/page;
- encode: ``encode_pages`` on all pages (preprocessing, size-bucketed batches of
  ``--batch-size``, forward, padding removal, NaN check, copy to host): pages/s;
- end to end: render + encode, one after the other: pages/s (the ingest path's arithmetic);
- ingest: the real ingest path, ``Engine.ingest`` of the PDFs into a fresh embedded store with
  this encoder, as many files at once as ``ragspine ingest`` reads (parse, RESTRICTED policy,
  BM25, renders ahead, the encode stage a batch ahead of the points, the MUVERA first stage,
  thumbnails, versioned write): pages/s from PDF to searchable, and the stage line saying what
  bounds it;
- model only: the model's forward on one preprocessed batch already on the device, repeated:
  pages/s - the ceiling the end-to-end rate is compared with;
- ``--prep-workers N``: the pages prepared in N processes instead of the prep threads (the
  encode and ingest rates then say what the hand-over costs or saves);
- query: ``encode_queries`` of one query at a time (p50/p95 ms), and queries/s in batches of 32:
  first on transformers' plain forward, then on the path ``--query-graphs`` sets up in the same
  run (``auto``: CUDA graphs on a CUDA device, ``eager``: the same static shapes without graphs,
  ``off``: none), with the time its set-up took and what ``query_path`` says.

The H200 anchors of docs/measured.md (plain transformers forward, bf16, SDPA) and the target
rates are printed beside the GPU figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # encode_steps, beside this script
from encode_steps import page_steps, query_steps, split_windows, sync  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
ARCHS = ("colpali", "colqwen2", "colqwen2_5", "colidefics3")
#: Anchors on one H200 (docs/measured.md: plain forward, random weights, bf16, SDPA). The targets
#: these figures are judged against are bench/gpu_table.py's.
H200_ANCHOR_PAGES_S = {"colpali": 86.0, "colqwen2": 44.5}
FALLBACK_QUERIES = [
    "What share of revenue came from Asia in 2019?",
    "Which chart shows quarterly operating margin?",
    "How many respondents answered yes to question 4?",
    "net income trend",
]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def render_pages(data: Path, n: int, dpi: int) -> tuple[list[Any], float]:
    """Up to ``n`` pages rendered from the PDFs under ``data`` (cycled if there are fewer)."""
    import pymupdf
    from PIL import Image

    pdfs = sorted((data / "documents").glob("*.pdf")) if (data / "documents").is_dir() else []
    pdfs = pdfs or sorted(data.glob("*.pdf"))
    images: list[Any] = []
    t0 = time.perf_counter()
    for pdf in pdfs:
        with pymupdf.open(pdf) as doc:
            for page in doc:
                pix = page.get_pixmap(dpi=dpi, alpha=False)
                images.append(Image.frombytes("RGB", (pix.width, pix.height), pix.samples))
                if len(images) >= n:
                    break
        if len(images) >= n:
            break
    elapsed = time.perf_counter() - t0
    if not images:  # no PDFs: a synthetic A4 page with text and a bar chart
        images, elapsed = _synthetic_pages(n, dpi)
    rendered = len(images)
    while len(images) < n:
        images.append(images[len(images) % rendered])
    return images, elapsed / rendered


def _synthetic_pages(n: int, dpi: int) -> tuple[list[Any], float]:
    import pymupdf
    from PIL import Image

    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((72, 100), "Quarterly revenue by region", fontsize=18)
    for i, h in enumerate((120, 200, 160, 260)):
        page.draw_rect(pymupdf.Rect(100 + 80 * i, 600 - h, 150 + 80 * i, 600), fill=(0.2, 0.4, 0.8))
    t0 = time.perf_counter()
    pix = page.get_pixmap(dpi=dpi, alpha=False)
    img = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    return [img] * n, time.perf_counter() - t0


def load_queries(data: Path, n: int) -> list[str]:
    f = data / "queries.jsonl"
    qs = (
        [json.loads(line)["text"] for line in f.open(encoding="utf-8") if line.strip()]
        if f.is_file()
        else []
    )
    qs = qs or FALLBACK_QUERIES
    return [qs[i % len(qs)] for i in range(n)]


def build_encoder(spec: str, args: argparse.Namespace, tmp: Path) -> tuple[Any, str]:
    """``spec`` is an architecture name (random weights) or a checkpoint (``--model``)."""
    from ragspine.models import load_page_encoder, testing
    from ragspine.models._runtime import resolve_device, resolve_dtype
    from ragspine.models._source import ModelSource
    from ragspine.models.colpali import FAMILIES

    if spec not in ARCHS:
        enc = load_page_encoder(
            spec,
            device=args.device,
            dtype=args.dtype,
            attn_implementation=args.attn,
            batch_size=args.batch_size,
            prep_workers=args.prep_workers,
            query_graphs="off",  # the plain forward first; ready_query_graphs later, as for --arch
        )
        return enc, f"{enc.family} ({spec}, real weights)"
    dev = resolve_device(args.device)
    size = args.size or ("full" if dev.type == "cuda" else "tiny")
    dt = resolve_dtype(args.dtype, dev)
    model, processor = testing.random_page_model(spec, size, device=dev, dtype=dt)
    if args.attn:
        model.set_attn_implementation(args.attn)
    source = ModelSource(model_id=f"random/{spec}-{size}", revision="random-init", path=tmp)
    enc = FAMILIES[spec](
        model, processor, source=source, device=dev, dtype=dt, batch_size=args.batch_size
    )
    if args.prep_workers >= 2:  # as load_page_encoder sets them up (RAGSPINE_PREP_WORKERS)
        from ragspine.models.prep_processes import PrepProcesses

        enc.prep_processes = PrepProcesses(enc.prep, args.prep_workers, dt if enc.pin_memory else None)
    return enc, f"{spec} ({size} architecture, random weights)"


def ingest_rate(enc: Any, args: argparse.Namespace, n: int) -> tuple[int, float, int, str]:
    """Pages, seconds, files at once and the stage line of ``Engine.ingest`` of whole PDFs from
    ``--data`` until ``n`` pages are in, with ``enc`` as the page model (a fresh embedded store
    per run), as many files at once as ``ragspine ingest`` reads (``Engine.ingest_jobs``)."""
    from concurrent.futures import ThreadPoolExecutor

    import pymupdf

    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.indexing.stages import add as add_stages
    from ragspine.indexing.stages import summary
    from ragspine.models.modelset import ModelSet

    data = Path(args.data)
    pdfs = sorted((data / "documents").glob("*.pdf")) if (data / "documents").is_dir() else []
    pdfs = pdfs or sorted(data.glob("*.pdf"))
    chosen, total = [], 0
    for pdf in pdfs:  # the first PDFs holding n pages
        if total >= n:
            break
        with pymupdf.open(pdf) as doc:
            total += doc.page_count
        chosen.append(pdf)
    if not chosen:
        return 0, 0.0, 0, ""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), page_batch_size=enc.batch_size, page_render_dpi=args.dpi,
                            reranker="none")
        eng = Engine(settings, models=ModelSet(page=enc))
        try:
            eng.create_library("bench")
            jobs = eng.ingest_jobs(len(chosen))
            stages: dict[str, float] = {}

            def one(pdf: Path) -> Any:
                doc_id = "d" + re.sub(r"[^A-Za-z0-9._-]", "_", pdf.stem)[:100]
                return eng.ingest("bench", pdf, {"doc_id": doc_id})

            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(one, chosen))
            seconds = time.perf_counter() - t0
            for r in results:
                add_stages(stages, r.stages)
            return sum(r.pages_indexed for r in results), seconds, jobs, summary(stages)
        finally:
            eng.close()


def query_latency(enc: Any, queries: list[str]) -> tuple[list[float], float]:
    """``encode_queries`` of one query at a time (ms each), then the seconds of all of them in
    batches of 32 (the batches past the static shapes take the plain forward)."""
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        enc.encode_queries([q])
        lat.append((time.perf_counter() - t0) * 1000)
    size, enc.query_batch_size = enc.query_batch_size, 32
    t0 = time.perf_counter()
    enc.encode_queries(queries)
    seconds = time.perf_counter() - t0
    enc.query_batch_size = size
    return lat, seconds


def bench_one(
    spec: str, args: argparse.Namespace, images: list[Any], render_s: float, queries: list[str]
) -> dict[str, Any]:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        enc, label = build_encoder(spec, args, Path(tmp))
        load_s = time.perf_counter() - t0
    dev = enc.device
    if args.prefetch is not None:
        enc.prefetch = args.prefetch
    if args.compile:
        enc.model = torch.compile(enc.model)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    bs = enc.batch_size
    # Warm-up (and compile): two batches of pages, a few queries.
    t0 = time.perf_counter()
    for _ in range(3 if args.compile else 1):
        enc.encode_pages(images[: 2 * bs if dev.type == "cuda" else bs])
        enc.encode_queries(queries[:4])
    warm_s = time.perf_counter() - t0

    # Encode all pages through the public path.
    sync(dev)
    t0 = time.perf_counter()
    pages = enc.encode_pages(images)
    sync(dev)
    encode_s = time.perf_counter() - t0
    n = len(images)
    tokens = statistics.mean(p.n_tokens for p in pages)

    # Model-only: one preprocessed batch (the largest bucket's size) on the device, repeated.
    same = [im for im in images if enc._bucket_key(im) == enc._bucket_key(images[0])][:bs]
    batch, _ = enc._prepare_pages(same)
    inputs = enc._model_inputs(batch)  # on the device; ColSmol's uint8 tiles normalised there
    with torch.inference_mode():
        sync(dev)
        t0 = time.perf_counter()
        enc.model(**inputs, **enc.forward_kwargs)
        sync(dev)
        first_s = time.perf_counter() - t0
        reps = max(1, min(20, int(5.0 / max(first_s, 1e-3))))  # about 5 s of repeats
        t0 = time.perf_counter()
        for _ in range(reps):
            enc.model(**inputs, **enc.forward_kwargs)
        sync(dev)
    forward_s = (time.perf_counter() - t0) / reps

    split = split_windows(enc, same, inputs, reps) if getattr(enc, "batched_windows", 0) else None
    steps = {**page_steps(enc, same), **query_steps(enc, queries)}  # (bench/encode_steps.py)

    # Queries: one at a time (latency), then batches of 32 (throughput); the plain forward first,
    # then the static-shape path (CUDA graphs on a GPU) in the same run.
    plain_lat, _ = query_latency(enc, queries)
    graphs_s = None
    if args.query_graphs != "off" and (dev.type == "cuda" or args.query_graphs == "eager"):
        t0 = time.perf_counter()
        enc.ready_query_graphs(capture=args.query_graphs == "auto")
        graphs_s = time.perf_counter() - t0
    lat, qbatch_s = query_latency(enc, queries)

    ingest_pages, ingest_s, ingest_jobs, ingest_stages = ingest_rate(enc, args, n)

    result = {
        "arch": label,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "dtype": str(enc.dtype).removeprefix("torch."),
        "batch_size": bs,
        "prefetch_threads": enc.prefetch,
        "prep_processes": enc.prep_processes.workers if enc.prep_processes is not None else 0,
        "pages": n,
        "tokens_per_page": round(tokens, 1),
        "load_s": round(load_s, 1),
        "warmup_s": round(warm_s, 1),
        "render_ms_per_page": round(render_s * 1000, 2),
        "encode_pages_s": round(n / encode_s, 2),
        "end_to_end_pages_s": round(n / (encode_s + render_s * n), 2),
        "ingest_pages": ingest_pages,
        "ingest_pages_s": round(ingest_pages / ingest_s, 2) if ingest_s else None,
        "ingest_files_at_once": ingest_jobs,
        "ingest_stages": ingest_stages,
        "model_only_pages_s": round(len(same) / forward_s, 2),
        "query_ms_p50": round(pct(lat, 50), 2),
        "query_ms_p95": round(pct(lat, 95), 2),
        "query_ms_p50_plain": round(pct(plain_lat, 50), 2),
        "query_ms_p95_plain": round(pct(plain_lat, 95), 2),
        "query_path": enc.query_path,
        "query_graphs_setup_s": None if graphs_s is None else round(graphs_s, 2),
        "queries_s_batched": round(len(queries) / qbatch_s, 1),
    }
    result.update(steps)
    if split is not None:
        result["model_only_split_windows_pages_s"] = round(len(same) / split[0], 2)
        result["windows_min_cosine"] = round(split[1], 6)
    if dev.type == "cuda":
        result["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 1)
    enc.close()
    del enc, pages, inputs
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default=",".join(ARCHS), help=f"comma list of {', '.join(ARCHS)}")
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        help="real checkpoint (folder or cached Hub id); repeatable; replaces --arch",
    )
    ap.add_argument(
        "--size",
        choices=("tiny", "full"),
        default=None,
        help="random-weight size (default: full on CUDA, tiny otherwise)",
    )
    ap.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="folder of PDFs (or with documents/ and queries.jsonl)",
    )
    ap.add_argument(
        "--pages",
        type=int,
        default=None,
        help="pages to encode (default 256 on CUDA, 32 otherwise)",
    )
    ap.add_argument("--dpi", type=int, default=96)
    ap.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="pages per batch (default 32 on CUDA, 4 otherwise)",
    )
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 elsewhere")
    ap.add_argument(
        "--attn", default=None, help="attention implementation (default: transformers' own, SDPA)"
    )
    ap.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="batches preprocessed ahead on helper threads (default: 4 on CUDA, 0 on CPU)",
    )
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (slow warm-up)")
    ap.add_argument(
        "--prep-workers",
        type=int,
        default=0,
        help="pages prepared in this many processes (RAGSPINE_PREP_WORKERS; 0 or 1: the prep threads)",
    )
    ap.add_argument(
        "--query-graphs",
        choices=("auto", "eager", "off"),
        default="auto",
        help="queries after the plain forward's: auto = CUDA graphs on a CUDA device; eager = the "
        "same static shapes without graphs (any device); off = plain only",
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()

    import torch

    from ragspine.models._runtime import resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = resolve_device(args.device)
    cuda = dev.type == "cuda"
    args.pages = args.pages or (256 if cuda else 32)
    args.batch_size = args.batch_size or (32 if cuda else 4)
    specs = args.model or [a.strip() for a in args.arch.split(",") if a.strip()]
    bad = [s for s in specs if not args.model and s not in ARCHS]
    if bad:
        ap.error(f"unknown --arch {bad}; choose from {', '.join(ARCHS)}")
    size = args.size or ("full" if cuda else "tiny")
    print(
        f"device: {dev}" + (f" ({torch.cuda.get_device_name(dev)})" if cuda else ""),
        f"torch {torch.__version__}, threads {torch.get_num_threads()}",
    )
    if not args.model and size == "tiny":
        print(
            "NOTE: tiny 2-layer random models (no GPU, or --size tiny): these figures are the "
            "pipeline's overhead (render, preprocessing, batching, copies), not real model speed."
        )
    images, render_s = render_pages(args.data, args.pages, args.dpi)
    queries = load_queries(args.data, args.queries)
    print(
        f"{len(images)} pages at {args.dpi} dpi ({images[0].size[0]}x{images[0].size[1]} px first), "
        f"render {render_s * 1000:.1f} ms/page; {len(queries)} queries"
    )

    results = []
    for spec in specs:
        print(f"\n== {spec}", flush=True)
        r = bench_one(spec, args, images, render_s, queries)
        results.append(r)
        for k, v in r.items():
            print(f"  {k:22s} {v}")
        arch = spec if spec in ARCHS else r["arch"].split()[0]
        if cuda and size == "full" and arch in H200_ANCHOR_PAGES_S:
            print(f"  {'H200 anchor (forward)':22s} {H200_ANCHOR_PAGES_S[arch]} pages/s")
        if args.json:  # after each architecture: a run stopped at its time limit keeps the ones done
            tmp = args.json.with_name(args.json.name + ".tmp")  # whole or not at all
            tmp.write_text(json.dumps(results, indent=2))
            os.replace(tmp, args.json)

    print(
        "\n| arch | ingest pages/s | end-to-end pages/s | encode pages/s | model-only pages/s | ingest / model-only | query p50 ms (plain) | tokens/page |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['arch']} | {r['ingest_pages_s']} | {r['end_to_end_pages_s']} | {r['encode_pages_s']} | "
            f"{r['model_only_pages_s']} | "
            f"{round(r['ingest_pages_s'] / r['model_only_pages_s'], 2) if r['ingest_pages_s'] else '-'} | "
            f"{r['query_ms_p50']} ({r['query_ms_p50_plain']}) | {r['tokens_per_page']} |"
        )
    for r in results:
        ratio = r["query_ms_p50"] / r["query_ms_p50_plain"] if r["query_ms_p50_plain"] else float("nan")
        print(f"{r['arch']}: queries {r['query_path']}; p50 {r['query_ms_p50']} ms against "
              f"{r['query_ms_p50_plain']} plain (x{ratio:.2f}), set up in {r['query_graphs_setup_s']} s")
    steps = ("processor", "to_device", "forward", "to_host")
    print("\n| arch | a page: " + " | ".join(f"{k} ms" for k in steps) + " | one query: "
          + " | ".join(f"{k} ms" for k in steps) + " |")
    print("|---" * (1 + 2 * len(steps)) + "|")
    for r in results:
        print(f"| {r['arch']} | " + " | ".join(str(r[f"page_{k}_ms"]) for k in steps) + " | "
              + " | ".join(str(r[f"query_{k}_ms"]) for k in steps) + " |")
    for r in results:
        if "model_only_split_windows_pages_s" in r:
            print(f"{r['arch']}: vision spans batched {r['model_only_pages_s']} model-only pages/s against "
                  f"{r['model_only_split_windows_pages_s']} split one call a span "
                  f"(x{r['model_only_pages_s'] / r['model_only_split_windows_pages_s']:.2f}); "
                  f"lowest token cosine between the two {r['windows_min_cosine']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
