"""Ingest: PDF → RESTRICTED policy → passages → BM25 vectors → store, as one atomic version.

Order matters and is the point of this module:

1. a RESTRICTED document is dropped before it is even opened;
2. the PDF is parsed, and RESTRICTED pages are removed before chunking, tokenising,
   rendering or logging — their text never leaves :func:`~ragspine.indexing.pdf.open_pdf`'s
   page objects, which are discarded;
3. the new version is written in full but not live, then made live, then the manifest entry
   names it active (the commit), then the previous version is deleted. A failure at any step
   leaves the previous version served, and the next open cleans up what was left half-done.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragspine.config import Settings
from ragspine.errors import DocumentError, DocumentNotFoundError, InvalidRequestError, OversizeError
from ragspine.indexing.chunking import chunk_spans
from ragspine.catalog import (
    AVGDL_DRIFT,
    DENSE_CHUNK,
    PAGE_FULL,
    PAGE_POOLED,
    Libraries,
    LengthStats,
    check_doc_id,
    point_id,
)
from ragspine.indexing.pdf import (
    PageContent,
    ParsedPDF,
    TextBlock,
    open_pdf,
    render_page_image,
    render_page_png,
    render_pages_worker,
)
from ragspine.catalog import LibraryModels, library_models, pooled_vectors
from ragspine.models.modelset import ModelSet
from ragspine.policy import CLASSIFICATION, PagePolicy, is_restricted, normalize_sensitivity
from ragspine.scoring.bm25 import BM25Params, document_vector
from ragspine.store.predicates import FIELD_NAME_RE, merge_field_types, value_type
from ragspine.scoring.tokenizer import tokenize
from ragspine.store.base import bool_mirror, KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, PointData, Store, Where

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


class IndexListener(Protocol):
    """Told about committed and deleted documents (the relation graph keeps its edges in step).

    ``passages`` holds, per passage of the committed version, ``chunk_id``, ``page``, ``text``
    and ``bbox`` — RESTRICTED pages are already gone. A listener that raises does not undo the
    commit; the failure is logged and reported in :attr:`IngestResult.warnings`.
    """

    def document_committed(
        self, library: str, doc_id: str, version: int, title: str, meta: dict[str, Any],
        passages: list[dict[str, Any]],
    ) -> None: ...

    def document_deleted(self, library: str, doc_id: str) -> None: ...

    def library_deleted(self, library: str) -> None: ...
_RESERVED = {"doc_id", "page_sensitivity", "page", "kind", "state", "version"}
_UPSERT_BATCH = 256
#: Longest side of the image a page model gets: processors resize to far less (ColQwen2's
#: default budget is ~800k pixels), and a poster-sized page must not allocate gigabytes.
_MODEL_IMAGE_MAX_PX = 2048


class _Precomputed:
    """Stands in for the page model when the vectors come with the request (identity only)."""

    def __init__(self, vectors: Mapping[int, Any]) -> None:
        first = next(iter(vectors.values()), None)
        self.dim = int(first.dim) if first is not None else 0


def _mask_runs(mask: Any) -> list[list[int]]:
    """``[start, end)`` runs of True in a bool mask: where the image tokens lie, compactly."""
    runs: list[list[int]] = []
    start = None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append([start, i])
            start = None
    return runs


class DocumentMetadata(BaseModel):
    """What the caller says about a document. Unknown fields are kept as custom metadata."""

    model_config = ConfigDict(extra="allow")

    doc_id: str | None = None
    title: str | None = None
    entity: str | None = None
    period: str | int | None = None
    topic: str | None = None
    geography: str | None = None
    language: str | None = None
    sensitivity: str | None = None
    #: Per-page sensitivity overrides, 1-based page number → level (e.g. ``{"3": "RESTRICTED"}``).
    page_sensitivity: dict[int, str] = Field(default_factory=dict)

    @field_validator("page_sensitivity")
    @classmethod
    def _pages_positive(cls, v: dict[int, str]) -> dict[int, str]:
        bad = [k for k in v if k < 1]
        if bad:
            raise ValueError(f"page numbers are 1-based; got {bad}")
        return v

    def custom(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def fields(self) -> dict[str, Any]:
        """Filterable metadata: declared and custom fields that are set, minus system keys."""
        out: dict[str, Any] = {}
        for k, v in {**self.model_dump(exclude={"page_sensitivity"}), **self.custom()}.items():
            if v is None or k in _RESERVED:
                continue
            if not FIELD_NAME_RE.match(k):
                raise InvalidRequestError(
                    f"metadata field name {k!r} is not allowed: letters, digits and '_' only"
                )
            if isinstance(v, list):
                if not all(isinstance(x, (str, int, float, bool)) for x in v):
                    raise InvalidRequestError(f"metadata field '{k}' must hold scalars, got {v!r}")
            elif not isinstance(v, (str, int, float, bool)):
                raise InvalidRequestError(
                    f"metadata field '{k}' must be a string, number, boolean or list of them; "
                    f"got {type(v).__name__}"
                )
            out[k] = v
        if "sensitivity" in out:
            out["sensitivity"] = normalize_sensitivity(out["sensitivity"])
            if out["sensitivity"] is None:
                del out["sensitivity"]
        return out


def parse_metadata(raw: Mapping[str, Any] | DocumentMetadata | None) -> DocumentMetadata:
    if raw is None:
        return DocumentMetadata()
    if isinstance(raw, DocumentMetadata):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"metadata must be a JSON object, got {type(raw).__name__}")
    try:
        return DocumentMetadata.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InvalidRequestError(f"metadata field '{where}': {first['msg']}") from None


@dataclass
class IngestResult:
    library: str
    doc_id: str | None
    status: Literal["indexed", "unchanged", "dropped_by_policy"]
    version: int | None = None
    pages_total: int = 0
    pages_indexed: int = 0
    pages_dropped: list[int] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Thumbnails:
    """Page thumbnails under ``<data_dir>/thumbnails/<library>/<doc_id>/v<version>/p<n>.png``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "thumbnails"

    def doc_dir(self, library: str, doc_id: str) -> Path:
        return self.root / library / doc_id

    def path(self, library: str, doc_id: str, version: int, page: int) -> Path:
        return self.doc_dir(library, doc_id) / f"v{version}" / f"p{page}.png"

    def remove_version(self, library: str, doc_id: str, version: int) -> None:
        shutil.rmtree(self.doc_dir(library, doc_id) / f"v{version}", ignore_errors=True)

    def remove_doc(self, library: str, doc_id: str) -> None:
        shutil.rmtree(self.doc_dir(library, doc_id), ignore_errors=True)

    def remove_library(self, library: str) -> None:
        shutil.rmtree(self.root / library, ignore_errors=True)


