"""In-process BM25 index over a library's live, current passages and pages.

Qdrant Edge answers a BM25 sparse query in 1.3-4.5 ms on these machines, most of it fixed
cost inside the engine (``bench/lexical.py``, MMLongBench: 1,844 pages, 11k passages), where
bm25s scores the pages in 0.1 ms. This index holds, per library and BM25 field
(``bm25_chunk``, ``bm25_page``), exactly the term weights the store holds — recomputed with
:func:`~ragspine.scoring.bm25.document_vector` from the stored text and the library record's
``basis`` for the field, as the pipeline computes them — and scores a query with numpy:

    score(d) = sum_t q_t * idf_t * w(d, t),   idf_t = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))

which is Qdrant's IDF modifier (``fancy_idf`` in Qdrant's ``VectorQueryContext``) with ``N`` the
points that have the vector and ``n_t`` those among them that contain ``t``. Qdrant counts every
point holding the vector (staged versions and not-yet-vacuumed deletions too); this index counts
the live, current ones, which is what Qdrant counts once a library is at rest (after
``Store.optimize``). Ties are broken by point id, like :func:`~ragspine.store.base.sort_hits`.

Freshness. Every search compares the library's active versions
(:meth:`~ragspine.catalog.Libraries.active_versions`, a cached dict replaced on every
manifest write) and the record's ``basis`` per field with the snapshot the index was built from.
When the active versions changed, the manifest entries are read (``doc_id``, ``active_version``,
``indexed_at``: a document deleted and ingested again gets the same version number but a new
``indexed_at``), and only the documents whose entry changed are re-read from the store
(``Where(doc_id, version, live=True)``) and swapped in; a changed basis (re-weighting) rebuilds
the whole index. Updates build new arrays and swap one reference under a lock: a search never
waits for one. While an update runs (on a helper thread by default) searches that need it are
answered by the store, so every answer reflects the committed state.

Memory: 20 bytes per posting (row 8, stored weight 4, weight times IDF 8) plus 12 per distinct
term; the dense rows of terms in a quarter of the rows or more (see :class:`FieldIndex`) add at
most 1.6x the bytes of their postings; about 200 bytes per indexed point (point id and passage
id strings, numeric columns). An update needs the old and the new arrays for a moment.
``max_postings`` bounds it: a library whose BM25 token count (in the library record, an upper
bound of its postings) exceeds it is searched by the store. The payload cache holds up to
``payload_cache`` whole payloads (see :meth:`LexicalIndex.payloads`). Measured on MMLongBench
(676k postings, 12.4k points): 18.6 MB of arrays, 1.8-2.4 s to build from the store.

RESTRICTED pages never reach the store (:mod:`ragspine.policy`); a point whose
sensitivity is RESTRICTED is still never indexed here, nor cached (docs/invariants.md, 1).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ragspine.policy import CLASSIFICATION
from ragspine.retrieval.lexical.build import DOC_KEYS, FIELD_KINDS, ROW_KEYS, ViewBuilder
from ragspine.retrieval.lexical.masks import row_mask
from ragspine.retrieval.lexical.payloads import PayloadCache
from ragspine.retrieval.lexical.postings import (
    PAGE_BITS,
    PAGE_MASK,
    DocSig,
    LibView,
    Unsupported,
    score,
    sorted_runs,
    top,
)
from ragspine.scoring.bm25 import BM25Params, SparseVector
from ragspine.scoring.fusion import rrf
from ragspine.store.base import (
    KIND_CHUNK,
    KIND_PAGE,
    SPARSE_CHUNK,
    SPARSE_PAGE,
    Fields,
    Hit,
    Record,
    Store,
    Where,
    payload_fields,
)
from ragspine.store.predicates import Predicate

if TYPE_CHECKING:
    from ragspine.catalog import Libraries

logger = logging.getLogger(__name__)

#: Default bound on the postings of one library (10M: about 0.2 GB, at most ~0.35 GB with the
#: dense rows).
DEFAULT_MAX_POSTINGS = 10_000_000
#: Default number of point payloads kept by :meth:`LexicalIndex.payloads`: passages take
#: about 1 KB each, pages 3-5 KB (their text and passage spans), so some 20-40 MB at most.
DEFAULT_PAYLOAD_CACHE = 16384
#: Keys a search can return from the index itself; any other key is read from the store.
INDEX_KEYS = frozenset(DOC_KEYS + ROW_KEYS + ("kind",))
#: More changed documents than this fraction of the library: rebuild instead of patching.
_FULL_REBUILD_FRACTION = 0.5

class RankedPage(NamedTuple):
    """A page of the fused BM25 ranking (passage channel + page channel, RRF)."""

    doc_id: str
    page: int
    chunk_point: str | None  # point id of the page's best passage (passage channel)
    page_point: str | None  # point id of the page point (page channel)
    bm25: float | None
    bm25_page: float | None
    fused: float


# -- the index ----------------------------------------------------------------------------------


class LexicalIndex:
    """BM25 search over libraries in process memory; the store answers what it cannot.

    ``search_sparse`` has the signature of :meth:`Store.search_sparse`; ``rank_pages`` fuses
    both BM25 channels of one library as :class:`~ragspine.retrieval.search.Searcher` does;
    ``payloads`` is :meth:`Store.retrieve` with a cache. The index holds the live points of
    each document's active version: a search for staged points, for a given version, or with
    a filter it cannot evaluate exactly goes to the store. (While a document is being replaced
    the store briefly holds two live versions; the Searcher keeps only the active one, which is
    all the index holds.)

    Threads: searches run concurrently and never wait for an update. ``background`` runs
    updates on a helper thread, one per library at a time (a server; the store answers
    meanwhile); without it the search that finds the index stale updates it first (tests,
    benchmarks, ``refresh``), other searches of that library waiting for it.
    """

    def __init__(
        self,
        store: Store,
        libraries: Libraries,
        bm25: BM25Params,
        *,
        max_postings: int = DEFAULT_MAX_POSTINGS,
        payload_cache: int = DEFAULT_PAYLOAD_CACHE,
        background: bool = True,
    ) -> None:
        if max_postings < 0 or payload_cache < 0:
            raise ValueError(f"max_postings and payload_cache must be >= 0, got {max_postings}, {payload_cache}")
        self.store = store
        self.libraries = libraries
        self.bm25 = bm25
        self.max_postings = max_postings
        self.payload_cache = payload_cache
        self.background = background
        self._views: dict[str, LibView] = {}
        self._lock = threading.Lock()  # guards _views writes, _epoch, _jobs, _refused
        self._epoch: dict[str, int] = {}  # bumped by invalidate/drop: a running update is discarded
        self._jobs: dict[str, threading.Thread] = {}
        self._update_locks: dict[str, threading.Lock] = {}
        self._refused: dict[str, int] = {}  # library -> token count it was refused at
        self._closed = False
        self._closing = threading.Event()  # set with _closed; not a lambda on self: a cycle kept the store open
        self._builder = ViewBuilder(store, bm25, whole_payloads=bool(payload_cache), closing=self._closing.is_set)
        self._cache = PayloadCache(store, payload_cache)
        #: Searches answered by the index / by the store (observability and tests; counted
        #: without a lock, so approximate under concurrency).
        self.served = 0
        self.fallbacks = 0

    # -- public ---------------------------------------------------------------------------------

    def search_sparse(
        self,
        name: str,
        vector: str,
        query: SparseVector,
        where: Where,
        limit: int,
        *,
        fields: Fields = None,
    ) -> list[Hit]:
        """:meth:`Store.search_sparse` over the index; the store answers when the index is
        stale, being built, too large, or the filter cannot be evaluated here."""
        keys = payload_fields(fields)
        if not query.indices or limit < 1:
            return []
        try:
            view = self.view(name)
            if view is None:
                raise Unsupported("index not ready")
            fi = view.fields.get(vector)
            if fi is None:
                raise Unsupported(f"field {vector!r} is not indexed")
            if where.kind is not None and where.kind != fi.kind:
                return []  # the store has this vector on fi.kind points only
            mask = row_mask(view, fi, where)
        except Unsupported as e:
            logger.debug("lexical index: store answers (%s)", e)
            self.fallbacks += 1
            return self.store.search_sparse(name, vector, query, where, limit, fields=fields)
        self.served += 1
        rows, scores = top(fi, score(fi, query, mask), limit)
        if keys is None or not set(keys) <= INDEX_KEYS:  # keys the index does not hold
            ids = [fi.ids[r] for r in rows.tolist()]
            if keys is not None and any("." in k for k in keys):  # a payload path: the store's rules
                got = {r.id: r.payload for r in self.store.retrieve(name, ids, fields=keys)}
            else:
                full = self.payloads(name, ids)
                got = full if keys is None else {i: {k: p[k] for k in keys if k in p} for i, p in full.items()}
            return [Hit(i, s, got[i]) for i, s in zip(ids, scores.tolist()) if i in got]
        doc_keys = [k for k in keys if k in DOC_KEYS]
        want_page, want_chunk, want_kind = "page" in keys, "chunk_id" in keys, "kind" in keys
        want_class = CLASSIFICATION in keys
        ids, cids, classes, docp = fi.ids, fi.chunk_ids, fi.classes, view.doc_payload
        hits = []
        for r, s, dcode, page in zip(rows.tolist(), scores.tolist(), fi.doc[rows].tolist(), fi.page[rows].tolist()):
            base = docp[dcode] or {}
            p = {k: base[k] for k in doc_keys if k in base}
            if want_page:
                p["page"] = page
            if want_chunk and cids[r] is not None:
                p["chunk_id"] = cids[r]
            if want_kind:
                p["kind"] = fi.kind
            if want_class and classes[r] is not None:
                p[CLASSIFICATION] = classes[r]
            hits.append(Hit(ids[r], s, p))
        return hits

    def rank_pages(
        self,
        name: str,
        query: SparseVector,
        predicates: Sequence[Predicate],
        limit: int,
        *,
        chunk_weight: float,
        page_weight: float,
        rrf_k: int,
        depth: int,
    ) -> list[RankedPage] | None:
        """The BM25 page ranking of one library, as the Searcher builds it from two
        ``search_sparse`` calls, in numpy; ``None`` when the index cannot answer (ask the store).

        Passage channel: the best ``limit`` passages, ordered by ``(-score, chunk_id)``, each
        page ranked at its best passage. Page channel: the best ``limit`` pages, ordered by
        ``(-score, doc_id, page)``. A channel weighted 0 does not rank; the passage channel
        runs anyway (each ranked page's best passage is its citation). Fusion: RRF,
        ``weight / (rrf_k + rank)`` summed per page; order ``(-fused, -bm25, doc_id, page)``;
        the first ``depth`` pages are returned.
        """
        if not query.indices:
            return []
        try:
            view = self.view(name)
            if view is None:
                raise Unsupported("index not ready")
            chans = []
            for fname, w in ((SPARSE_CHUNK, chunk_weight), (SPARSE_PAGE, page_weight)):
                if w > 0 or fname == SPARSE_CHUNK:  # passages: ranked by or cited only
                    fi = view.fields[fname]
                    where = Where(kind=fi.kind, live=True, predicates=tuple(predicates))
                    chans.append((fi, w, row_mask(view, fi, where)))
        except Unsupported as e:
            logger.debug("lexical index: store answers (%s)", e)
            self.fallbacks += 1
            return None
        self.served += 1
        docs = view.docs
        # Per channel: its pages in rank order, and where each page's (best) row is.
        chunk: tuple[list[int], dict[int, int], list[int], list[float]] | None = None
        pages: tuple[list[int], dict[int, int], list[int], list[float]] | None = None
        # Each channel's pages in rank order as (doc_id, page), fused by scoring.fusion.rrf: the
        # same call, tie-break included, as the Searcher's store path makes.
        rankings: list[list[tuple[str, int]]] = []
        weights: list[float] = []
        pkey: dict[tuple[str, int], int] = {}  # (doc_id, page) -> page key
        for fi, w, mask in chans:
            rows, scores = top(fi, score(fi, query, mask), limit)  # (-score, point id) order
            tied = np.flatnonzero(scores[1:] == scores[:-1]).tolist()
            rl, sl, keys = rows.tolist(), scores.tolist(), fi.pkey[rows].tolist()
            if tied:  # equal scores: the Searcher's own tie-break, on the tied runs only
                if fi.kind == KIND_CHUNK:
                    cids = fi.chunk_ids
                    idx = sorted_runs(tied, len(rl), key=lambda i: cids[rl[i]] or "")
                else:
                    idx = sorted_runs(tied, len(rl), key=lambda i: (docs[keys[i] >> PAGE_BITS], keys[i] & PAGE_MASK))
                rl, sl, keys = [rl[i] for i in idx], [sl[i] for i in idx], [keys[i] for i in idx]
            if fi.kind == KIND_CHUNK:
                order = list(dict.fromkeys(keys))  # pages in order of their best passage
                at = {k: i for i, k in zip(range(len(keys) - 1, -1, -1), reversed(keys))}  # first wins
                chunk = (order, at, rl, sl)
            else:
                order = keys  # one point per page
                at = dict(zip(keys, range(len(keys))))
                pages = (order, at, rl, sl)
            ranking = [(docs[k >> PAGE_BITS], k & PAGE_MASK) for k in order]
            pkey.update(zip(ranking, order))
            if w > 0:
                rankings.append(ranking)
                weights.append(w)
        fc = chans[0][0] if chans and chans[0][0].kind == KIND_CHUNK else None
        fp = chans[-1][0] if chans and chans[-1][0].kind == KIND_PAGE else None
        tiebreak: dict[tuple[str, int], float | None] = {}
        if chunk is not None:  # a page's best passage score (the fusion tie-break)
            cat, csl = chunk[1], chunk[3]
            tiebreak = {t: csl[cat[k]] for t, k in pkey.items() if k in cat}
        fused = rrf(rankings, k=rrf_k, weights=weights, tiebreak=tiebreak)
        out: list[RankedPage] = []
        for (doc_id, page), f in fused[:depth]:
            k = pkey[(doc_id, page)]
            c = p = None
            if chunk is not None and k in chunk[1]:
                i = chunk[1][k]
                c = (fc.ids[chunk[2][i]], chunk[3][i])  # type: ignore[union-attr]
            if pages is not None and k in pages[1]:
                i = pages[1][k]
                p = (fp.ids[pages[2][i]], pages[3][i])  # type: ignore[union-attr]
            out.append(RankedPage(
                doc_id, page,
                c[0] if c else None, p[0] if p else None,
                c[1] if c else None, p[1] if p else None,
                f,
            ))
        return out

    def payloads(self, name: str, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Whole payloads of the points ``ids`` that exist (:meth:`Store.retrieve`), from an LRU
        cache: a point's payload never changes once its version is live, and a cached one is
        used only while its document's manifest entry is the one it was read under. Treat the
        returned dicts as read-only (they are shallow copies; nested values are shared)."""
        view = self._views.get(name) if self.payload_cache else None
        if view is not None and view.active is not self.libraries.active_versions(name):
            view = None  # the manifest changed since: do not trust the cache for this call
        return self._cache.get(name, ids, view)

    def invalidate(self, name: str) -> None:
        """Forget what is indexed for ``name``: the next search rebuilds it (or the store answers
        while a helper thread does)."""
        with self._lock:
            self._epoch[name] = self._epoch.get(name, 0) + 1
            self._views.pop(name, None)
            self._refused.pop(name, None)
        self._cache.drop(name)

    def drop(self, name: str) -> None:
        """The library is gone: release its index and cached payloads."""
        self.invalidate(name)

    def close(self) -> None:
        """Stop: wait for running updates (they stop at their next step) and release memory."""
        with self._lock:
            self._closed = True
            self._closing.set()
            jobs = list(self._jobs.values())
        for j in jobs:
            j.join()
        with self._lock:
            self._views.clear()
        self._cache.clear()

    def refresh(self, name: str) -> LibView | None:
        """Bring the index of ``name`` up to date now, on this thread (warm-up, tests)."""
        return self.view(name, wait=True)

    def over_budget(self, name: str) -> int | None:
        """The BM25 token count of ``name`` when it is over ``max_postings`` (the store answers
        its searches), else None."""
        with self._lock:
            return self._refused.get(name)

    def info(self, name: str) -> dict[str, Any]:
        v = self._views.get(name)
        if v is None:
            return {"ready": False}
        return {
            "ready": True,
            "documents": len(v.sigs),
            "rows": {f: fi.n_rows for f, fi in v.fields.items()},
            "postings": {f: fi.n_postings for f, fi in v.fields.items()},
            "bytes": v.nbytes(),
        }

    # -- freshness ------------------------------------------------------------------------------

    def view(self, name: str, *, wait: bool = False) -> LibView | None:
        """The up-to-date view of ``name``, or ``None`` when the store must answer for now
        (``wait``: update it on this thread first, as without ``background``)."""
        active = self.libraries.active_versions(name)
        basis, tokens = self._record(name)
        v = self._views.get(name)
        if v is not None and v.active is active and v.basis == basis:
            return v
        return self._update(name, active, basis, tokens, v, wait=wait or not self.background)

    def _record(self, name: str) -> tuple[dict[str, float], int]:
        """The BM25 basis per field and the token count (a bound of the postings) of ``name``."""
        rec = self.libraries.get(name)
        basis: dict[str, float] = {}
        tokens = 0
        for f in FIELD_KINDS:
            st = rec.stats.get(f)
            basis[f] = float(st.basis) if st is not None else 0.0
            tokens += int(st.tokens) if st is not None else 0
        return basis, tokens

    def _update(
        self, name: str, active: Any, basis: dict[str, float], tokens: int, old: LibView | None, *, wait: bool
    ) -> LibView | None:
        """A stale view: re-read the manifest signatures (one small scroll); if no document
        changed, the view stands (``active`` changed for another reason: a staging entry, the
        manifest cache's TTL); else patch or rebuild it, here (``wait``) or on a helper thread.
        One update per library runs at a time."""
        if self._closed:
            return None
        if tokens > self.max_postings:
            with self._lock:
                first = name not in self._refused
                self._refused[name] = tokens
                self._views.pop(name, None)  # grown past the bound: release what it held
            if first:
                logger.warning(
                    "library %s has %d BM25 tokens, over the lexical index bound of %d postings "
                    "(max_postings); the store answers its BM25 searches", name, tokens, self.max_postings,
                )
            return None
        if name in self._refused:  # back under the bound (documents deleted): indexed again
            with self._lock:
                self._refused.pop(name, None)
        epoch = self._epoch.get(name, 0)
        sigs = self._builder.signatures(name)
        if sigs and any(b <= 0 for b in basis.values()):
            return None  # a library's first commit, its basis not recorded yet: transient
        if old is not None and old.basis == basis and old.sigs == sigs:
            return self._install(name, epoch, replace(old, active=active), old)
        if wait:
            with self._updating(name):
                v = self._views.get(name)
                active = self.libraries.active_versions(name)
                basis, _ = self._record(name)
                if v is not None and v.active is active and v.basis == basis:
                    return v  # another thread brought it up to date meanwhile
                return self._do_update(name, self._epoch.get(name, 0), active, basis, self._builder.signatures(name))
        with self._lock:
            if name not in self._jobs and not self._closed:
                job = threading.Thread(
                    target=self._run_update, args=(name, epoch), name=f"ragspine-lexical-{name}", daemon=True
                )
                self._jobs[name] = job
                job.start()
        return None

    def _updating(self, name: str) -> threading.Lock:
        with self._lock:
            return self._update_locks.setdefault(name, threading.Lock())

    def _run_update(self, name: str, epoch: int) -> None:
        try:
            with self._updating(name):
                active = self.libraries.active_versions(name)
                basis, _ = self._record(name)
                self._do_update(name, epoch, active, basis, self._builder.signatures(name))
        except Exception:
            logger.exception("lexical index update of library %s failed; the store answers", name)
        finally:
            with self._lock:
                self._jobs.pop(name, None)

    def _do_update(
        self, name: str, epoch: int, active: Any, basis: dict[str, float], sigs: dict[str, DocSig]
    ) -> LibView | None:
        """Patch the view of ``name`` (documents whose manifest entry changed) or rebuild it (a
        new basis, or most documents changed), and install it."""
        old = self._views.get(name)
        if sigs and any(b <= 0 for b in basis.values()):
            return None
        view: LibView | None
        built: tuple[LibView, list[Record]] | None
        if old is not None and old.basis == basis:
            changed = {d for d in sigs.keys() | old.sigs.keys() if sigs.get(d) != old.sigs.get(d)}
            if not changed:
                return self._install(name, epoch, replace(old, active=active), old)
            if len(changed) <= _FULL_REBUILD_FRACTION * max(1, len(old.sigs)):
                built = self._builder.patch(name, old, active, sigs, changed, basis)
            else:
                built = self._builder.build(name, active, sigs, basis)
        else:
            built = self._builder.build(name, active, sigs, basis)
        if built is None:
            return None
        view = self._install(name, epoch, built[0], old)
        if view is not None:
            self._cache.prefill(name, view, built[1])
        return view

    def _install(self, name: str, epoch: int, view: LibView | None, old: LibView | None) -> LibView | None:
        if view is None:
            return None
        with self._lock:
            if self._closed or self._epoch.get(name, 0) != epoch:
                return None  # invalidated or dropped meanwhile
            self._views[name] = view
        if old is not None and old.sigs is not view.sigs:
            gone = {d for d in old.sigs if view.sigs.get(d) != old.sigs[d]}
            if gone:
                self._cache.drop(name, gone)
        return view

