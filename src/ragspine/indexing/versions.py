"""Versioned document writes: what a failed write undoes, how an old version is retired, and
what the next open repairs after a crash.

A replace writes the new version in full (``state=staged``), makes it live, commits it in the
document's manifest entry (the one write that switches readers over), then deletes the old one.
The manifest entry names the version being staged and the one being retired, so whatever a
crash interrupts is finished or undone by :meth:`Versions.recover`.
"""

from __future__ import annotations

import logging
from typing import Any

from ragspine.catalog import Libraries
from ragspine.indexing.bm25_stats import LibraryStatistics
from ragspine.indexing.thumbnails import Thumbnails
from ragspine.store.base import Store, Where

logger = logging.getLogger(__name__)


class Versions:
    def __init__(self, store: Store, libraries: Libraries, thumbs: Thumbnails, stats: LibraryStatistics) -> None:
        self.store = store
        self.libraries = libraries
        self.thumbs = thumbs
        self.stats = stats

    def abort(self, library: str, doc_id: str, version: int, prev: dict[str, Any] | None) -> None:
        if self.libraries.lease_lost(library):
            # Another replica holds the lease now, or will: its takeover rolls this version back.
            # Writing here could undo what it has written since.
            logger.warning("write of %s v%d abandoned without cleanup: the writer lease was lost", doc_id, version)
            return
        try:
            self.store.delete(library, Where(doc_id=doc_id, version=version))
            self.thumbs.remove_version(library, doc_id, version)
            restore = ({**prev, "staging_version": None, "max_version": version} if prev
                       else {"doc_id": doc_id, "staging_version": None, "max_version": version})
            if self.libraries.leased:
                # Conditional on the entry still staging this version; without a previous one,
                # a tombstone keeps max_version (see recover).
                self.libraries.update_doc_entry(library, restore, {"staging_version": version})
            elif prev:
                self.libraries.put_doc_entry(library, restore)
            else:
                self.libraries.delete_doc_entry(library, doc_id)
            self.store.optimize(library)
        except Exception:
            logger.exception("cleanup after a failed ingest failed; it is retried when the library opens "
                             "(with leases: by the next writer)")

    def retire(self, library: str, doc_id: str, version: int) -> None:
        self.store.delete(library, Where(doc_id=doc_id, version=version))
        self.thumbs.remove_version(library, doc_id, version)

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
                    self.retire(library, doc_id, int(retiring))
                    dirty = True
                if dirty:
                    fixed += 1
                    if active:
                        self.libraries.put_doc_entry(
                            library, {**e, "staging_version": None, "retiring_version": None}
                        )
                    elif self.libraries.leased:
                        # A tombstone, not a deletion: the next version of this doc_id must not
                        # reuse the number of the one rolled back, whose writer (out of its
                        # lease, perhaps not dead) could still land a late batch under it.
                        self.libraries.put_doc_entry(library, {
                            "doc_id": doc_id, "staging_version": None, "retiring_version": None,
                            "max_version": max(int(e.get("max_version") or 0), int(staging or 0)),
                        })
                    else:
                        self.libraries.delete_doc_entry(library, doc_id)
            if fixed:
                self.stats.rebuild(library)
                self.store.optimize(library)
        return fixed