def _default_doc_id(filename: str | None, digest: str) -> str:
    if filename:
        stem = Path(filename).stem
        slug = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).strip("-._")
        slug = slug[:100]
        if slug and slug[0].isalnum():
            return slug
    return f"doc-{digest[:12]}"


_PARAGRAPH_RE = re.compile(r"\S(?:.*?\S)??(?=\s*\n[ \t\r\f\v]*\n|\s*$)", re.DOTALL)


def text_page(text: str) -> PageContent:
    """Plain text as page 1: paragraphs are the runs between blank lines, text kept verbatim.

    Geometry is virtual (see :meth:`Indexer.ingest_text`): line ``i`` (0-based) spans
    ``y = i .. i + 1`` on a page as high as the text has lines, and 0 wide.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    height = float(len(line_starts))

    def line_of(pos: int) -> int:
        return bisect.bisect_right(line_starts, pos) - 1

    blocks = [
        TextBlock(m.group(), (0.0, float(line_of(m.start())), 0.0, float(line_of(m.end() - 1) + 1)), m.start(), m.end())
        for m in _PARAGRAPH_RE.finditer(text)
    ]
    # Header and footer for the RESTRICTED marker check: the first and the last non-blank
    # line, placed on the page's top and bottom edges (the lines in between are not given
    # to the policy, as prose in the middle of a PDF page is not).
    rows = [(i, ln) for i, ln in enumerate(text.split("\n")) if ln.strip()]
    edges = [rows[0], rows[-1]] if len(rows) > 1 else rows
    lines = [(ln, (0.0, float(i), 0.0, float(i + 1))) for i, ln in edges]
    if lines:
        lines[0] = (lines[0][0], (0.0, 0.0, 0.0, 0.0))
        lines[-1] = (lines[-1][0], (0.0, height, 0.0, height))
    return PageContent(number=1, width=0.0, height=height, text=text, blocks=blocks, lines=lines)


class Indexer:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        libraries: Libraries,
        thumbs: Thumbnails,
        models: ModelSet | None = None,
    ) -> None:
        self.settings = settings
        self.models = models if models is not None else ModelSet.none()
        self._procs: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._procs_broken = False
        self.store = store
        self.libraries = libraries
        self.thumbs = thumbs
        self.bm25 = BM25Params(settings.bm25_k1, settings.bm25_b)
        self.policy = PagePolicy(tuple(settings.restricted_markers), settings.marker_band)
        #: Called after each step of a replace with the step's name; tests inject failures here.
        self.step_hook: Callable[[str], None] | None = None
        self.listeners: list[IndexListener] = []

    def _render_pool(self, encoder: Any) -> ProcessPoolExecutor | None:
        """Processes that render pages for the page model, started on first use (spawned: the
        ingesting process may hold CUDA state and threads that a fork would copy badly).

        Auto (``render_workers=0``) uses them only for an encoder on a CUDA device: on a CPU
        the encoder is far slower than one render thread, and spawned workers re-import the
        caller's ``__main__`` (a script without ``if __name__ == "__main__"`` cannot use them).
        A pool that breaks is dropped, and rendering goes back to the helper thread.
        """
        n = self.settings.render_workers
        if n == 0:
            on_cuda = getattr(getattr(encoder, "device", None), "type", None) == "cuda"
            n = min(8, (os.cpu_count() or 1) - 1) if on_cuda else 0
        if n < 2 or self._procs_broken:
            return None
        with self._pool_lock:
            if self._procs is None:
                self._procs = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
            return self._procs

    def close(self) -> None:
        """Stop the render processes, if any were started."""
        with self._pool_lock:
            if self._procs is not None:
                self._procs.shutdown(wait=True, cancel_futures=True)
                self._procs = None

    def _notify(self, what: str, *args: Any) -> list[str]:
        failed = []
        for listener in self.listeners:
            try:
                getattr(listener, what)(*args)
            except Exception:
                logger.exception("%s failed in %s", what, type(listener).__name__)
                failed.append(f"{type(listener).__name__}.{what} failed; see the server log")
        return failed

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    def _content_key(self, pdf_sha: str, meta: DocumentMetadata) -> str:
        s = self.settings
        basis = {
            "pdf": pdf_sha,
            "meta": meta.model_dump(mode="json"),
            "chunk": [s.chunk_chars, s.chunk_overlap],
            "policy": [sorted(self.policy.markers), self.policy.band],
            "bm25": self.bm25.revision,
            "thumb": [s.thumbnail_dpi, s.thumbnail_max_px],
        }
        return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()

    # -- ingest -------------------------------------------------------------------------------

    def ingest(
        self,
        library: str,
        source: bytes | str | Path,
        metadata: Mapping[str, Any] | DocumentMetadata | None = None,
        *,
        filename: str | None = None,
        progress: Progress | None = None,
        page_vectors: Mapping[int, Any] | None = None,
    ) -> IngestResult:
        """Index one PDF as a new version of its document (see the module docstring).

        ``page_vectors`` (page number → :class:`~ragspine.models.base.EncodedPage`) are page
        embeddings computed upstream (the Ray Data bulk ingest encodes on a GPU actor pool):
        they are used instead of rendering and encoding here, and must cover exactly the pages
        the policy keeps - a vector for a dropped page is refused, never stored.
        """
        t0 = time.perf_counter()
        meta = parse_metadata(metadata)
        self.libraries.open(library)
        if meta.doc_id is not None:
            check_doc_id(meta.doc_id)
        dropped = self._drop_restricted_document(library, meta, t0)
        if dropped is not None:
            return dropped

        data = Path(source).read_bytes() if isinstance(source, (str, Path)) else bytes(source)
        if filename is None and isinstance(source, (str, Path)):
            filename = Path(source).name
        pdf_sha = hashlib.sha256(data).hexdigest()
        doc_id = meta.doc_id or _default_doc_id(filename, pdf_sha)
        check_doc_id(doc_id)
        prev = self.libraries.doc_entry(library, doc_id)
        if prev and prev.get("content_key") == self._content_key(pdf_sha, meta) and prev.get("active_version"):
            # Same bytes, same metadata, same settings: nothing to do, not even parsing.
            return IngestResult(
                library, doc_id, "unchanged", prev["active_version"], prev.get("pages_total", 0),
                prev.get("pages_indexed", 0), list(prev.get("pages_dropped", [])),
                prev.get("chunks", 0), time.perf_counter() - t0,
            )
        parsed = open_pdf(
            data, max_pages=self.settings.max_pages, max_page_side_pt=self.settings.max_page_side_pt
        )
        try:
            return self._ingest_parsed(library, parsed, meta, pdf_sha, doc_id, filename, progress, t0,
                                       page_vectors=page_vectors)
        finally:
            parsed.close()

    def ingest_text(
        self,
        library: str,
        doc_id: str,
        text: str,
        metadata: Mapping[str, Any] | DocumentMetadata | None = None,
        title: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> IngestResult:
        """Index plain text as a one-page document, through the same policy, staging, commit
        and versioning path as a PDF (used by evaluation on text corpora).

        The text is kept verbatim as the page text; paragraphs are split on blank lines. Text
        has no geometry, so the page is a virtual column one unit per text line and zero
        wide: bboxes say which lines a passage covers, and the RESTRICTED marker check reads the
        first and last non-blank lines as the page's header and footer. No thumbnail is
        rendered. ``title`` (or ``metadata["title"]``) is the title shown in hits; it is not
        indexed unless it is part of ``text``.
        """
        t0 = time.perf_counter()
        meta = parse_metadata(metadata)
        check_doc_id(doc_id)
        if meta.doc_id is not None and meta.doc_id != doc_id:
            raise InvalidRequestError(f"metadata doc_id {meta.doc_id!r} differs from doc_id {doc_id!r}")
        update: dict[str, Any] = {"doc_id": doc_id}
        if title is not None:
            update["title"] = title
        meta = meta.model_copy(update=update)
        self.libraries.open(library)
        dropped = self._drop_restricted_document(library, meta, t0)
        if dropped is not None:
            return dropped
        if not isinstance(text, str):
            raise InvalidRequestError(f"text must be a string, got {type(text).__name__}")
        data = text.encode("utf-8")
        if len(data) > self.settings.max_upload_bytes:
            raise OversizeError(
                f"the text is {len(data)} bytes; the limit is {self.settings.max_upload_bytes} "
                "(RAGSPINE_MAX_UPLOAD_BYTES)"
            )
        if not text.strip():
            raise DocumentError(f"document '{doc_id}' has no text")
        digest = hashlib.sha256(b"text\0" + data).hexdigest()
        parsed = ParsedPDF(doc=None, pages=[text_page(text)])
        return self._ingest_parsed(library, parsed, meta, digest, doc_id, None, progress, t0)

    def _drop_restricted_document(
        self, library: str, meta: DocumentMetadata, t0: float
    ) -> IngestResult | None:
        """The RESTRICTED document rule: such a document is not read at all, and an earlier
        version of it is deleted. Returns the result to hand back, or None to go on."""
        if not is_restricted(meta.sensitivity):
            return None
        # Not opened, not hashed into anything kept, not logged by name.
        if meta.doc_id is not None and self.libraries.doc_entry(library, meta.doc_id):
            self.delete(library, meta.doc_id)
        logger.info("a document was dropped by policy (document sensitivity)")
        return IngestResult(library, None, "dropped_by_policy", seconds=time.perf_counter() - t0)

    def _ingest_parsed(
        self,
        library: str,
        parsed: ParsedPDF,
        meta: DocumentMetadata,
        pdf_sha: str,
        doc_id: str,
        filename: str | None,
        progress: Progress | None,
        t0: float,
        page_vectors: Mapping[int, Any] | None = None,
    ) -> IngestResult:
        total = len(parsed.pages)
        dropped = self.policy.restricted_pages(parsed.pages, meta.page_sensitivity)
        dropped_set = set(dropped)
        # From here on only kept pages exist for the pipeline.
        kept = [p for p in parsed.pages if p.number not in dropped_set]
        parsed.pages = kept
        if dropped:
            logger.info("policy dropped %d of %d pages: %s", len(dropped), total, dropped)

        key = self._content_key(pdf_sha, meta)
        with self.libraries.lock(library):
            prev = self.libraries.doc_entry(library, doc_id)
            if prev and prev.get("content_key") == key and prev.get("active_version"):
                return IngestResult(
                    library, doc_id, "unchanged", prev["active_version"], total,
                    prev.get("pages_indexed", 0), list(prev.get("pages_dropped", [])),
                    prev.get("chunks", 0), time.perf_counter() - t0,
                )
            if not kept:
                # Every page was RESTRICTED: nothing of this document may be searchable.
                if prev:
                    self.delete(library, doc_id)
                return IngestResult(
                    library, doc_id, "dropped_by_policy", None, total, 0, dropped,
                    seconds=time.perf_counter() - t0,
                )
            rec = self.libraries.get(library)
            models = library_models(rec, self.models)
            if parsed.doc is None:  # plain text has no page image: only the dense field applies
                models = replace(models, page=None, page_missing=None)
            if page_vectors is not None:
                bad = sorted(set(page_vectors) - {p.number for p in kept})
                missing = sorted({p.number for p in kept} - set(page_vectors))
                if bad or missing:
                    raise InvalidRequestError(
                        f"page_vectors must cover exactly the {len(kept)} pages the policy keeps: "
                        + (f"given for pages not kept {bad[:10]}" if bad else f"missing pages {missing[:10]}")
                    )
                if models.has_page and models.page is None:
                    models = replace(models, page=_Precomputed(page_vectors), page_missing=None)
            models.require_writable(library)
            old_version = int(prev["active_version"]) if prev and prev.get("active_version") else None
            version = max(int(prev.get("max_version", 0)) if prev else 0, old_version or 0) + 1
            fields = meta.fields()
            title = meta.title or parsed.pdf_metadata.get("title") or doc_id
            base = {
                "doc_id": doc_id,
                "title": title,
                "meta": fields,
                "metab": bool_mirror(fields),
                "sensitivity": fields.get("sensitivity"),
            }
            # Each point carries its page's own classification (the override, else the
            # document's), which every query-time exit checks.
            classes = {p.number: normalize_sensitivity(meta.page_sensitivity.get(p.number)) or base["sensitivity"]
                       for p in kept}

            # Staging entry first: a crash from here on is cleaned up on the next open.
            self.libraries.put_doc_entry(
                library,
                {
                    **(prev or {"doc_id": doc_id}),
                    "staging_version": version,
                    "max_version": version,
                },
            )
            self._step("staged_entry")
            try:
                chunk_stats, page_stats, n_chunks, passages = self._write_version(
                    library, rec_stats=rec.stats, parsed=parsed, base=base, classes=classes, version=version,
                    total=total, progress=progress, models=models, page_vectors=page_vectors,
                )
                self._step("written")
                self.store.set_payload(library, Where(doc_id=doc_id, version=version), {"state": "live"})
                self._step("live")
            except BaseException:
                self._abort(library, doc_id, version, prev)
                raise

            entry = {
                "doc_id": doc_id,
                "title": title,
                "meta": fields,
                "active_version": version,
                "max_version": version,
                "content_key": key,
                "filename": filename,
                "pages_total": total,
                "pages_indexed": len(kept),
                "pages_dropped": dropped,
                "page_numbers": [p.number for p in kept],
                "page_sizes": [[p.width, p.height] for p in kept],  # points, as page_numbers
                "chunks": n_chunks,
                "indexed_at": time.time(),
                "retiring_version": old_version,
                "doc_stats": {"chunk": chunk_stats.to_json(), "page": page_stats.to_json()},
            }
            self.libraries.put_doc_entry(library, entry)  # the commit
            self._step("committed")
            if old_version is not None:
                self._retire(library, doc_id, old_version)
                entry["retiring_version"] = None
                self.libraries.put_doc_entry(library, entry)

            prev_stats = (prev or {}).get("doc_stats") if old_version is not None else None
            self._update_record(library, fields, chunk_stats, page_stats, prev_stats)
            if old_version is not None:
                self.store.optimize(library)  # the old version leaves IDF statistics and disk
            else:
                self.store.flush(library)
            warnings = self._notify("document_committed", library, doc_id, version, title, fields, passages)
        logger.info(
            "indexed version %d: %d pages, %d dropped, %d passages", version, len(kept), len(dropped), n_chunks
        )
        return IngestResult(
            library, doc_id, "indexed", version, total, len(kept), dropped, n_chunks,
            time.perf_counter() - t0, warnings,
        )

    def _write_version(
        self,
        library: str,
        *,
        rec_stats: dict[str, LengthStats],
        parsed: ParsedPDF,
        base: dict[str, Any],
        classes: Mapping[int, str | None],
        version: int,
        total: int,
        progress: Progress | None,
        models: LibraryModels,
        page_vectors: Mapping[int, Any] | None = None,
    ) -> tuple[LengthStats, LengthStats, int, list[dict[str, Any]]]:
        s = self.settings
        doc_id = base["doc_id"]
        # Tokenise first: BM25 weights need the average length, which this document changes.
        per_page: list[tuple[PageContent, list[tuple[int, int, tuple[float, ...]]], list[list[str]], list[str]]] = []
        chunk_stats, page_stats = LengthStats(), LengthStats()
        for page in parsed.pages:
            spans = chunk_spans(page.text, [(b.start, b.end) for b in page.blocks], s.chunk_chars, s.chunk_overlap)
            chunks = []
            for sp in spans:
                covered = [b.bbox for b in page.blocks if b.start < sp.end and b.end > sp.start]
                bbox = (
                    min(b[0] for b in covered), min(b[1] for b in covered),
                    max(b[2] for b in covered), max(b[3] for b in covered),
                ) if covered else (0.0, 0.0, page.width, page.height)
                chunks.append((sp.start, sp.end, bbox))
            ctoks = [tokenize(page.text[a:b]) for a, b, _ in chunks]
            ptoks = tokenize(page.text)
            chunk_stats.tokens += sum(len(t) for t in ctoks)
            chunk_stats.count += len(ctoks)
            page_stats.tokens += len(ptoks)
            page_stats.count += 1
            per_page.append((page, chunks, ctoks, ptoks))

        avg_c = self._basis(rec_stats.get(SPARSE_CHUNK), chunk_stats)
        avg_p = self._basis(rec_stats.get(SPARSE_PAGE), page_stats)
        passages: list[dict[str, Any]] = []
        n_chunks = 0
        done = 0
        # Pages go through in batches: render (thumbnail + model image) one batch ahead on a
        # helper thread, encode the batch, upsert it. Only that helper touches the PDF while
        # it runs, and the main thread never does (MuPDF documents are not thread-safe).
        size = s.page_batch_size if models.page is not None else _UPSERT_BATCH
        batches = [per_page[i : i + size] for i in range(0, len(per_page), size)]
        want_image = models.page is not None and parsed.doc is not None and page_vectors is None

        def render(batch: list[Any]) -> list[tuple[bytes | None, Any]]:
            out = []
            for page, *_ in batch:
                if parsed.doc is None:  # plain text has nothing to render
                    out.append((None, None))
                    continue
                png = render_page_png(parsed.doc, page.number, s.thumbnail_dpi, s.thumbnail_max_px)
                img = render_page_image(parsed.doc, page.number, s.page_render_dpi, _MODEL_IMAGE_MAX_PX) if want_image else None
                out.append((png, img))
            return out

        procs = self._render_pool(models.page) if want_image and parsed.source is not None else None
        ahead = 1
        spool: str | None = None
        if procs is not None:
            ahead = 2 * procs._max_workers  # noqa: SLF001 - keep every render process busy
            if isinstance(parsed.source, (bytes, bytearray)):
                # Workers open a path, not bytes pickled into every task; the spool lives in the
                # system temp dir (never the data dir) and goes when this document is written.
                fd, spool = tempfile.mkstemp(prefix="ragspine-render-", suffix=".pdf")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(parsed.source)
            src = spool or str(parsed.source)
            key = f"{library}/{doc_id}/{version}"

        def submit(batch: list[Any]) -> Any:
            if procs is None:
                return pool.submit(render, batch)
            return procs.submit(render_pages_worker, key, src, [pg.number for pg, *_ in batch],
                                s.thumbnail_dpi, s.thumbnail_max_px, s.page_render_dpi, _MODEL_IMAGE_MAX_PX)

        def collect(fut: Any, batch: list[Any]) -> list[tuple[bytes | None, Any]]:
            if procs is None:
                return fut.result()
            from PIL import Image

            try:
                got = fut.result()
            except BrokenProcessPool:
                if not self._procs_broken:
                    logger.warning("render processes failed (a script without "
                                   "'if __name__ == \"__main__\"'?); rendering on one thread")
                    self._procs_broken = True
                return render(batch)
            return [(png, Image.fromarray(arr, "RGB")) for png, arr in got]

        def write(points: list[PointData]) -> None:
            for i in range(0, len(points), _UPSERT_BATCH):
                self.store.upsert(library, points[i : i + _UPSERT_BATCH])

        # Three stages overlap: rendering (helper thread) | encoding (this thread; torch releases
        # the GIL on the device) | writing (writer thread). At most one batch waits to be
        # written, and every write has finished before this returns or raises: an abort must
        # never race a late write of the version it deletes.
        writing: Future[None] | None = None
        pending: deque[Any] = deque()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-render") as pool, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-write") as writer:
            try:
                pending = deque(submit(b) for b in batches[:ahead])
                for bi, batch in enumerate(batches):
                    rendered = collect(pending.popleft(), batch)
                    if bi + ahead < len(batches):
                        pending.append(submit(batches[bi + ahead]))
                    page_vecs: list[dict[str, Any]] = [{} for _ in batch]
                    encoded = None
                    if want_image:
                        encoded = models.page.encode_pages([img for _, img in rendered])
                    elif page_vectors is not None and models.page is not None:
                        encoded = [page_vectors[page.number] for page, *_ in batch]
                        for enc in encoded:
                            if int(enc.dim) != int(models.page.dim):
                                raise InvalidRequestError(
                                    f"page_vectors have dim {enc.dim}; the library's page field has {models.page.dim}"
                                )
                    if encoded is not None:
                        for pv, enc in zip(page_vecs, encoded):
                            pv[PAGE_FULL] = enc.vectors
                            if models.pooling is not None:
                                pv[PAGE_POOLED] = pooled_vectors(enc, models.pooling, models.pool_factor)
                            pv["_grid"] = list(enc.grid) if enc.grid is not None else None
                            pv["_image_mask"] = _mask_runs(enc.image_mask)
                    chunk_dense: list[Any] = []
                    if models.dense is not None:
                        texts = [page.text[a:b] for page, chunks, _, _ in batch for a, b, _ in chunks]
                        chunk_dense = list(models.dense.encode(texts, kind="document")) if texts else []
                    points: list[PointData] = []
                    ci = 0
                    for (page, chunks, ctoks, ptoks), (png, _), pv in zip(batch, rendered, page_vecs):
                        chunk_refs = []
                        for i, ((a, b, bbox), toks) in enumerate(zip(chunks, ctoks)):
                            chunk_id = f"{doc_id}/p{page.number}/c{i}"
                            chunk_refs.append({"chunk_id": chunk_id, "start": a, "end": b, "bbox": list(bbox)})
                            payload = {
                                **base, "kind": KIND_CHUNK, "state": "staged", "version": version,
                                "page": page.number, CLASSIFICATION: classes[page.number], "chunk_id": chunk_id, "start": a, "end": b,
                                "bbox": list(bbox), "text": page.text[a:b],
                            }
                            sparse = {SPARSE_CHUNK: document_vector(toks, avg_c, self.bm25)} if toks else {}
                            dense = {DENSE_CHUNK: chunk_dense[ci]} if chunk_dense else {}
                            ci += 1
                            points.append(PointData(point_id(doc_id, version, page.number, i), payload, sparse, dense))
                            passages.append({"chunk_id": chunk_id, "page": page.number, "text": payload["text"],
                                             "bbox": payload["bbox"]})
                            n_chunks += 1
                        page_payload = {
                            **base, "kind": KIND_PAGE, "state": "staged", "version": version, "page": page.number,
                            CLASSIFICATION: classes[page.number],
                            "width": page.width, "height": page.height, "text": page.text, "chunks": chunk_refs,
                        }
                        if PAGE_FULL in pv:
                            # Where the patch grid lies in the stored multivector (similarity maps).
                            page_payload["grid"] = pv.pop("_grid")
                            page_payload["image_tokens"] = pv.pop("_image_mask")
                        sparse = {SPARSE_PAGE: document_vector(ptoks, avg_p, self.bm25)} if ptoks else {}
                        points.append(PointData(point_id(doc_id, version, page.number, "page"), page_payload, sparse,
                                                {k: v for k, v in pv.items() if not k.startswith("_")}))
                        if png is not None:
                            thumb = self.thumbs.path(library, doc_id, version, page.number)
                            thumb.parent.mkdir(parents=True, exist_ok=True)
                            thumb.write_bytes(png)
                    if writing is not None:
                        writing.result()  # the previous batch is in (and its error, if any, raised)
                    writing = writer.submit(write, points)
                    done += len(batch)
                    if progress is not None:
                        progress(done, len(per_page))
                if writing is not None:
                    writing.result()
            finally:
                if writing is not None:
                    wait([writing])
                for fut in pending:  # an error left renders in flight: drop them
                    fut.cancel()
                wait(list(pending))
                if spool is not None:
                    os.unlink(spool)
        return chunk_stats, page_stats, n_chunks, passages

    @staticmethod
    def _basis(lib: LengthStats | None, doc: LengthStats) -> float:
        """Average length used to weight this document: the library's basis, or for the first
        document of a library, the document's own average."""
        if lib is not None and lib.basis > 0:
            return lib.basis
        return doc.avgdl if doc.count and doc.tokens else 1.0

    def _abort(self, library: str, doc_id: str, version: int, prev: dict[str, Any] | None) -> None:
        try:
            self.store.delete(library, Where(doc_id=doc_id, version=version))
            self.thumbs.remove_version(library, doc_id, version)
            if prev:
                self.libraries.put_doc_entry(library, {**prev, "staging_version": None, "max_version": version})
            else:
                self.libraries.delete_doc_entry(library, doc_id)
            self.store.optimize(library)
        except Exception:
            logger.exception("cleanup after a failed ingest failed; it is retried when the library opens")

    def _retire(self, library: str, doc_id: str, version: int) -> None:
        self.store.delete(library, Where(doc_id=doc_id, version=version))
        self.thumbs.remove_version(library, doc_id, version)

    def _update_record(
        self,
        library: str,
        fields: dict[str, Any],
        chunk: LengthStats,
        page: LengthStats,
        removed: dict[str, Any] | None,
    ) -> None:
        rec = self.libraries.get(library)
        rec.field_types = merge_field_types(rec.field_types, {k: value_type(v) for k, v in fields.items()})
        for name, add in ((SPARSE_CHUNK, chunk), (SPARSE_PAGE, page)):
            st = rec.stats.setdefault(name, LengthStats())
            st.tokens += add.tokens
            st.count += add.count
            if removed:
                old = LengthStats.from_json(removed.get("chunk" if name == SPARSE_CHUNK else "page"))
                st.tokens -= old.tokens
                st.count -= old.count
            if st.basis <= 0:
                st.basis = add.avgdl or 1.0
        self.libraries.save(rec)
        self._maybe_reweight(library)

    # -- BM25 length drift --------------------------------------------------------------------

    def _maybe_reweight(self, library: str) -> None:
        rec = self.libraries.get(library)
        drifted = [
            n for n, st in rec.stats.items()
            if st.count and st.basis > 0 and abs(st.avgdl - st.basis) / st.avgdl > AVGDL_DRIFT
        ]
        if drifted:
            self.reweight(library, drifted)

    def reweight(self, library: str, fields: Sequence[str] | None = None) -> int:
        """Rebuild the BM25 vectors of ``fields`` (default: both) with the library's current
        average lengths.

        Needed because document vectors bake in the average length at the time they were
        built; as a library grows that average drifts. Runs automatically, for the field that
        drifted only, when it has drifted by more than ``AVGDL_DRIFT``; cost is one pass over
        that field, so it happens O(log n) times while a library grows to n documents.
        """
        with self.libraries.lock(library):
            rec = self.libraries.get(library)
            for name, kind in ((SPARSE_CHUNK, KIND_CHUNK), (SPARSE_PAGE, KIND_PAGE)):
                if fields is not None and name not in fields:
                    continue
                st = rec.stats.get(name)
                if st is None or not st.count:
                    continue
                avg = st.avgdl
                items = []
                for r in self.store.scroll(library, Where(kind=kind)):
                    toks = tokenize(r.payload.get("text", ""))
                    if toks:
                        items.append((r.id, document_vector(toks, avg, self.bm25)))
                for i in range(0, len(items), _UPSERT_BATCH):
                    self.store.update_sparse(library, name, items[i : i + _UPSERT_BATCH])
                st.basis = avg
                logger.info("re-weighted %d %s vectors to average length %.1f", len(items), kind, avg)
            self.libraries.save(rec)
            self.store.flush(library)
            return sum(st.count for st in rec.stats.values())

    # -- delete and recovery ------------------------------------------------------------------

    def delete(self, library: str, doc_id: str) -> None:
        """Remove every trace of a document: passages, pages, thumbnails, manifest entry."""
        check_doc_id(doc_id)
        with self.libraries.lock(library):
            entry = self.libraries.doc_entry(library, doc_id)
            if entry is None or not entry.get("active_version"):
                raise DocumentNotFoundError(f"no document '{doc_id}' in library '{library}'")
            self.store.delete(library, Where(doc_id=doc_id))  # points of every version + entry
            self.libraries.invalidate(library)
            self.thumbs.remove_doc(library, doc_id)
            rec = self.libraries.get(library)
            stats = entry.get("doc_stats") or {}
            for name, key in ((SPARSE_CHUNK, "chunk"), (SPARSE_PAGE, "page")):
                if name in rec.stats:
                    old = LengthStats.from_json(stats.get(key))
                    rec.stats[name].tokens -= old.tokens
                    rec.stats[name].count -= old.count
            self.libraries.save(rec)
            self.store.optimize(library)  # no trace in IDF statistics or on disk
            self._notify("document_deleted", library, doc_id)
            self._maybe_reweight(library)
        logger.info("deleted a document and its thumbnails")

    def recover(self, library: str) -> int:
        """Finish or undo what a crash left half-done; returns how many entries were repaired."""
        fixed = 0
        with self.libraries.lock(library):
            for e in self.libraries.doc_entries(library):
                doc_id, active = e["doc_id"], e.get("active_version")
                staging, retiring = e.get("staging_version"), e.get("retiring_version")
                dirty = False
                if staging and staging != active:
                    self.store.delete(library, Where(doc_id=doc_id, version=int(staging)))
                    self.thumbs.remove_version(library, doc_id, int(staging))
                    dirty = True
                if retiring and retiring != active:
                    self._retire(library, doc_id, int(retiring))
                    dirty = True
                if dirty:
                    fixed += 1
                    if active:
                        self.libraries.put_doc_entry(
                            library, {**e, "staging_version": None, "retiring_version": None}
                        )
                    else:
                        self.libraries.delete_doc_entry(library, doc_id)
            if fixed:
                self._rebuild_record(library)
                self.store.optimize(library)
        return fixed

    def _rebuild_record(self, library: str) -> None:
        """Library statistics and field types recomputed from the committed manifest entries
        (after a crash between a commit and the record update)."""
        rec = self.libraries.get(library)
        totals = {SPARSE_CHUNK: LengthStats(), SPARSE_PAGE: LengthStats()}
        types: dict[str, str] = {}
        for e in self.libraries.doc_entries(library):
            if not e.get("active_version"):
                continue
            types = merge_field_types(types, {k: value_type(v) for k, v in (e.get("meta") or {}).items()})
            for name, key in ((SPARSE_CHUNK, "chunk"), (SPARSE_PAGE, "page")):
                d = LengthStats.from_json((e.get("doc_stats") or {}).get(key))
                totals[name].tokens += d.tokens
                totals[name].count += d.count
        for name, st in totals.items():
            st.basis = rec.stats[name].basis if name in rec.stats else st.avgdl
            rec.stats[name] = st
        rec.field_types = types
        self.libraries.save(rec)
