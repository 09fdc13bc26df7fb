"""Bulk ingest on Ray Data: ``ragspine ingest --engine ray PATH...``.

The pipeline, per document, keeps ragspine's order (RESTRICTED goes before anything is encoded):

1. **plan** (driver): read the bytes; a document whose sensitivity is RESTRICTED is handed to
   the engine, which drops it without opening it; a document already indexed unchanged (same
   bytes, metadata and settings) is skipped, so a restarted run picks up where it stopped.
2. **OCR** (Ray Data CPU tasks, ``map``, ``RAGSPINE_RAY_OCR_CPUS`` each): the pages that need
   it are read, as the indexer reads them, by an engine of one thread per CPU of the task.
3. **parse, police, render** (Ray Data CPU tasks, ``flat_map``): PyMuPDF parses the PDF, the
   OCR lines join its pages, the engine's :class:`~ragspine.policy.PagePolicy` drops
   RESTRICTED pages, and only the kept pages are rendered, exactly as the indexer renders them
   for the page model.
4. **encode** (``map_batches`` on an actor pool, ``concurrency`` actors each holding the page
   model, ``RAGSPINE_RAY_MODEL_GPUS`` GPUs each): page images to multivectors. Ray Data streams,
   so rendering runs ahead of the encoders and the GPU does not wait on it.
5. **write** (driver, in order of completion): each complete document goes through
   :meth:`Engine.ingest` with ``page_vectors`` (page number -> the vectors encoded in step 3) -
   staging, commit, atomic replace, thumbnails, BM25, listeners - so the engine neither renders
   model images nor encodes again. The vectors must cover exactly the pages the policy keeps; a
   document whose pages do not match fails, atomically, and its previous version stays.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.config import Settings
from ragspine.errors import RagspineError
from ragspine.models.base import EncodedPage
from ragspine.models.errors import ModelOutputError
from ragspine.models.modelset import ModelSet, describe

logger = logging.getLogger(__name__)


def image_key(raw: bytes, size: tuple[int, int]) -> str:
    """Content key of a rendered page image (RGB bytes and size)."""
    h = hashlib.sha1(raw)
    h.update(f"{size[0]}x{size[1]}".encode())
    return h.hexdigest()


class PrecomputedPageEncoder:
    """The page model's identity for the writer's Engine: the vectors themselves come with each
    document (``Engine.ingest(..., page_vectors=...)``), so the engine checks the library's
    model id, revision and dimension against this, and never renders or encodes a page.
    """

    def __init__(self, model_id: str, revision: str, dim: int) -> None:
        self.model_id, self.revision, self.dim = model_id, revision, dim

    def clear(self) -> None:  # nothing held between documents
        return None

    def encode_pages(self, images: Sequence[Any]) -> list[EncodedPage]:
        raise ModelOutputError(
            "bulk ingest: pages must come with precomputed vectors (page_vectors); "
            "document not indexed"
        )

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        raise ModelOutputError("bulk ingest encodes pages only")


# -- Ray Data stages (run in Ray workers) ---------------------------------------------------------


def ocr_task_resources(settings: Settings) -> dict[str, float]:
    """What each OCR task asks Ray for: ``RAGSPINE_RAY_OCR_CPUS``, and a share of a GPU
    (``RAGSPINE_RAY_OCR_GPUS``) when ``RAGSPINE_OCR_DEVICE`` is cuda. Not resolved here (the
    driver may have no GPU): the task's engine checks CUDA where it runs."""
    out = {"num_cpus": float(settings.ray_ocr_cpus)}
    if settings.ocr_device == "cuda":
        out["num_gpus"] = float(settings.ray_ocr_gpus)
    return out


