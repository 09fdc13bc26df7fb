"""OCR engine throughput on a GPU against the CPU, on the images bench/ocr.py's pages give the engine.

    # here, where the data is: what the engine is asked to read, saved as PNG files
    .venv/bin/python bench/ocr_device.py record OUT_DIR [--docs 6] [--max-pages 60]
    # anywhere (a device machine needs neither pymupdf nor the data): every engine on those images
    python bench/ocr_device.py replay OUT_DIR [--engines cpu:onnxruntime cuda:torch] [--json F]

``record`` walks the same documents as bench/ocr.py (``choose_documents``: half chart-heavy,
half scanned MMLongBench PDFs) and, for each page the OCR plan reads, saves every image
``ragspine.ocr.ocr_page`` hands to the engine (product settings: auto mode, RAGSPINE_OCR_DPI),
chart and scanned pages alternating up to ``--max-pages``. Nothing is read while recording.

``replay`` loads each engine (``DEVICE:BACKEND``, as ``RapidOcrEngine(device=, backend=)``),
reads every image once to warm it up on the first page's images, then reads them all in order,
timed. Per engine: pages/s and images/s (pages = the recorded pages), seconds inside detection
and recognition (the sessions' calls: on CUDA that includes the copies to and from the device)
and the rest (RapidOCR's pre- and post-processing and ragspine's crop resizing, on the CPU),
lines read, peak GPU memory, and against the first engine (the same-run baseline): the ratio of
pages/s and the share of its lines read with the same text. The first engine reads on every
core of the machine (``threads`` None), as one ingesting process does on the CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class Recorder:
    """An OcrEngine that saves what it is asked to read and reads nothing."""

    name = "recorder"

    def __init__(self, out: Path, fmt: str) -> None:
        self.out = out
        self.fmt = fmt
        self.page = ""
        self.saved: list[dict[str, Any]] = []

    def recognize(self, image: Any) -> list:
        from PIL import Image

        name = f"{len(self.saved):04d}.{self.fmt}"
        if self.fmt == "jpg":  # 4x smaller than PNG, for a transfer with a size limit
            Image.fromarray(image).save(self.out / name, quality=92)
        else:
            Image.fromarray(image).save(self.out / name, optimize=True)
        self.saved.append({"file": name, "page": self.page, "h": int(image.shape[0]), "w": int(image.shape[1])})
        return []


def record(args: argparse.Namespace) -> int:
    import pymupdf

    from ocr import DEFAULT_DATA, choose_documents
    from ragspine.config import Settings
    from ragspine.indexing.ocr import OcrOptions
    from ragspine.ocr import ocr_page

    docs_dir = (args.data or DEFAULT_DATA) / "documents"
    if not docs_dir.is_dir():
        print(f"no data at {docs_dir} (../shared/data is only on development machines)", file=sys.stderr)
        return 2
    opts = OcrOptions.from_settings(Settings())
    plans, chosen = choose_documents(docs_dir, opts, args.docs)
    by_kind: dict[str, list[tuple[str, int]]] = {"chart": [], "scanned": []}
    for name in chosen:
        for number, kind in plans[name]:
            if kind in by_kind:
                by_kind[kind].append((name, number))
    # Chart and scanned pages alternating, so that a short record still has both kinds.
    order = [x for pair in zip(by_kind["chart"], by_kind["scanned"]) for x in pair]
    order += by_kind["chart"][len(order) // 2:] + by_kind["scanned"][len(order) // 2:]
    order = order[: args.max_pages]
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, args.format)
    kinds = {f"{n}#p{p}": k for n in chosen for p, k in plans[n]}
    for name, number in order:
        doc = pymupdf.open(docs_dir / name)
        rec.page = f"{name}#p{number}"
        ocr_page(doc.load_page(number - 1), rec, mode=opts.mode, dpi=opts.dpi,  # type: ignore[arg-type]
                 min_text_chars=opts.min_text_chars, min_image_fraction=opts.min_image_fraction, band=opts.band)
        doc.close()
    manifest = {"dpi": opts.dpi, "mode": opts.mode, "pages": {p: kinds[p] for p in dict.fromkeys(r["page"] for r in rec.saved)},
                "images": rec.saved}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"{len(manifest['pages'])} pages, {len(rec.saved)} images at {opts.dpi} dpi, {size / 2**20:.1f} MiB in {args.out}")
    return 0


def _timed(fn: Any, spent: dict[str, float], key: str, seen: list | None = None) -> Any:
    def call(*a: Any, **k: Any) -> Any:
        if seen is not None:
            seen.append((key, tuple(a[0].shape)))
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return call


def replay(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from ragspine.ocr import RapidOcrEngine

    if not (args.dir / "manifest.json").is_file():
        print(f"no {args.dir / 'manifest.json'}: make the folder with `bench/ocr_device.py record`", file=sys.stderr)
        return 2
    manifest = json.loads((args.dir / "manifest.json").read_text())
    images = [np.asarray(Image.open(args.dir / r["file"]).convert("RGB")) for r in manifest["images"]]
    pages = [r["page"] for r in manifest["images"]]
    n_pages = len(set(pages))
    kinds = manifest["pages"]
    print(f"{n_pages} pages ({sum(k == 'chart' for k in kinds.values())} chart, "
          f"{sum(k == 'scanned' for k in kinds.values())} scanned), {len(images)} images at {manifest['dpi']} dpi; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[dict[str, Any]] = []
    readings: dict[str, list[list[str]]] = {}
    for spec in args.engines:
        device, _, backend = spec.partition(":")
        try:
            t = time.perf_counter()
            engine = RapidOcrEngine(device=device, backend=backend or "auto")  # type: ignore[arg-type]
            ocr = engine._load()
            load_s = time.perf_counter() - t
        except Exception as exc:  # one engine that cannot start costs its row, not the others
            print(json.dumps({"engine": spec, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        if args.rec_batch:
            ocr.text_rec.rec_batch_num = args.rec_batch
        spent = {"detection": 0.0, "recognition": 0.0}
        seen: list[tuple[str, tuple[int, ...]]] = []  # (model, input shape), in call order
        ocr.text_det.infer = _timed(ocr.text_det.infer, spent, "detection", seen)
        ocr.text_rec.session = _timed(ocr.text_rec.session, spent, "recognition", seen)
        torch = importlib.import_module("torch") if engine.device == "cuda" else None  # for its GPU memory
        first = [im for im, p in zip(images, pages) if p == pages[0]]
        for im in first:  # warm-up: CUDA context, cuDNN handles, first allocations
            engine.recognize(im)
        if torch is not None:
            torch.cuda.reset_peak_memory_stats()
        spent.update(detection=0.0, recognition=0.0)
        got: list[list[str]] = []
        calls: list[list[tuple[str, tuple[int, ...]]]] = []
        t = time.perf_counter()
        for im in images:
            seen.clear()
            got.append([ln.text for ln in engine.recognize(im)])
            calls.append(list(seen))
        wall = time.perf_counter() - t
        if not (args.dir / "shapes.json").exists():  # what the models-only run replays
            (args.dir / "shapes.json").write_text(json.dumps(
                {"pages": n_pages, "other_s": round(wall - spent["detection"] - spent["recognition"], 2),
                 "engine": spec, "load_avg": round(os.getloadavg()[0], 2), "calls": calls}))
        row: dict[str, Any] = {
            "engine": spec, "name": engine.name, "rec_batch": ocr.text_rec.rec_batch_num, "load_s": round(load_s, 2),
            "pages": n_pages, "images": len(images), "wall_s": round(wall, 2),
            "pages_per_s": round(n_pages / wall, 2), "images_per_s": round(len(images) / wall, 2),
            "detection_s": round(spent["detection"], 2), "recognition_s": round(spent["recognition"], 2),
            "other_s": round(wall - spent["detection"] - spent["recognition"], 2),
            "lines": sum(map(len, got)), "load_avg": round(os.getloadavg()[0], 2)}
        if torch is not None:
            row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        if rows:
            base, base_lines = rows[0], readings[rows[0]["engine"]]
            row["speedup_vs_first"] = round(row["pages_per_s"] / base["pages_per_s"], 2)
            same = sum(a == b for x, y in zip(base_lines, got) for a, b in zip(x, y) if len(x) == len(y))
            row["same_text_share_of_first"] = round(same / max(1, base["lines"]), 4)
            row["images_with_other_line_count"] = sum(len(x) != len(y) for x, y in zip(base_lines, got))
        readings[spec] = got
        rows.append(row)
        print(json.dumps(row), flush=True)
        del engine, ocr
    for n in args.processes:
        row = _pool_row(args.dir, manifest, n, args.pool_backend)
        if rows:
            base, base_lines = rows[0], readings[rows[0]["engine"]]
            got = row.pop("readings")
            row["speedup_vs_first"] = round(row["pages_per_s"] / base["pages_per_s"], 2)
            same = sum(a == b for x, y in zip(base_lines, got) for a, b in zip(x, y) if len(x) == len(y))
            row["same_text_share_of_first"] = round(same / max(1, base["lines"]), 4)
        else:
            row.pop("readings")
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if len(rows) == len(args.engines) + len(args.processes) else 1


_WORKER_ENGINE: Any = None


def _worker_init(backend: str, ready: Any) -> None:
    global _WORKER_ENGINE
    from ragspine.ocr import RapidOcrEngine

    _WORKER_ENGINE = RapidOcrEngine(backend=backend, threads=1)  # type: ignore[arg-type]
    _WORKER_ENGINE._load()
    ready.wait(timeout=600)  # every worker loaded before any reads


def _worker_read(path: str) -> list[str]:
    import numpy as np
    from PIL import Image

    return [ln.text for ln in _WORKER_ENGINE.recognize(np.asarray(Image.open(path).convert("RGB")))]


def _pool_row(folder: Path, manifest: dict[str, Any], n: int, backend: str) -> dict[str, Any]:
    """The CPU path's shape: ``n`` worker processes with a one-thread engine each (as
    ragspine.indexing.ocr_pool runs them), every image submitted at once. The workers start
    and load their models before the clock starts."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    paths = [str(folder / r["file"]) for r in manifest["images"]]
    n_pages = len({r["page"] for r in manifest["images"]})
    n = min(n, len(paths))  # the warm-up below gives each worker one image
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(n + 1)  # the n workers and this process
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init, initargs=(backend, ready)) as pool:
        warm = pool.map(_worker_read, paths[:n])  # makes the pool start all n workers
        ready.wait(timeout=600)  # every worker up with its models loaded
        list(warm)
        t = time.perf_counter()
        got = list(pool.map(_worker_read, paths))
        wall = time.perf_counter() - t
    return {"engine": f"cpu:{backend} x {n} one-thread processes", "pages": n_pages, "images": len(paths),
            "wall_s": round(wall, 2), "pages_per_s": round(n_pages / wall, 2), "lines": sum(map(len, got)),
            "load_avg": round(os.getloadavg()[0], 2), "readings": got}


