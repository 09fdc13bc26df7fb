"""Removing a document, or telling what a deleted library leaves: every trace of it, in the order
that leaves nothing found by a search, on disk, or in the statistics."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragspine.catalog import check_doc_id
from ragspine.errors import DocumentNotFoundError
from ragspine.indexing.ocr_phase import OPEN_STATES
from ragspine.store.base import Where

if TYPE_CHECKING:
    from ragspine.catalog import Libraries
    from ragspine.indexing.bm25_stats import LibraryStatistics
    from ragspine.indexing.listeners import Listeners
    from ragspine.indexing.ocr_phase import PendingSources
    from ragspine.indexing.thumbnails import Thumbnails
    from ragspine.store.base import Store

logger = logging.getLogger(__name__)


@dataclass
class DocumentRemoval:
    store: Store
    libraries: Libraries
    thumbs: Thumbnails
    pending: PendingSources
    stats: LibraryStatistics
    listeners: Listeners

    def delete(self, library: str, doc_id: str) -> None:
        """Remove every trace of a document: passages, pages, thumbnails, manifest entry."""
        check_doc_id(doc_id)
        with self.libraries.doc_lock(library, doc_id), self.libraries.lock(library):
            entry = self.libraries.doc_entry(library, doc_id)
            # A document owed whole to its OCR (ocr_pending: no version yet) is deleted too: its
            # kept bytes go, and a second phase still running finds it gone (Superseded).
            if entry is None or not (entry.get("active_version") or entry.get("ocr") in OPEN_STATES):
                raise DocumentNotFoundError(f"no document '{doc_id}' in library '{library}'")
            self.store.delete(library, Where(doc_id=doc_id))  # points of every version + entry
            self.libraries.manifest_changed(library)
            self.thumbs.remove_doc(library, doc_id)
            self.pending.remove(library, str(entry.get("content_key")))
            self.stats.subtract(library, entry.get("doc_stats"))
            self.store.optimize(library)  # no trace in IDF statistics or on disk
            self.listeners.notify("document_deleted", library, doc_id)
            self.stats.maybe_reweight(library)
        logger.info("deleted a document and its thumbnails")

    def library_deleted(self, library: str) -> None:
        """Its kept PDFs go, and the listeners hear of it (its thumbnails and points are gone)."""
        self.pending.remove_library(library)
        self.listeners.notify("library_deleted", library)
