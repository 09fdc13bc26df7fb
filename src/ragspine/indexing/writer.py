"""Writing one version of a document (the middle of :meth:`Indexer.ingest`): the models it is
written with (:func:`writable_models`), its passages and pages in batches, rendered one batch
ahead, encoded, and upserted by a writer thread (:class:`VersionWriter`, between the staging
entry and the step that sets the version live), and the commit that makes it the document's
active version (:class:`VersionCommit`). Each takes the parts it uses, not the indexer."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ragspine.catalog import LengthStats, LibraryModels, library_models
from ragspine.errors import InvalidRequestError, NoTextError
from ragspine.indexing.bm25_stats import UPSERT_BATCH
from ragspine.indexing import encode_stage
from ragspine.indexing.context import ContextBuilder
from ragspine.indexing.dense_reuse import DenseReuse
from ragspine.indexing.encode_stage import EncodeStage, EncodeThreads, device_first_stage
from ragspine.indexing.pdf import PageContent, ParsedPDF
from ragspine.indexing.points import PagePassages, length_stats, page_passages, page_points
from ragspine.indexing.render import PageRenderer
from ragspine.indexing.stages import WRITE_STAGES
from ragspine.models.errors import ModelOutputError
from ragspine.store.base import SPARSE_CHUNK, SPARSE_PAGE, PointData

if TYPE_CHECKING:
    from ragspine.catalog import Libraries
    from ragspine.config import Settings
    from ragspine.indexing.bm25_stats import LibraryStatistics
    from ragspine.indexing.listeners import Listeners
    from ragspine.indexing.render import RenderProcesses
    from ragspine.indexing.thumbnails import Thumbnails
    from ragspine.indexing.versions import Versions
    from ragspine.models.modelset import ModelSet
    from ragspine.scoring.bm25 import BM25Params
    from ragspine.store.base import Store

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


@dataclass
class VersionWriter:
    """Writes one version of a document: its passages and pages as points, in batches, with the
    renders, encoders and writes overlapping (the middle of :meth:`Indexer.ingest`). What it
    needs, and nothing else of the indexer: the settings, the store and the library records
    (for the writer lease), the BM25 statistics and parameters, the render workers and the
    thumbnails."""

    settings: Settings
    store: Store
    libraries: Libraries
    stats: LibraryStatistics
    bm25: BM25Params
    renders: RenderProcesses
    thumbs: Thumbnails
    #: The page encoder's device and prep threads, kept between documents.
    encoding: EncodeThreads = field(default_factory=EncodeThreads)

    def write(
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
        replaces: int | None = None,
        defer_dense: bool = False,
        context: ContextBuilder | None = None,
        times: dict[str, float] | None = None,
    ) -> tuple[LengthStats, LengthStats, int, list[dict[str, Any]], int]:
        """``context``: what passages and pages are indexed with besides their text
        (:mod:`ragspine.indexing.context`; None: nothing). ``replaces``: the live version this
        one will replace, whose dense vectors passages of the same context and text take instead
        of being encoded again (:mod:`ragspine.indexing.dense_reuse`). ``defer_dense``: the
        other passages are written without one, for the dense phase
        (:mod:`ragspine.indexing.dense_phase`). The last value returned: how many were.
        ``times`` gains the seconds of each stage (:data:`~ragspine.indexing.stages.WRITE_STAGES`):
        this thread waiting for renders, for the page encoder, building points, waiting for the
        writer; the encode thread's and the writer thread's own."""
        clock = times if times is not None else {}
        for stage in WRITE_STAGES:  # every stage reported, 0 where it did not run (no page model)
            clock.setdefault(stage, 0.0)
        s = self.settings
        doc_id = base["doc_id"]
        reuse = DenseReuse()
        if models.dense is not None and replaces is not None:
            reuse = DenseReuse.of_version(self.store, library, doc_id, replaces)
        # Tokenise first: BM25 weights need the average length, which this document changes.
        per_page = [page_passages(page, s.chunk_chars, s.chunk_overlap, context) for page in parsed.pages]
        chunk_stats, page_stats = length_stats(per_page)

        avg_c = self.stats.basis(rec_stats.get(SPARSE_CHUNK), chunk_stats)
        avg_p = self.stats.basis(rec_stats.get(SPARSE_PAGE), page_stats)
        passages: list[dict[str, Any]] = []
        n_chunks = 0
        done = 0
        # Pages go through in batches: render (thumbnail + model image) one batch ahead on a
        # helper thread or more on worker processes, encode the batch, upsert it. Only that
        # helper touches the PDF while it runs, and the main thread never does (MuPDF documents
        # are not thread-safe).
        want_image = models.page is not None and parsed.doc is not None and page_vectors is None

        def write(points: list[PointData]) -> None:
            t = time.perf_counter()
            try:
                _upsert(points)
            finally:
                _add(clock, "write", t)

        def _upsert(points: list[PointData]) -> None:
            for i in range(0, len(points), UPSERT_BATCH):
                self.libraries.check_lease(library)  # a writer whose lease ran out writes nothing more
                self.store.upsert(library, points[i : i + UPSERT_BATCH])

        # Four stages overlap: rendering (helper thread or render processes) | page encoding
        # (the encode thread, ragspine.indexing.encode_stage) | points (this thread) | writing
        # (writer thread). While the encoder still works on batch k, this thread hands it batch
        # k+1 before it builds batch k's points, and at most one batch waits to be written.
        # Every write has finished before this returns or raises: an abort must never race a
        # late write of the version it deletes.
        writing: Future[None] | None = None
        pending: deque[Any] = deque()
        encoding: deque[tuple[list[PagePassages], list[Any], Future[Any] | None]] = deque()

        def numbers(batch: list[PagePassages]) -> list[int]:
            return [pp.page.number for pp in batch]

        def finish(batch: list[PagePassages], rendered: list[Any], enc: Future[Any] | None) -> None:
            nonlocal writing, done, n_chunks
            t = time.perf_counter()
            encoded: list[Any] = [None] * len(batch)
            first: list[Any] | None = None  # first-stage vectors made on the device, by page
            if enc is not None:
                encoded, first = enc.result()
                if len(encoded) != len(batch):  # a remote or foreign encoder: never a page without vectors
                    raise ModelOutputError(f"{getattr(models.page, 'model_id', 'the page model')}: {len(encoded)} "
                                           f"pages came back for a batch of {len(batch)}")
            elif page_vectors is not None and models.page is not None:
                encoded = [page_vectors[pp.page.number] for pp in batch]
                for e in encoded:
                    if int(e.dim) != int(models.page.dim):
                        raise InvalidRequestError(
                            f"page_vectors have dim {e.dim}; the library's page field has {models.page.dim}"
                        )
            _add(clock, "encode_wait", t)
            t = time.perf_counter()
            dense: list[Any] = []
            if models.dense is not None:
                # Context and text, as BM25 sees them: the reuse below is keyed on this too.
                texts = [p.indexed(pp.page) for pp in batch for p in pp.passages]
                dense = reuse.encode(models.dense, texts, defer=defer_dense) if texts else []
            points: list[PointData] = []
            for i, (pp, (png, _), e) in enumerate(zip(batch, rendered, encoded, strict=True)):
                n = len(pp.passages)
                pts, psg = page_points(pp, base=base, classification=classes[pp.page.number], version=version,
                                       avgdl=(avg_c, avg_p), bm25=self.bm25, encoded=e, models=models,
                                       dense=dense[:n], first_stage=first[i] if first is not None else None)
                dense = dense[n:]
                points += pts
                passages.extend(psg)
                n_chunks += n
                if png is not None:
                    thumb = self.thumbs.path(library, doc_id, version, pp.page.number)
                    thumb.parent.mkdir(parents=True, exist_ok=True)
                    thumb.write_bytes(png)
            _add(clock, "points", t)
            if writing is not None:
                t = time.perf_counter()
                writing.result()  # the previous batch is in (and its error, if any, raised)
                _add(clock, "write_wait", t)
            writing = writer.submit(write, points)
            done += len(batch)
            if progress is not None:
                progress(done, len(per_page))

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-render") as thread, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragspine-write") as writer, \
                EncodeStage(models.page, self.encoding, clock,
                            device_first_stage(models) if want_image else None) as encoder, \
                PageRenderer(parsed, thread=thread, procs=self.renders, encoder=models.page, want_image=want_image,
                             key=f"{library}/{doc_id}/{version}", thumb_dpi=s.thumbnail_dpi,
                             thumb_max_px=s.thumbnail_max_px, image_dpi=s.page_render_dpi) as renderer:
            size = renderer.batch_size(s.page_batch_size if models.page is not None else UPSERT_BATCH)
            batches = [per_page[i : i + size] for i in range(0, len(per_page), size)]
            ahead = renderer.ahead
            # Batches encoded ahead of the points: only when there is an encoder to overlap.
            encode_ahead = encode_stage.ENCODE_AHEAD if want_image else 0
            try:
                pending = deque(renderer.submit(numbers(b)) for b in batches[:ahead])
                for bi, batch in enumerate(batches):
                    # A batch the encoder has already done becomes points before this thread waits
                    # for the next render (a fast encoder then keeps the old order, with no batch
                    # left over at a document's end); one still encoding is finished after the
                    # next batch is queued behind it, so the device never waits for this thread.
                    while encoding and encoding[0][2] is not None and encoding[0][2].done():
                        finish(*encoding.popleft())
                    t = time.perf_counter()
                    rendered = renderer.collect(pending.popleft(), numbers(batch))
                    _add(clock, "render_wait", t)
                    if bi + ahead < len(batches):
                        pending.append(renderer.submit(numbers(batches[bi + ahead])))
                    enc = encoder.submit([img for _, img in rendered]) if want_image else None
                    encoding.append((batch, rendered, enc))
                    if len(encoding) > encode_ahead:
                        finish(*encoding.popleft())
                while encoding:
                    finish(*encoding.popleft())
                if writing is not None:
                    t = time.perf_counter()
                    writing.result()
                    _add(clock, "write_wait", t)
            finally:
                if writing is not None:
                    wait([writing])
                for fut in pending:  # an error left renders in flight: drop them
                    fut.cancel()
                wait(list(pending))
        if reuse.reused:
            logger.info("%d of %d passages took the dense vectors of version %d", reuse.reused,
                        reuse.reused + reuse.encoded, replaces)
        return chunk_stats, page_stats, n_chunks, passages, reuse.deferred


def _add(clock: dict[str, float], stage: str, since: float) -> None:
    clock[stage] = clock.get(stage, 0.0) + time.perf_counter() - since


class _Precomputed:
    """Stands in for the page model when the vectors come with the request (identity only)."""

    def __init__(self, vectors: Mapping[int, Any]) -> None:
        first = next(iter(vectors.values()), None)
        self.dim = int(first.dim) if first is not None else 0


def writable_models(loaded: ModelSet, ocr_mode: str, library: str, rec: Any, doc_id: str, parsed: ParsedPDF,
                    kept: list[PageContent], page_vectors: Mapping[int, Any] | None) -> LibraryModels:
    """The models a version of ``doc_id`` is written with (of the ``loaded`` ones, those its
    library's record names), checked before anything is written: page vectors given upstream
    must cover exactly the ``kept`` pages, and a version with neither words nor page vectors is
    refused (a previous version, if any, stays). ``ocr_mode``: the OCR setting, for the message."""
    models = library_models(rec, loaded)
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
    if models.page is None and not any(p.text.strip() for p in kept):
        raise NoTextError(
            f"document '{doc_id}' has no text to index: its pages have no text layer and OCR "
            + ("is off (RAGSPINE_OCR=off)" if ocr_mode == "off" else "found no text in them")
            + f", and library '{library}' has no page model to search page images by. Turn OCR on "
            "(RAGSPINE_OCR=auto), or use a library created with a page model (RAGSPINE_PAGE_MODEL)"
        )
    return models


@dataclass
class VersionCommit:
    """Makes a written version the document's active one: the commit, the retirement of the
    version it replaces, the library's statistics, the listeners. ``step(name)`` is called after
    the commit (tests inject failures there)."""

    store: Store
    libraries: Libraries
    versions: Versions
    stats: LibraryStatistics
    listeners: Listeners
    step: Callable[[str], None]

    def commit(self, library: str, entry: dict[str, Any], prev: dict[str, Any] | None,
               chunk_stats: LengthStats, page_stats: LengthStats, passages: list[dict[str, Any]]) -> list[str]:
        """Make ``entry``'s version the document's active one (the commit, fenced by the writer
        lease), then retire the version it replaces, update the library's statistics and tell
        the listeners; called under the library lock. Returns the listeners' warnings."""
        doc_id, version, old_version = entry["doc_id"], entry["active_version"], entry["retiring_version"]
        self.libraries.commit_doc_entry(library, entry, version)  # the commit (fenced: see leases)
        self.step("committed")
        if self.libraries.lease_lost(library):
            # Committed, but this replica's lease ran out meanwhile: the next holder finishes the
            # retirement and recounts the statistics (its takeover). Writing more here could land
            # over what it has written since.
            logger.warning("version %d committed after the writer lease ran out; the next writer "
                           "finishes its retirement", version)
            return []
        if old_version is not None:
            self.versions.retire(library, doc_id, old_version)  # idempotent: never reused
            # Conditional: the entry is still this commit's (not a later writer's).
            self.libraries.update_doc_entry(library, {**entry, "retiring_version": None},
                                            {"active_version": version, "retiring_version": old_version})
        prev_stats = (prev or {}).get("doc_stats") if old_version is not None else None
        self.libraries.check_lease(library)
        self.stats.add(library, entry["meta"], chunk_stats, page_stats, prev_stats)
        if old_version is not None:
            self.store.optimize(library)  # the old version leaves IDF statistics and disk
        else:
            self.store.flush(library)
        return self.listeners.notify("document_committed", library, doc_id, version, entry["title"], entry["meta"],
                                     passages)