def models(args: argparse.Namespace) -> int:
    """The two models alone, on the input shapes a ``replay`` recorded (random inputs: the time
    of a convolution or a matrix product does not depend on the values), for machines where
    RapidOCR's own dependencies (OpenCV) are not installed. Pages/s here is an upper bound of
    the engine's: RapidOCR's pre- and post-processing on the CPU comes on top (``other_s`` of
    the run that recorded the shapes says how much, on that machine)."""
    import numpy as np
    import onnxruntime as ort

    from ragspine.ocr.rapid import _DET_MODEL, _REC_MODEL, _models_dir
    from ragspine.ocr.sessions import TorchSession

    if args.models_dir:
        models_dir = args.models_dir
    else:
        models_dir = _models_dir()
    if not (args.dir / "shapes.json").is_file():
        print(f"no {args.dir / 'shapes.json'}: a `replay` of that folder writes it", file=sys.stderr)
        return 2
    shapes = json.loads((args.dir / "shapes.json").read_text())
    calls = shapes["calls"]
    n_pages = shapes["pages"]
    print(f"{n_pages} pages, {len(calls)} images, {sum(map(len, calls))} model calls (recorded by {shapes['engine']}: "
          f"pre- and post-processing took {shapes['other_s']} s there); {os.cpu_count()} cores", flush=True)
    rng = np.random.default_rng(0)

    def run(sessions: dict[str, Any], images: list) -> dict[str, float]:
        spent = {"detection": 0.0, "recognition": 0.0}
        for image_calls in images:
            for key, shape in image_calls:
                x = rng.standard_normal(shape, dtype=np.float32)
                t = time.perf_counter()
                sessions[key](x)
                spent[key] += time.perf_counter() - t
        return spent

    rows = []
    for spec in args.engines:
        device, _, backend = spec.partition(":")
        if backend not in ("onnxruntime", "torch"):
            print(json.dumps({"engine": spec, "error": "models-only runs onnxruntime or torch"}), flush=True)
            continue
        try:
            if backend == "onnxruntime":
                def ort_session(path: Path) -> Any:
                    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                    name = sess.get_inputs()[0].name
                    return lambda x: sess.run(None, {name: x})
                sessions = {"detection": ort_session(models_dir / _DET_MODEL), "recognition": ort_session(models_dir / _REC_MODEL)}
            else:
                sessions = {"detection": TorchSession(models_dir / _DET_MODEL, device),
                            "recognition": TorchSession(models_dir / _REC_MODEL, device, reduce_classes=True)}
        except Exception as exc:
            print(json.dumps({"engine": spec, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        images = calls[: args.baseline_images] if backend == "onnxruntime" and args.baseline_images else calls
        pages = len(images) * n_pages / len(calls)  # a share of the images: that share of the pages
        run(sessions, images[:2])  # warm-up
        if device.startswith("cuda"):
            import torch
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        spent = run(sessions, images)
        wall = time.perf_counter() - t
        row = {"engine": spec, "models_only": True, "images": len(images), "pages": round(pages, 1),
               "wall_s": round(wall, 2), "pages_per_s": round(pages / wall, 2),
               "detection_s": round(spent["detection"], 2), "recognition_s": round(spent["recognition"], 2),
               "load_avg": round(os.getloadavg()[0], 2)}
        if device.startswith("cuda"):
            row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        if rows:
            row["speedup_vs_first"] = round(row["pages_per_s"] / rows[0]["pages_per_s"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if len(rows) == len(args.engines) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="save the images bench/ocr.py's pages give the engine")
    r.add_argument("out", type=Path)
    r.add_argument("--data", type=Path, default=None, help="MMLongBench dev (default: ../shared/data/mmlongbench_dev)")
    r.add_argument("--docs", type=int, default=6)
    r.add_argument("--max-pages", type=int, default=60)
    r.add_argument("--format", choices=["png", "jpg"], default="png",
                   help="jpg (quality 92): every engine reads the same decoded pixels, a little off the render's")
    p = sub.add_parser("replay", help="read the recorded images with each engine, timed")
    p.add_argument("dir", type=Path)
    p.add_argument("--engines", nargs="+", default=["cpu:onnxruntime", "cuda:torch"],
                   help="DEVICE:BACKEND, the first is the same-run baseline")
    p.add_argument("--rec-batch", type=int, default=0, help="crops per recognition call (0: the engine's own)")
    p.add_argument("--processes", type=int, nargs="*", default=[],
                   help="also read with N one-thread worker processes (the CPU pool's shape), for each N")
    p.add_argument("--pool-backend", default="onnxruntime", help="the workers' backend (default onnxruntime)")
    p.add_argument("--json", type=Path, default=None)
    m = sub.add_parser("models", help="the two models alone on the shapes a replay recorded")
    m.add_argument("dir", type=Path)
    m.add_argument("--engines", nargs="+", default=["cpu:onnxruntime", "cuda:torch"])
    m.add_argument("--baseline-images", type=int, default=20, help="images the onnxruntime baseline reads (0: all)")
    m.add_argument("--models-dir", type=Path, default=None, help="the ONNX files (default: rapidocr-onnxruntime's)")
    m.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    return {"record": record, "replay": replay, "models": models}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