def read_pixels(row: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """map task, the OCR stage (its own CPUs: ``RAGSPINE_RAY_OCR_CPUS``): one document's OCR
    lines (page number -> lines), read with an engine of as many threads as the task has CPUs.
    The next stage polices and renders with them; a parse error travels on as ``error``."""
    from ragspine.indexing.ocr import OcrStage
    from ragspine.indexing.pdf import open_pdf
    from ragspine.serving.ray_settings import resolve_settings

    s = resolve_settings(overrides)
    out = {**row, "ocr_json": "{}", "error": ""}
    try:
        parsed = open_pdf(Path(row["path"]).read_bytes(), max_pages=s.max_pages,
                          max_page_side_pt=s.max_page_side_pt, max_image_pixels=s.max_image_pixels, tables=s.tables)
    except Exception as e:  # the writer reports it through the engine's own error
        return {**out, "error": describe(e)}
    try:
        threads = max(1, int(s.ray_ocr_cpus))
        lines = OcrStage(s, threads=threads).read(parsed)  # the Ray tasks are the parallelism
        return {**out, "ocr_json": json.dumps({str(n): v for n, v in lines.items()})}
    except Exception as e:
        return {**out, "error": describe(e)}
    finally:
        parsed.close()


def render_pages(row: dict[str, Any], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """flat_map task: one document → one row per kept page (RGB bytes), or one row saying why
    there is none (all pages RESTRICTED, or the PDF cannot be parsed or read)."""
    from ragspine.indexing import MODEL_IMAGE_MAX_PX, parse_metadata
    from ragspine.indexing.ocr import merge_all
    from ragspine.indexing.pdf import open_pdf, render_page_image
    from ragspine.policy import PagePolicy
    from ragspine.serving.ray_settings import resolve_settings

    s = resolve_settings(overrides)
    base = {"idx": row["idx"], "page": 0, "n_kept": 0, "raw": b"", "width": 0, "height": 0, "error": "",
            "ocr": "[]", "dropped": "[]"}
    if row.get("error"):
        return [{**base, "error": row["error"]}]
    try:
        meta = parse_metadata(json.loads(row["meta"]))
        parsed = open_pdf(Path(row["path"]).read_bytes(), max_pages=s.max_pages,
                          max_page_side_pt=s.max_page_side_pt, max_image_pixels=s.max_image_pixels, tables=s.tables)
    except Exception as e:  # the writer reports it through the engine's own error
        return [{**base, "error": describe(e)}]
    try:
        # OCR came first (read_pixels), as the indexer does: a stamp that exists only in pixels
        # drops its page here, before rendering. Only kept pages' lines travel on (to the
        # writer, which indexes them without reading the pixels again); of a dropped page only
        # its number does.
        ocr = {int(n): v for n, v in json.loads(row.get("ocr_json") or "{}").items()}
        merge_all(parsed, ocr)
        policy = PagePolicy(tuple(s.restricted_markers), s.marker_band)
        dropped = set(policy.restricted_pages(parsed.pages, meta.page_sensitivity))
        kept = [p.number for p in parsed.pages if p.number not in dropped]
        base["dropped"] = json.dumps(sorted(dropped))
        rows = []
        for n in kept:  # RESTRICTED pages are never rendered, let alone encoded
            im = render_page_image(parsed.doc, n, s.page_render_dpi, MODEL_IMAGE_MAX_PX)
            rows.append({**base, "page": n, "n_kept": len(kept), "raw": im.tobytes(),
                         "width": im.size[0], "height": im.size[1], "ocr": json.dumps(ocr.get(n, []))})
        return rows or [base]
    finally:
        parsed.close()


class EncodePages:
    """map_batches actor: page images → multivectors with the page model (loaded once)."""

    def __init__(self, overrides: dict[str, Any]) -> None:
        from ragspine.serving.ray_models import load_page_model
        from ragspine.serving.ray_settings import resolve_settings

        self.model = load_page_model(resolve_settings(overrides))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        from PIL import Image

        n = len(batch["idx"])
        keys, vecs, masks, grids, dims = [""] * n, [b""] * n, [b""] * n, [""] * n, [0] * n
        todo = [i for i in range(n) if int(batch["page"][i]) > 0]
        t0 = time.perf_counter()
        if todo:
            images = []
            for i in todo:
                size = (int(batch["width"][i]), int(batch["height"][i]))
                raw = bytes(batch["raw"][i])
                images.append(Image.frombytes("RGB", size, raw))
                keys[i] = image_key(raw, size)
            for i, page in zip(todo, self.model.encode_pages(images)):
                vecs[i] = page.vectors.tobytes()  # (n_tokens, dim) float32
                masks[i] = page.image_mask.tobytes()  # (n_tokens,) bool
                grids[i] = "" if page.grid is None else f"{page.grid[0]}x{page.grid[1]}"
                dims[i] = page.dim
        busy = time.perf_counter() - t0
        return {
            "idx": batch["idx"], "page": batch["page"], "n_kept": batch["n_kept"],
            "error": batch["error"], "ocr": batch["ocr"], "dropped": batch["dropped"],
            "key": np.array(keys, dtype=object),
            "vectors": np.array(vecs, dtype=object), "mask": np.array(masks, dtype=object),
            "grid": np.array(grids, dtype=object), "dim": np.array(dims),
            # This batch's encoder time, spread over its rows (for the busy fraction).
            "encode_s": np.full(n, busy / max(n, 1)),
        }


def _model_identity(overrides: dict[str, Any]) -> tuple[str, str, int]:
    from ragspine.serving.ray_models import load_page_model
    from ragspine.serving.ray_settings import resolve_settings

    m = load_page_model(resolve_settings(overrides))
    return str(m.model_id), str(m.revision), int(m.dim)


def decode_page(row: dict[str, Any]) -> EncodedPage:
    dim = int(row["dim"])
    vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(-1, dim).copy()
    mask = np.frombuffer(row["mask"], dtype=np.bool_).copy()
    grid = tuple(int(x) for x in row["grid"].split("x")) if row["grid"] else None
    return EncodedPage(vectors, mask, grid)  # type: ignore[arg-type]


# -- the driver ------------------------------------------------------------------------------------


@dataclass
class BulkReport:
    """What a bulk ingest did, and how busy the encoders were."""

    indexed: int = 0
    unchanged: int = 0
    dropped: int = 0
    failed: int = 0
    pages_encoded: int = 0
    #: Whole run (Ray start and model identity included), and the Ray Data pipeline alone.
    wall_s: float = 0.0
    pipeline_s: float = 0.0
    encoder_busy_s: float = 0.0
    encoders: int = 1
    lines: list[str] = field(default_factory=list)

    @property
    def end_to_end_pages_per_s(self) -> float:
        """Pages through parse, policy, render, encode and write, per second of the pipeline."""
        return self.pages_encoded / self.pipeline_s if self.pipeline_s else 0.0

    @property
    def encoder_only_pages_per_s(self) -> float:
        """The rate if every encoder had been busy all the time."""
        return self.pages_encoded * self.encoders / self.encoder_busy_s if self.encoder_busy_s else 0.0

    @property
    def encoder_busy_fraction(self) -> float:
        return self.encoder_busy_s / (self.pipeline_s * self.encoders) if self.pipeline_s else 0.0


@dataclass
class _Doc:
    idx: int
    path: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Page number → vectors from the encoder pool, handed to Engine.ingest (no re-render).
    page_vectors: dict[int, EncodedPage] | None = None
    #: Page number → OCR lines read by the CPU task (kept pages only), and the pages its policy
    #: dropped: the writer neither reads the pixels again nor keeps a page the task dropped.
    ocr_lines: dict[int, list[Any]] | None = None
    restricted_pages: list[int] = field(default_factory=list)


def bulk_ingest(
    settings: Settings,
    library: str,
    paths: Iterable[Path],
    meta: dict[str, Any],
    *,
    encoders: int = 1,
    batch_size: int | None = None,
    encoder_cpus: float = 1.0,
    echo: Callable[[str], None] = print,
    progress: bool = True,
) -> BulkReport:
    """Ingest ``paths`` into ``library`` (created if missing) with the Ray Data pipeline above.

    Joins ``RAGSPINE_RAY_ADDRESS`` or starts a local Ray (and shuts down only a Ray it started).
    """
    import ray

    from ragspine.engine import Engine
    from ragspine.errors import LibraryNotFoundError
    from ragspine.indexing import default_doc_id, parse_metadata
    from ragspine.policy import is_restricted
    from ragspine.serving.ray_settings import settings_overrides

    t0 = time.perf_counter()
    report = BulkReport(encoders=encoders)
    overrides = settings_overrides(settings)
    started = not ray.is_initialized()
    if started:
        ray.init(address=settings.ray_address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    try:
        pre: PrecomputedPageEncoder | None = None
        models = ModelSet()
        if settings.page_model:
            gpus = settings.ray_model_gpus
            ident = ray.get(ray.remote(num_gpus=gpus, num_cpus=encoder_cpus)(_model_identity).remote(overrides))
            pre = PrecomputedPageEncoder(*ident)
            models.page = pre
            models.configured["page"] = settings.page_model
        if settings.dense_model:  # passages are encoded by the writer (CPU-light next to pages)
            models.dense = ModelSet.from_settings(
                settings.model_copy(update={"page_model": None, "reranker": "none"})).dense
            models.configured["dense"] = settings.dense_model
        engine = Engine(settings, models=models)
        try:
            try:
                engine.library(library)
            except LibraryNotFoundError:
                engine.create_library(library)
                echo(f"created library '{library}'")

            def write(doc: _Doc) -> None:
                try:
                    r = engine.ingest(library, doc.path, dict(doc.meta), page_vectors=doc.page_vectors,
                                      ocr_lines=doc.ocr_lines, restricted_pages=doc.restricted_pages)
                except RagspineError as exc:
                    report.failed += 1
                    report.lines.append(f"{doc.path}: error: {exc.detail}")
                    echo(report.lines[-1])
                    return
                finally:
                    if pre is not None:
                        pre.clear()
                if r.status == "indexed":
                    report.indexed += 1
                    line = f"{doc.path}: indexed {r.doc_id} v{r.version}: {r.pages_indexed} pages"
                elif r.status == "unchanged":
                    report.unchanged += 1
                    line = f"{doc.path}: unchanged ({r.doc_id} v{r.version})"
                else:
                    report.dropped += 1
                    line = f"{doc.path}: dropped by policy"
                report.lines.append(line)
                echo(line)

            # 1. plan: RESTRICTED documents and unchanged ones never reach Ray Data.
            todo: list[_Doc] = []
            for i, path in enumerate(paths):
                doc = _Doc(i, Path(path), dict(meta))
                try:
                    m = parse_metadata(doc.meta)
                except RagspineError as exc:
                    report.failed += 1
                    echo(f"{path}: error: {exc.detail}")
                    continue
                if is_restricted(m.sensitivity) or pre is None:
                    write(doc)  # dropped unopened / no page model: nothing to encode
                    continue
                data = doc.path.read_bytes()
                sha = hashlib.sha256(data).hexdigest()
                doc_id = m.doc_id or default_doc_id(doc.path.name, sha)
                if engine.is_unchanged(library, doc_id, sha, m):
                    report.unchanged += 1
                    echo(f"{path}: unchanged ({doc_id} v{engine.document(library, doc_id)['version']})")
                    continue
                todo.append(doc)
            if todo:
                t_pipe = time.perf_counter()
                _run_pipeline(todo, overrides, settings, pre, write, report, encoders=encoders,
                              batch_size=batch_size or settings.ray_page_batch_size,
                              encoder_cpus=encoder_cpus, progress=progress)
                report.pipeline_s = time.perf_counter() - t_pipe
        finally:
            engine.close()
    finally:
        if started:
            ray.shutdown()
    report.wall_s = time.perf_counter() - t0
    return report


def _run_pipeline(
    todo: list[_Doc],
    overrides: dict[str, Any],
    settings: Settings,
    pre: PrecomputedPageEncoder,
    write: Callable[[_Doc], None],
    report: BulkReport,
    *,
    encoders: int,
    batch_size: int,
    encoder_cpus: float,
    progress: bool,
) -> None:
    import ray.data
    from tqdm import tqdm

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # one bar of our own, per document
    by_idx = {d.idx: d for d in todo}
    items = [{"idx": d.idx, "path": str(d.path), "meta": json.dumps(d.meta)} for d in todo]
    gpus = {"num_gpus": settings.ray_model_gpus} if settings.ray_model_gpus else {}
    ds = (
        ray.data.from_items(items, override_num_blocks=len(items))  # one block per document
        # OCR is a stage of its own, with its own CPUs (CPU tasks; a scan costs seconds a page).
        .map(read_pixels, fn_kwargs={"overrides": overrides}, **ocr_task_resources(settings))
        .flat_map(render_pages, fn_kwargs={"overrides": overrides}, num_cpus=1)
        .map_batches(EncodePages, fn_constructor_args=(overrides,), batch_size=batch_size,
                     concurrency=encoders, num_cpus=encoder_cpus, batch_format="numpy", **gpus)
    )
    bar = tqdm(total=len(todo), unit="doc", desc="ingest", disable=not progress)
    try:
        for row in ds.iter_rows():
            doc = by_idx[int(row["idx"])]
            doc.rows.append(row)
            report.encoder_busy_s += float(row["encode_s"])
            n = int(row["n_kept"])
            if n and len(doc.rows) < n:
                continue
            # Complete: every kept page (or the one row saying there are none) has arrived.
            encoded = [r for r in doc.rows if int(r["page"]) > 0]
            doc.page_vectors = {int(r["page"]): decode_page(r) for r in encoded}
            doc.ocr_lines = {int(r["page"]): json.loads(str(r["ocr"])) for r in encoded}
            doc.restricted_pages = [int(n) for n in json.loads(str(doc.rows[0]["dropped"]))]
            report.pages_encoded += len(encoded)
            write(doc)
            doc.page_vectors = doc.ocr_lines = None
            doc.rows = []
            bar.update(1)
    finally:
        bar.close()
