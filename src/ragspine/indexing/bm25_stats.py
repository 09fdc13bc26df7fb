"""BM25 length statistics of a library, and re-weighting when they drift.

A document's BM25 vectors bake in the average length of its field at the time they were built
(Qdrant's sparse vectors hold the term-frequency part; the engine supplies the IDF). The library
record keeps each field's token and point counts and the average its vectors were built with
(``basis``); as a library grows the true average drifts, and when it moves by more than
``AVGDL_DRIFT`` every vector of that field is rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ragspine.catalog import AVGDL_DRIFT, LengthStats, Libraries
from ragspine.scoring import BM25Params, document_vector, tokenize
from ragspine.scoring.indexed_text import payload_text
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Store, Where
from ragspine.store.predicates import merge_field_types, value_type

logger = logging.getLogger(__name__)

#: Points per store write.
UPSERT_BATCH = 256


class LibraryStatistics:
    """Keeps each library record's BM25 length statistics and field types in step with its
    committed documents."""

    def __init__(self, store: Store, libraries: Libraries, bm25: BM25Params) -> None:
        self.store = store
        self.libraries = libraries
        self.bm25 = bm25

    @staticmethod
    def basis(lib: LengthStats | None, doc: LengthStats) -> float:
        """Average length used to weight this document: the library's basis, or for the first
        document of a library, the document's own average."""
        if lib is not None and lib.basis > 0:
            return lib.basis
        return doc.avgdl if doc.count and doc.tokens else 1.0

    def add(
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
            if st.basis <= 0 and add.tokens:  # the first document with text sets the basis
                st.basis = add.avgdl
        self.libraries.save(rec)
        self.maybe_reweight(library)

    # -- BM25 length drift --------------------------------------------------------------------

    def maybe_reweight(self, library: str) -> None:
        rec = self.libraries.get(library)
        drifted = [
            n for n, st in rec.stats.items()
            # A field without tokens (documents with no text at all) has no average to drift.
            if st.tokens > 0 and st.basis > 0 and abs(st.avgdl - st.basis) / st.avgdl > AVGDL_DRIFT
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
                    toks = tokenize(payload_text(r.payload))  # context and text, as the ingest weighed them
                    if toks:
                        items.append((r.id, document_vector(toks, avg, self.bm25)))
                for i in range(0, len(items), UPSERT_BATCH):
                    self.store.update_sparse(library, name, items[i : i + UPSERT_BATCH])
                st.basis = avg
                logger.info("re-weighted %d %s vectors to average length %.1f", len(items), kind, avg)
            self.libraries.save(rec)
            self.store.flush(library)
            return sum(st.count for st in rec.stats.values())

    def subtract(self, library: str, doc_stats: Mapping[str, Any] | None) -> None:
        """Take a deleted document's token and point counts out of the record."""
        rec = self.libraries.get(library)
        stats = doc_stats or {}
        for name, key in ((SPARSE_CHUNK, "chunk"), (SPARSE_PAGE, "page")):
            if name in rec.stats:
                old = LengthStats.from_json(stats.get(key))
                rec.stats[name].tokens -= old.tokens
                rec.stats[name].count -= old.count
        self.libraries.save(rec)

    def rebuild(self, library: str) -> None:
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
