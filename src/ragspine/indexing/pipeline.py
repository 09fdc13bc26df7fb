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

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragspine.catalog import Libraries, check_doc_id
from ragspine.config import Settings
from ragspine.errors import DocumentError, InvalidRequestError, OversizeError
from ragspine.indexing.bm25_stats import LibraryStatistics
from ragspine.indexing.content_key import content_key
from ragspine.indexing.context import HEADING_LINES, ContextBuilder
from ragspine.indexing.dense_backfill import fill_if_added
from ragspine.indexing.dense_phase import DenseFiller
from ragspine.indexing.listeners import Listeners
from ragspine.indexing.metadata import DocumentMetadata, default_doc_id, parse_metadata, with_derived
from ragspine.indexing.ocr import OcrLines, OcrReport, OcrStage, merge_all
from ragspine.indexing.ocr_phase import OPEN_STATES, DeferredOcr, PendingSources, Superseded
from ragspine.indexing.states import OcrState
from ragspine.indexing.ocr_pool import BACKGROUND, URGENT, OcrProcesses, auto_workers
from ragspine.indexing.parse import ParseProcesses, open_parsed, parse_workers
from ragspine.indexing.pdf import ParsedPDF
from ragspine.indexing.profile import document_profile
from ragspine.indexing.removal import DocumentRemoval
from ragspine.indexing.render import RenderProcesses
from ragspine.indexing.results import IngestResult
from ragspine.indexing.textpage import text_page
from ragspine.indexing.thumbnails import Thumbnails
from ragspine.indexing.versions import Versions
from ragspine.indexing.writer import VersionCommit, VersionWriter, writable_models
from ragspine.models.modelset import ModelSet
from ragspine.ocr.rapid import resolve_device
from ragspine.policy import PagePolicy, is_restricted, normalize_sensitivity
from ragspine.scoring import BM25Params
from ragspine.store.base import Store, Where, bool_mirror

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


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
        self.store = store
        self.libraries = libraries
        self.thumbs = thumbs
        self.bm25 = BM25Params(settings.bm25_k1, settings.bm25_b)
        self.policy = PagePolicy(tuple(settings.restricted_markers), settings.marker_band)
        self.stats = LibraryStatistics(store, libraries, self.bm25)
        self.versions = Versions(store, libraries, thumbs, self.stats)
        #: Worker processes that render pages for a page model (RAGSPINE_RENDER_WORKERS), and that
        #: read a long PDF's pages (RAGSPINE_PARSE_WORKERS).
        self.renders = RenderProcesses(settings.render_workers)
        self.parses = ParseProcesses(parse_workers(settings.parse_workers))
        #: Worker processes that OCR pages (RAGSPINE_OCR_WORKERS), started at the first page
        #: that needs reading; None with one worker (OCR on the ingesting thread), OCR off, or
        #: OCR on a GPU (one engine here: RAGSPINE_OCR_DEVICE=cuda, checked now, not at a page).
        workers = auto_workers(settings.ocr_workers)
        on_gpu = settings.ocr != "off" and resolve_device(settings.ocr_device, settings.ocr_backend) == "cuda"
        self.ocr_pool = (OcrProcesses(workers, nice=settings.ocr_worker_nice, backend=settings.ocr_backend)
                         if workers > 1 and settings.ocr != "off" and not on_gpu else None)
        #: OCR of pages whose text is only in pixels, before the policy (RAGSPINE_OCR).
        self.ocr = OcrStage(settings, self.ocr_pool)
        #: PDFs waiting for the second phase of a deferred OCR (ragspine.indexing.ocr_phase).
        self.pending = PendingSources(Path(settings.data_dir) / "ocr-pending")
        self.deferred = DeferredOcr(self.libraries, self.pending, self.ingest)
        #: Called after each step of a replace with the step's name; tests inject failures here.
        self.step_hook: Callable[[str], None] | None = None
        self.listeners = Listeners()
        # Components reach back only weakly: a cycle would keep the indexer (and its store, whose
        # shard is closed when it is freed) alive after its engine is dropped unclosed.
        me = weakref.ref(self)
        step = _weak_step(me)
        #: A version's points, and its commit (ragspine.indexing.writer).
        self.writer = VersionWriter(settings, self.store, self.libraries, self.stats, self.bm25, self.renders, thumbs)
        self.committer = VersionCommit(self.store, self.libraries, self.versions, self.stats, self.listeners, step)
        self.removal = DocumentRemoval(self.store, self.libraries, thumbs, self.pending, self.stats, self.listeners)
        #: The dense phase's work (ragspine.indexing.dense_phase), yielding to this OCR pool.
        self.dense = DenseFiller(self.libraries, self.store, self.models,
                                 lambda: getattr(me(), "ocr_pool", None))
        # Several replicas: the replica that takes a dead writer's lease rolls back its leftovers.
        libraries.on_takeover = self._take_over

    def close(self) -> None:
        """Stop the render, parse and OCR processes, if any were started."""
        self.writer.encoding.close()
        self.renders.close()
        self.parses.close()
        if self.ocr_pool is not None:
            self.ocr_pool.close()

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    def content_key(self, pdf_sha: str, meta: DocumentMetadata) -> str:
        """What decides whether ingesting a PDF again changes anything (:func:`content_key`)."""
        return content_key(pdf_sha, meta, self.settings, self.policy, self.bm25.revision, self.ocr.opts.key())

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
        ocr_progress: Progress | None = None,
        ocr_lines: Mapping[int, OcrLines] | None = None,
        restricted_pages: Sequence[int] = (),
        defer_ocr: bool = False,
        expect_key: str | None = None,
        defer_dense: bool = False,
    ) -> IngestResult:
        """Index one PDF as a new version of its document (see the module docstring).

        ``progress(done, total)`` counts pages written; ``ocr_progress(done, total)`` counts
        the pages OCR reads first (only pages that need it: see :mod:`ragspine.indexing.ocr`).
        ``ocr_lines`` (page number -> lines) is OCR already done upstream with the same settings
        (a Ray Data CPU task) and ``restricted_pages`` the pages its policy dropped; both only
        come with ``page_vectors``, and the pages they name are dropped here too.

        ``page_vectors`` (page number → :class:`~ragspine.models.base.EncodedPage`) are page
        embeddings computed upstream (the Ray Data bulk ingest encodes on a GPU actor pool):
        they are used instead of rendering and encoding here, and must cover exactly the pages
        the policy keeps - a vector for a dropped page is refused, never stored.

        ``defer_ocr``: commit the pages that need no content OCR first and answer with
        ``ocr="pending"``; :meth:`finish_ocr` reads the rest (:mod:`ragspine.indexing.ocr_phase`).
        ``expect_key``: commit only if the active version still has this content key (phase 2).
        ``defer_dense``: passages get their dense vectors after the commit, with ``dense="pending"``
        (:mod:`ragspine.indexing.dense_phase`).
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
        doc_id = meta.doc_id or default_doc_id(filename, pdf_sha)
        check_doc_id(doc_id)
        key = self.content_key(pdf_sha, meta)
        prev = self.libraries.doc_entry(library, doc_id)
        if prev and prev.get("content_key") == key and prev.get("active_version"):
            owed = prev.get("ocr") in OPEN_STATES
            if not owed or defer_ocr:
                # Same bytes, same metadata, same settings: nothing to do, not even parsing. A
                # document whose OCR is still owed answers "pending" for the caller to finish
                # (the bytes are kept again if they were lost).
                if owed and not self.pending.has(library, key):
                    self.pending.put(library, key, data, meta.model_dump(mode="json"), filename)
                return IngestResult.unchanged(library, prev, time.perf_counter() - t0)
        parsed = open_parsed(data, self.settings, self.parses)
        try:
            deferred: list[int] = []  # pages whose content OCR waits for phase 2
            if defer_ocr and ocr_lines is None and page_vectors is None:
                plan = self.ocr.plan(parsed)
                deferred = sorted(n for n, (_stamps, content) in plan.items() if content)
                if deferred and len(deferred) == len(parsed.pages):
                    # Nothing could go live first: the document is owed whole to phase 2, and this
                    # call returns at once (no OCR on the caller's thread).
                    return self.deferred.owe_whole(library, doc_id, key, data, meta, filename, deferred, t0)
            held = self._hold_unread(deferred)
            # Before the policy: a stamp that exists only in pixels must be read to be obeyed.
            if ocr_lines is not None:
                ocr = merge_all(parsed, dict(ocr_lines))
            elif deferred:
                # Phase 1: the stamp-sized band images of the pages that go live now.
                ocr = self.ocr.apply(parsed, progress=ocr_progress, part="stamps", priority=URGENT,
                                     pages=[p.number for p in parsed.pages if p.number not in set(held)])
                self.pending.put(library, key, data, meta.model_dump(mode="json"), filename)
            else:
                # A second phase (expect_key) yields the workers to every caller that waits.
                ocr = self.ocr.apply(parsed, progress=ocr_progress,
                                     priority=URGENT if expect_key is None else BACKGROUND)
            try:
                result = self._ingest_parsed(library, parsed, meta, pdf_sha, doc_id, filename, progress, t0,
                                             page_vectors=page_vectors, ocr=ocr, restricted_pages=restricted_pages,
                                             held=held, deferred=deferred, expect_key=expect_key,
                                             defer_dense=defer_dense)
            except BaseException:
                if deferred and not (prev and prev.get("content_key") == key):
                    self.pending.remove(library, key)
                raise
            result.ocr_pages_read, result.ocr_seconds = ocr.planned, round(ocr.seconds, 3)
            if prev and prev.get("ocr") in OPEN_STATES and prev.get("content_key") != key:
                self.pending.remove(library, str(prev.get("content_key")))  # owed by a version now replaced
            if not deferred:
                self.pending.remove(library, key)  # phase 2 done (or never needed)
            elif result.status == "dropped_by_policy":
                self.pending.remove(library, key)
                # Every page that could go first is RESTRICTED: nothing to show early, one phase.
                return self.ingest(library, data, meta, filename=filename, progress=progress,
                                   ocr_progress=ocr_progress, expect_key=expect_key)
            return result
        finally:
            parsed.close()

    @staticmethod
    def _hold_unread(deferred: list[int]) -> list[int]:
        """The pages kept out of phase 1: every page whose content OCR is deferred, since a stamp
        may be anywhere in its unread pixels. The stamp-before-live guard; tests replace it to
        show it firing."""
        return deferred

    def finish_ocr(self, library: str, doc_id: str, progress: Progress | None = None) -> IngestResult | None:
        """Phase 2 of a deferred OCR (:meth:`DeferredOcr.finish`)."""
        return self.deferred.finish(library, doc_id, progress)

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
        rendered. ``title`` (or ``metadata["title"]``) is the title shown in hits and the document
        profile's; with ``RAGSPINE_PASSAGE_CONTEXT`` it is indexed as each passage's context,
        except where the passage already holds it (a text that starts with its title).
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
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate, as a JSON "\ud800" escape decodes
            raise InvalidRequestError(
                f"the text of {doc_id!r} is not valid Unicode: {exc.reason} at character {exc.start}") from None
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
        doc_id = meta.doc_id
        prev = self.libraries.doc_entry(library, doc_id) if doc_id is not None else None
        if doc_id is not None and prev and prev.get("active_version"):  # (else: a rolled-back write's)
            self.delete(library, doc_id)
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
        ocr: OcrReport | None = None,
        restricted_pages: Sequence[int] = (),
        held: Sequence[int] = (),
        deferred: Sequence[int] = (),
        expect_key: str | None = None,
        defer_dense: bool = False,
    ) -> IngestResult:
        total = len(parsed.pages)
        # Held pages (phase 1 of a deferred OCR) are not read yet: not policed, not kept.
        held_set = set(held)
        parsed.pages = [p for p in parsed.pages if p.number not in held_set]
        dropped = sorted(set(self.policy.restricted_pages(parsed.pages, meta.page_sensitivity))
                         | {n for n in restricted_pages if 1 <= n <= total})
        dropped_set = set(dropped)
        # From here on only kept pages exist for the pipeline.
        kept = [p for p in parsed.pages if p.number not in dropped_set]
        ocr_state: OcrState = "pending" if deferred else ("done" if ocr is not None and ocr.planned else "none")
        parsed.pages = kept
        if dropped:
            logger.info("policy dropped %d of %d pages: %s", len(dropped), total, dropped)
        # The document as a whole, from its kept pages only (ragspine.indexing.profile).
        profile = document_profile(parsed, filename, meta.fields(), kept)
        # Plain text has no type sizes or layout: no line of it is taken for a heading.
        # A table passage's column headers and caption are not added to its context: that measured
        # no gain on MMLongBench (docs/measured.md, "Tables read as tables").
        context = (ContextBuilder(profile, headings=HEADING_LINES and parsed.doc is not None)
                   if self.settings.passage_context else None)

        key = self.content_key(pdf_sha, meta)
        # Several documents of one library are written at once: each holds the writer lease
        # (shared) and its own document lock throughout, the library lock only for the short
        # steps that read or change library-wide state (the entry, the commit, statistics).
        with self.libraries.writing(library), self.libraries.doc_lock(library, doc_id):
            with self.libraries.lock(library):
                prev = self.libraries.doc_entry(library, doc_id)
                if expect_key is not None and (prev or {}).get("content_key") != expect_key:
                    raise Superseded(doc_id)
                if prev and prev.get("content_key") == key and prev.get("active_version") and (
                        deferred or prev.get("ocr") not in OPEN_STATES):
                    return IngestResult.unchanged(library, prev, time.perf_counter() - t0)
                if not kept and deferred:
                    # Every page that could go live first is RESTRICTED: phase 2 decides on the rest.
                    return IngestResult(library, doc_id, "dropped_by_policy", None, total, 0, dropped,
                                        seconds=time.perf_counter() - t0, ocr="pending",
                                        ocr_pending_pages=list(deferred))
                if not kept:
                    # Every page was RESTRICTED: nothing of this document may be searchable.
                    if prev and prev.get("active_version"):  # (else: a rolled-back write's tombstone)
                        self.delete(library, doc_id)
                    return IngestResult(
                        library, doc_id, "dropped_by_policy", None, total, 0, dropped,
                        seconds=time.perf_counter() - t0,
                    )
                rec = self.libraries.get(library)
                models = writable_models(self.models, self.ocr.opts.mode, library, rec, doc_id, parsed, kept,
                                         page_vectors)
                old_version = int(prev["active_version"]) if prev and prev.get("active_version") else None
                version = max(int(prev.get("max_version", 0)) if prev else 0, old_version or 0) + 1
                # The profile's issuer, period, ... join the caller's fields where the caller set none.
                fields = with_derived(meta.fields(), profile.derived_fields(), rec.field_types)
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

                # Staging entry first: a crash from here on is cleaned up on the next open (with
                # leases: by the next lease holder).
                self.libraries.check_lease(library)
                self.libraries.put_doc_entry(
                    library,
                    {
                        **(prev or {"doc_id": doc_id}),
                        "staging_version": version,
                        "max_version": version,
                    },
                )
                self._step("staged_entry")
            times = {"parse": time.perf_counter() - t0}
            try:
                chunk_stats, page_stats, n_chunks, passages, owed_dense = self.writer.write(
                    library, rec_stats=rec.stats, parsed=parsed, base=base, classes=classes, version=version,
                    total=total, progress=progress, models=models, page_vectors=page_vectors, replaces=old_version,
                    defer_dense=defer_dense, context=context, times=times,
                )
                t_commit = time.perf_counter()
                dense_state = "pending" if owed_dense else ("done" if models.dense is not None else "none")
                self._step("written")
                with self.libraries.lock(library):
                    self.libraries.check_lease(library)
                    if fill_if_added(self.dense, library, models.dense, doc_id, version):  # add_dense ran meanwhile
                        dense_state = "done"
                    self.store.set_payload(library, Where(doc_id=doc_id, version=version), {"state": "live"})
                    self._step("live")
            except BaseException:
                with self.libraries.lock(library):
                    self.versions.abort(library, doc_id, version, prev)
                raise

            with self.libraries.lock(library):
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
                    "ocr": ocr_state,
                    "ocr_pending_pages": list(deferred),
                    "dense": dense_state,
                    "retiring_version": old_version,
                    "doc_stats": {"chunk": chunk_stats.to_json(), "page": page_stats.to_json()},
                    "profile": profile.to_json(),
                }
                warnings = self.committer.commit(library, entry, prev, chunk_stats, page_stats, passages)
        logger.info(
            "indexed version %d: %d pages, %d dropped, %d passages", version, len(kept), len(dropped), n_chunks
        )
        return IngestResult(
            library, doc_id, "indexed", version, total, len(kept), dropped, n_chunks,
            time.perf_counter() - t0,
            [*(s.note(self.settings.max_image_pixels) for s in parsed.skipped_images), *warnings],
            pages_ocr=sum(1 for p in kept if p.ocr_lines),
            ocr=ocr_state, ocr_pending_pages=list(deferred), dense=dense_state, dense_pending=owed_dense,
            stages={k: round(v, 4) for k, v in {**times, "commit": time.perf_counter() - t_commit}.items()},
        )

    # -- delete and recovery ------------------------------------------------------------------

    def delete(self, library: str, doc_id: str) -> None:
        """Remove every trace of a document (:meth:`DocumentRemoval.delete`)."""
        self.removal.delete(library, doc_id)

    # -- maintenance ----------------------------------------------------------------------------

    def reweight(self, library: str, fields: Sequence[str] | None = None) -> int:
        """Rebuild the BM25 vectors of ``fields`` (default: both) with the library's current
        average lengths (see :mod:`ragspine.indexing.bm25_stats`)."""
        return self.stats.reweight(library, fields)

    def _take_over(self, library: str) -> None:
        """The writer lease of ``library`` was not released by its last holder: undo its staged
        versions and finish its retirements (:meth:`Versions.recover`), and recount the library
        statistics from the committed entries (it may have died between a commit and the count)."""
        fixed = self.versions.recover(library)
        if fixed:
            logger.warning("library %s: rolled back %d half-done document writes of a dead writer", library, fixed)
        else:
            self.stats.rebuild(library)

    def recover(self, library: str) -> int:
        """Finish or undo what a crash left half-done; returns how many entries were repaired."""
        return self.versions.recover(library)

    def library_deleted(self, library: str) -> None:
        """Tell the listeners a library is gone (its thumbnails and points already are)."""
        self.removal.library_deleted(library)


def _weak_step(me: weakref.ref[Indexer]) -> Callable[[str], None]:
    return lambda name: None if (ix := me()) is None else ix._step(name)
