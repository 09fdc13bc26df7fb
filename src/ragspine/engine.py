"""The engine: one object that owns the store and wires indexing and retrieval together.

The REST API, the CLI and the Ray deployments all drive an :class:`Engine`; none of them
talks to the store directly.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from collections.abc import Mapping
from typing import IO, Any

from ragspine.backup import Parts, Report
from ragspine.backup.dump import backup
from ragspine.backup.load import restore
from ragspine.catalog import (
    PAGE_FULL,
    Libraries,
    LibraryRecord,
    check_doc_id,
    check_library_name,
    library_fields,
    library_models,
    point_id,
)
from ragspine.catalog.claims import OcrClaims
from ragspine.catalog.upgrade import Upgraded, upgrade
from ragspine.catalog.layout import plan_layout
from ragspine.catalog.leases import WriterLeases, replica_id
from ragspine.catalog.scope import Scope, document_visible, visible_documents
from ragspine.chain import GapLog, Glossaries, QueryChain
from ragspine.config import Settings
from ragspine.errors import (
    DocumentNotFoundError,
    InvalidRequestError,
    NotFoundError,
    ServiceUnavailableError,
)
from ragspine.graph import GraphService, expanded_search
from ragspine.indexing import DocumentMetadata, Indexer, IngestResult, Thumbnails
from ragspine.indexing.dense_backfill import DenseAdded, add_dense
from ragspine.indexing.dense_phase import DenseQueue, follow
from ragspine.indexing.ocr import first_phase_jobs
from ragspine.indexing.ocr_phase import OPEN_STATES, OcrQueue
from ragspine.indexing.ocr_sweep import ClaimGate, OcrSweep
from ragspine.models.modelset import ModelSet
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.explain import SimilarityMap, image_token_index, similarity_map
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.retrieval.search import Searcher, SearchRequest, SearchResponse
from ragspine.scoring.bm25 import BM25Params
from ragspine.store import Store, open_store

logger = logging.getLogger(__name__)


class Engine:
    def __init__(self, settings: Settings, store: Store | None = None, models: ModelSet | None = None) -> None:
        self._closed = False
        self._close_lock = threading.Lock()
        self.settings = settings
        self.store = store if store is not None else open_store(settings)
        try:
            self._wire(settings, models)
        except BaseException:
            if store is None:  # ours: give the data dir back (the embedded store holds a lock on it)
                self.store.close()
            raise

    def _wire(self, settings: Settings, models: ModelSet | None) -> None:
        #: Page, dense and rerank models (local, or proxies of Ray deployments); each optional.
        self.models = models if models is not None else ModelSet.from_settings(settings)
        self._owns_models = models is None  # a ModelSet given in may be shared: its owner closes it
        bm25 = BM25Params(settings.bm25_k1, settings.bm25_b)
        # A Qdrant server may be written by other replicas: re-read the manifest every second.
        ttl = 1.0 if settings.qdrant_url else float("inf")
        leased = settings.writer_leases == "on" or (settings.writer_leases == "auto" and bool(settings.qdrant_url))
        #: This process's name among the replicas (leases, jobs, its upload spool folder).
        self.replica = replica_id(settings.replica_id)
        #: This replica's writer leases (None: the embedded store, one process, no leases).
        self.leases = (WriterLeases(self.store, self.replica, settings.writer_lease_seconds,
                                    settings.writer_lease_wait_seconds) if leased else None)
        self.libraries = Libraries(self.store, bm25, active_ttl=ttl, leases=self.leases)
        self.thumbnails = Thumbnails(settings.data_dir)
        self.indexer = Indexer(settings, self.store, self.libraries, self.thumbnails, self.models)
        #: Phase 2 of deferred OCR, in the background; a few documents at once keep every OCR
        #: worker busy (ragspine.indexing.ocr_phase).
        workers = self.indexer.ocr_pool.workers if self.indexer.ocr_pool is not None else 1
        #: With leases, each phase 2 runs under this replica's claim on its document's OCR, and
        #: a sweep resumes what a stopped replica owed (ragspine.indexing.ocr_sweep). The claims
        #: last as long as a writer lease: how long a dead replica's OCR waits to be taken over.
        self.ocr_claims = (OcrClaims(self.store, self.replica, settings.writer_lease_seconds)
                           if self.leases is not None else None)
        gate = (ClaimGate(self.ocr_claims, self.libraries.doc_entry, settings.ocr_max_attempts)
                if self.ocr_claims is not None else None)
        self.ocr_queue = OcrQueue(self.indexer.finish_ocr, threads=min(4, max(2, workers)), gate=gate)
        #: The dense phase of documents ingested with ``defer_dense`` (ragspine.indexing.dense_phase).
        indexer = self.indexer
        filler = indexer.dense
        self.dense_queue = DenseQueue(lambda lib, doc, version, stop: filler.fill_version(
            lib, doc, version, stop, before_batch=filler.yield_to_ocr))
        # (Bound methods of the catalog and indexer, not of the engine: no cycle keeps it alive.)
        self.ocr_sweep = (OcrSweep(libraries=self.libraries.names, prepare=self.libraries.open,
                                   owed=self.indexer.deferred.owed_entries, claims=self.ocr_claims,
                                   queue=self.ocr_queue, every=settings.ocr_sweep_seconds,
                                   max_attempts=settings.ocr_max_attempts)
                          if self.ocr_claims is not None and settings.ocr_sweep_seconds > 0 else None)
        #: In-memory BM25 over every library searched (exact same ranking as the store's).
        # Updated on the searching thread (background=False): were the store to answer while
        # the index builds, the same query could score differently (Qdrant's IDF also counts
        # staged and not yet vacuumed points) - same input, same ranking.
        self.lexical = (LexicalIndex(self.store, self.libraries, bm25, max_postings=settings.lexical_postings_budget(),
                                     background=False)
                        if settings.lexical_index == "memory" else None)
        self.searcher = Searcher(settings, self.store, self.libraries, self.models, lexical=self.lexical)
        #: The relation graph, kept in step with the index (its listener).
        self.graph = GraphService(settings, self.store, self.libraries)
        self.indexer.listeners.append(self.graph)
        #: The query chain's state: each library's glossary and knowledge-gap log (in its collection).
        self.glossaries = Glossaries(self.store, self.libraries)
        self.gaps = GapLog(self.store, self.libraries)
        self.chain = self.chain_for(settings)
        self._recovered: set[str] = set()

    # -- libraries ----------------------------------------------------------------------------

    def create_library(self, name: str, *, shard_number: int | None = None, replication_factor: int | None = None,
                       write_consistency_factor: int | None = None,
                       on_disk: Mapping[str, bool] | None = None) -> LibraryRecord:
        """A new library with a vector field for every model configured now (page image
        multivectors, dense passages); BM25 always. Its layout (:mod:`ragspine.catalog.layout`):
        shards, copies and on-disk fields as asked, else the settings' and the store's defaults."""
        check_library_name(name)
        fields, encoders = library_fields(self.settings, self.models)
        s = self.settings
        layout = plan_layout(fields, self.store.backend, shard_number=shard_number,
                             replication_factor=replication_factor, write_consistency_factor=write_consistency_factor,
                             on_disk=on_disk, defaults={"shard_number": s.shard_number,
                                                        "replication_factor": s.replication_factor,
                                                        "write_consistency_factor": s.write_consistency_factor})
        rec = self.libraries.create(name, fields, encoders, layout)
        self._recovered.add(name)
        return rec

    def library(self, name: str) -> LibraryRecord:
        rec = self.libraries.open(name)
        # With leases a bystander never repairs: another replica's write in flight looks just
        # like a dead one's; the next lease holder rolls back (Libraries.lock -> on_takeover).
        if name not in self._recovered and not self.libraries.leased:
            # Checked again under the lock: documents are written concurrently, and a second
            # recovery would roll back the staged version of a write already under way.
            with self.libraries.lock(name):
                if name not in self._recovered:
                    fixed = self.indexer.recover(name)
                    if fixed:
                        logger.warning("library %s: repaired %d half-done document writes", name, fixed)
                    # No OCR of this process has run yet: a pending one is a dead process's.
                    if self.indexer.deferred.interrupted(name):
                        logger.warning("library %s: OCR of some documents was interrupted; "
                                       "'ragspine ocr --resume' finishes it", name)
                    self._recovered.add(name)
        return rec

    def list_libraries(self) -> list[str]:
        return self.libraries.names()

    def delete_library(self, name: str) -> None:
        self.libraries.drop(name)
        if self.lexical is not None:
            self.lexical.drop(name)
        self.thumbnails.remove_library(name)
        self._recovered.discard(name)
        self.indexer.library_deleted(name)

    def optimize_library(self, name: str) -> float:
        """Build the library's pending search indexes and vacuum deleted points; the seconds it
        took. Ingest never builds the HNSW graph of the visual first stage (the MUVERA
        encodings): until this runs, that stage scans every page's encoding (~2 ms per 1,000
        pages on the development machine). On the embedded store it blocks the whole process
        while it runs (qdrant-edge 0.9 holds the GIL through ``optimize``: ~40 s for 20,000
        pages); run it after a bulk ingest. A Qdrant server optimizes in the background itself.
        """
        self.library(name)
        with self.libraries.lock(name):
            t = time.perf_counter()
            self.store.optimize(name)
            return time.perf_counter() - t

    # -- documents ----------------------------------------------------------------------------

    def ingest(self, library: str, source: bytes | str | Path, metadata: Any = None, *,
               defer_dense: bool | None = None, **kw: Any) -> IngestResult:
        """:meth:`Indexer.ingest`. ``defer_dense`` (None: ``RAGSPINE_DENSE_PHASE=background``):
        the document goes live before its passages' dense vectors, which :attr:`dense_queue`
        then encodes (:mod:`ragspine.indexing.dense_phase`)."""
        self.library(library)
        if defer_dense is None:
            defer_dense = self.defer_dense(serving=False)
        result = self.indexer.ingest(library, source, metadata, defer_dense=defer_dense, **kw)
        if result.dense == "pending":
            follow(self.dense_queue, result, self.libraries.doc_entry(library, str(result.doc_id)))
        return result

    def ingest_jobs(self, files: int) -> int:
        """Documents a batch of ``files`` ingests at once (:func:`first_phase_jobs`): two while
        OCR may read pixels or thumbnails render on worker processes, else one."""
        renders = self.indexer.renders
        page = self.models.page  # a CPU page model renders on the thread: its encoder bounds it
        apart = not renders.broken and renders.size_for(page, want_image=page is not None) > 0
        return first_phase_jobs(self.settings.ocr, files, renders_apart=apart)

    def defer_dense(self, *, serving: bool) -> bool:
        """Whether an ingest defers its dense vectors (``RAGSPINE_DENSE_PHASE``): ``auto`` defers
        them in a long-running single process (``serving``: the server, the demo) only. Replicas
        that share a Qdrant (writer leases) encode inline: a dense phase a dead replica owed would
        wait for the next ``--add-dense``, as no other replica sweeps for it."""
        phase = self.settings.dense_phase
        return phase == "background" or (phase == "auto" and serving and not self.libraries.leased)

    def resume_dense(self, library: str | None = None) -> dict[tuple[str, str], Future[int]]:
        """Queue the dense phase of every document that still owes one (of ``library``, or of
        every library): after a stop or crash cut it short."""
        out: dict[tuple[str, str], Future[int]] = {}
        for name in [library] if library is not None else self.list_libraries():
            self.library(name)
            for doc_id, version in self.indexer.dense.owed(name):
                out[(name, doc_id)] = self.dense_queue.submit(name, doc_id, version)
        return out

    def finish_ocr_later(self, library: str, doc_id: str, progress: Any = None, done: Any = None) -> Future[Any]:
        """Queue phase 2 of a document ingested with ``defer_ocr=True`` (its result: the
        :class:`IngestResult` of the new version, or None if nothing was owed)."""
        return self.ocr_queue.submit(library, doc_id, progress, done)

    def resume_ocr(self, library: str | None = None) -> dict[tuple[str, str], Future[Any]]:
        """Queue phase 2 of every document whose OCR is pending or failed (of ``library``, or
        of every library), those the cluster sweep gave up on included. With leases, a document
        whose claim another live replica holds is not run here (its future: None)."""
        out: dict[tuple[str, str], Future[Any]] = {}
        for name in [library] if library is not None else self.list_libraries():
            self.library(name)
            for doc_id in self.indexer.deferred.owed(name):
                out[(name, doc_id)] = self.finish_ocr_later(name, doc_id)
        return out

    def ingest_text(self, library: str, doc_id: str, text: str, metadata: Any = None, title: str | None = None,
                    **kw: Any) -> IngestResult:
        """Plain text as a one-page document, through the same policy, versioning and commit as
        a PDF (evaluation on text corpora)."""
        self.library(library)
        return self.indexer.ingest_text(library, doc_id, text, metadata, title, **kw)

    def is_unchanged(self, library: str, doc_id: str, pdf_sha256: str, metadata: DocumentMetadata) -> bool:
        """Whether ingesting this PDF (by its SHA-256) with this metadata would change nothing."""
        prev = self.libraries.doc_entry(library, doc_id)
        return bool(prev and prev.get("active_version") and prev.get("ocr") not in OPEN_STATES
                    and prev.get("content_key") == self.indexer.content_key(pdf_sha256, metadata))

    def upgrade_library(self, library: str) -> Upgraded:
        """Bring a library written in an older format to the current one
        (:mod:`ragspine.catalog.upgrade`); not through :meth:`library`, which refuses it."""
        return upgrade(self.libraries, library)

    # -- backup -------------------------------------------------------------------------------

    def _backup_parts(self) -> Parts:
        return Parts(self.store, self.libraries, self.graph.graphs, self.thumbnails, self.indexer.pending,
                     self.models)

    def backup(self, names: list[str], out: IO[bytes], progress: Any = None, *, native: bool = True) -> Report:
        """Write a backup of the libraries ``names`` to ``out`` (:mod:`ragspine.backup`), each
        under its write lock while searches and ingests go on. ``native``: on the embedded store,
        also its own files, indexed, for a restore at copy speed (:mod:`ragspine.backup.native`)."""
        for name in names:
            self.library(name)
        return backup(self._backup_parts(), names, out, progress, native=native)

    def restore(self, path: Path | str, *, as_name: str | None = None, bm25_only: bool = False,
                progress: Any = None, label: str | None = None) -> Report:
        """Restore the libraries of the backup file at ``path`` (one of them as ``as_name``)."""
        report = restore(self._backup_parts(), path, as_name=as_name, bm25_only=bm25_only, progress=progress,
                         label=label)
        for c in report.libraries:
            if self.lexical is not None:
                self.lexical.drop(c.name)  # a name deleted and restored starts from the new points
        return report

    def add_dense(self, library: str, progress: Any = None) -> DenseAdded:
        """Give a library built without dense vectors those of the loaded dense model, from the
        passage text it stores (no PDF is parsed again): :mod:`ragspine.indexing.dense_backfill`."""
        self.library(library)
        return add_dense(self.indexer.dense, library, progress)

    def reweight(self, library: str) -> int:
        """Rebuild every BM25 vector of a library with its current average lengths."""
        self.library(library)
        return self.indexer.reweight(library)

    def documents(self, library: str, scope: Scope = ()) -> list[dict[str, Any]]:
        """The library's documents; with ``scope`` (an API key's filters), those it lets through."""
        self.library(library)
        entries = [e for e in self.libraries.doc_entries(library) if e.get("active_version")]
        visible = visible_documents(self.store, library, scope,
                                    {e["doc_id"]: e["active_version"] for e in entries})
        return [public_entry(e) for e in entries if visible is None or e["doc_id"] in visible]

    def document(self, library: str, doc_id: str, scope: Scope = ()) -> dict[str, Any]:
        """A document's entry. A document ``scope`` (an API key's filters) keeps out is exactly
        as absent as one that never existed: same error, same message."""
        self.library(library)
        check_doc_id(doc_id)
        e = self.libraries.doc_entry(library, doc_id)
        if (not e or not e.get("active_version")
                or not document_visible(self.store, library, doc_id, e["active_version"], scope)):
            raise DocumentNotFoundError(f"no document '{doc_id}' in library '{library}'")
        return public_entry(e)

    def delete_document(self, library: str, doc_id: str) -> None:
        self.library(library)
        self.indexer.delete(library, doc_id)

    def thumbnail(self, library: str, doc_id: str, page: int, scope: Scope = ()) -> Path:
        """Path of a page's thumbnail. A page dropped by policy is exactly as absent as a page
        that never existed: same error, same message."""
        doc = self.document(library, doc_id, scope)
        path = self.thumbnails.path(library, doc_id, doc["version"], page)
        if page not in doc["page_numbers"] or not path.is_file() or self._page_restricted(library, doc_id, doc, page):
            raise NotFoundError(f"no page {page} in document '{doc_id}' of library '{library}'")
        return path

    def page(self, library: str, doc_id: str, page: int, scope: Scope = ()) -> dict[str, Any]:
        """A page's text and its passages, each with its chunk id and bbox (what a hit cites).
        A RESTRICTED exit, as thumbnails are: a page dropped by policy, or whose point is
        classified RESTRICTED, is as absent as one that never existed."""
        doc = self.document(library, doc_id, scope)
        missing = NotFoundError(f"no page {page} in document '{doc_id}' of library '{library}'")
        if page not in doc["page_numbers"]:
            raise missing
        recs = self.store.retrieve(library, [point_id(doc_id, doc["version"], page, "page")],
                                   fields=["text", "chunks", "width", "height", "sensitivity", CLASSIFICATION])
        if not recs or point_restricted(recs[0].payload):
            raise missing
        p = recs[0].payload
        text = p.get("text", "")
        return {
            "library_id": library, "doc_id": doc_id, "title": doc["title"], "page": page,
            "version": doc["version"], "width": p.get("width"), "height": p.get("height"), "text": text,
            "passages": [{"chunk_id": c["chunk_id"], "bbox": c["bbox"], "text": text[c["start"]:c["end"]],
                          "text_source": c.get("text_source", "pdf")} for c in p.get("chunks", [])],
            "metadata": doc["metadata"],
        }

    def _page_restricted(self, library: str, doc_id: str, doc: dict[str, Any], page: int) -> bool:
        """The thumbnail exit: the page point's own classification (a page without a stored
        point is not served either)."""
        pid = point_id(doc_id, doc["version"], page, "page")
        recs = self.store.retrieve(library, [pid], fields=["sensitivity", CLASSIFICATION])
        return not recs or point_restricted(recs[0].payload)

    def similarity_map(self, library: str, doc_id: str, page: int, query: str, scope: Scope = ()) -> SimilarityMap:
        """Where on a page the query's tokens match (the visual channel's MaxSim, explained).

        404 (as for a thumbnail) when the page does not exist or was dropped by policy, and
        when the library has no page vectors; 503 when its page model is down; 422 for an
        empty or oversized query.
        """
        doc = self.document(library, doc_id, scope)
        if page not in doc["page_numbers"]:
            raise NotFoundError(f"no page {page} in document '{doc_id}' of library '{library}'")
        if not query.strip() or len(query) > self.settings.max_query_chars:
            raise InvalidRequestError(
                f"query must be 1 to {self.settings.max_query_chars} characters of text"
            )
        lm = library_models(self.libraries.get(library), self.models)
        if not lm.has_page:
            raise NotFoundError(
                f"no similarity map: library '{library}' has no page vectors "
                "(it was created without a page model)"
            )
        if lm.page is None:
            raise ServiceUnavailableError(f"no similarity map now: the page vectors need {lm.page_missing}")
        pid = point_id(doc_id, doc["version"], page, "page")
        recs = self.store.retrieve(library, [pid], fields=["grid", "image_tokens", "sensitivity", CLASSIFICATION])
        vecs = self.store.retrieve_vectors(library, [pid], PAGE_FULL)
        if not recs or pid not in vecs or point_restricted(recs[0].payload):
            raise NotFoundError(f"no page {page} in document '{doc_id}' of library '{library}'")
        grid = recs[0].payload.get("grid")
        if not grid:
            raise NotFoundError(f"no similarity map: the page model of library '{library}' gives no patch grid")
        q = lm.page.encode_queries([query])[0]
        return similarity_map(q, vecs[pid], (grid[0], grid[1]), image_token_index(recs[0].payload["image_tokens"]))

    # -- search -------------------------------------------------------------------------------

    def search(self, req: SearchRequest | dict[str, Any]) -> SearchResponse:
        if not isinstance(req, SearchRequest):
            req = SearchRequest.model_validate(req)
        for lib in req.libraries:
            self.library(lib)
        return self.chain.search(req)

    def searcher_for(self, settings: Settings) -> Searcher:
        """A searcher over this engine's libraries with other query-time settings (channel
        weights, RRF k, candidate limits): evaluation compares fusion variants on one index."""
        return Searcher(settings.model_copy(update={"data_dir": self.settings.data_dir}), self.store,
                        self.libraries, self.models, lexical=self.lexical)

    def chain_for(self, settings: Settings, *, record_gaps: bool = True) -> QueryChain:
        """The query chain (rewrite, corrective loop, post-chain, gap log) over a searcher with
        ``settings``; evaluation runs one without the gap log."""
        searcher = self.searcher if settings is self.settings else self.searcher_for(settings)
        graph = self.graph  # not ``self``: the chain must not keep the engine alive (a cycle)

        def base(req: SearchRequest) -> SearchResponse:
            if req.expand is not None:
                return expanded_search(graph, req, searcher)
            return searcher.search(req)

        gaps = self.gaps if record_gaps and settings.gap_log else None
        return QueryChain(searcher.settings, searcher, self.glossaries, gaps, graph.synonym_groups, base=base)

    def start_ocr_sweep(self) -> bool:
        """Cluster mode: start resuming the OCR that stopped replicas owed, now and every
        ``RAGSPINE_OCR_SWEEP_SECONDS`` (a server's start; :mod:`ragspine.indexing.ocr_sweep`).
        False: no sweep (the embedded store, or the setting is 0)."""
        if self.ocr_sweep is None:
            return False
        self.ocr_sweep.start()
        return True

    def stop_ocr_sweep(self) -> None:
        if self.ocr_sweep is not None:
            self.ocr_sweep.stop(timeout=30)

    def close(self, drain: float | None = None, *, keep_store: bool = False) -> None:
        """Queued phase-2 OCR is dropped (it stays pending; the next start resumes it), and a
        running one is waited for (it writes to the store closed below): to its end, or for
        ``drain`` seconds, after which it stops at its next page, uncommitted. With leases their
        claims are released: another replica's sweep takes them over. Dense phases
        (:mod:`ragspine.indexing.dense_phase`) are all finished when ``drain`` is None (a command
        that ends), else treated like the OCR. ``keep_store``: the store stays open (tests whose
        replicas share one Qdrant client). A second call does nothing: a server's shutdown
        and the command that started it may both close the engine they share."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.stop_ocr_sweep()
            self.ocr_queue.close(drain)
            self.dense_queue.close(drain)
            if self.ocr_claims is not None:
                self.ocr_claims.close()
            if self.leases is not None:
                self.leases.close()
            self.indexer.close()
            if self._owns_models:
                self.models.close()  # after the indexer: no page is prepared any more
            self.graph.close()
            if self.lexical is not None:
                self.lexical.close()  # waits for a running index update: it reads the store
        finally:
            if not keep_store:
                self.store.close()  # whatever failed above: the data dir is given back


def public_entry(e: dict[str, Any]) -> dict[str, Any]:
    """A manifest entry as users see it."""
    return {
        "doc_id": e["doc_id"],
        "title": e.get("title"),
        "version": e.get("active_version"),
        "metadata": e.get("meta", {}),
        "filename": e.get("filename"),
        "pages_total": e.get("pages_total"),
        "pages_indexed": e.get("pages_indexed"),
        "pages_dropped": e.get("pages_dropped", []),
        "page_numbers": e.get("page_numbers", []),
        "page_sizes": e.get("page_sizes", []),  # [width, height] in points per page_numbers entry
        "chunks": e.get("chunks"),
        "indexed_at": e.get("indexed_at"),
        "ocr": e.get("ocr", "none"),  # none | pending | done | failed (ragspine.indexing.ocr_phase)
        "ocr_pending_pages": e.get("ocr_pending_pages", []),
        "dense": e.get("dense", "none"),  # none | pending | done (ragspine.indexing.dense_phase)
        "profile": e.get("profile"),  # title, issuer, period, ... (ragspine.indexing.profile)
    }
