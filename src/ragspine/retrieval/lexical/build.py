"""Building a library's lexical view from the store, and patching one with the documents whose
manifest entry changed (:class:`ViewBuilder`, the update half of
:class:`~ragspine.retrieval.lexical.LexicalIndex`): the rows of the live, current, non-RESTRICTED
points, weighted exactly as the pipeline weights them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.lexical.postings import DocSig, LibView, Rows, Unsupported, field_from_rows, patched
from ragspine.scoring.bm25 import BM25Params, document_vector
from ragspine.scoring.indexed_text import CONTEXT_KEY, payload_text
from ragspine.scoring.tokenizer import tokenize
from ragspine.store.base import KIND_CHUNK, KIND_DOC, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Record, Store, Where

logger = logging.getLogger(__name__)

#: The BM25 fields indexed and the point kind that carries each.
FIELD_KINDS: dict[str, str] = {SPARSE_CHUNK: KIND_CHUNK, SPARSE_PAGE: KIND_PAGE}
#: Payload keys kept once per document (the same on every point of a version).
DOC_KEYS = ("doc_id", "version", "title", "sensitivity", "meta", "metab", "state")
#: Payload keys kept per row.
ROW_KEYS = ("page", "chunk_id", CLASSIFICATION)
#: What is read of a point when whole payloads are not cached.
SCAN_KEYS = [*DOC_KEYS, *ROW_KEYS, "kind", "text", CONTEXT_KEY]


class ViewBuilder:
    """Reads a library's points from ``store`` into a :class:`LibView`. ``whole_payloads``: read
    whole payloads (the payload cache keeps them); ``closing()`` true stops a build midway."""

    def __init__(self, store: Store, bm25: BM25Params, *, whole_payloads: bool, closing: Callable[[], bool]) -> None:
        self.store = store
        self.bm25 = bm25
        self.whole_payloads = whole_payloads
        self.closing = closing

    def signatures(self, name: str) -> dict[str, DocSig]:
        recs = self.store.scroll(name, Where(kind=KIND_DOC), fields=["doc_id", "active_version", "indexed_at"])
        return {
            r.payload["doc_id"]: (int(r.payload["active_version"]), r.payload.get("indexed_at"))
            for r in recs
            if r.payload.get("active_version")
        }

    def points(self, name: str, where: Where) -> list[Record]:
        """Points to index; whole payloads when the payload cache takes them (the text, the
        bulk of them, is read anyway)."""
        return self.store.scroll(name, where, fields=None if self.whole_payloads else SCAN_KEYS)

    def rows(
        self,
        recs: Iterable[Record],
        sigs: dict[str, DocSig],
        basis: dict[str, float],
        doc_code: dict[str, int],
        docs: list[str],
        doc_payload: list[dict[str, Any] | None],
        kept: list[Record],
    ) -> dict[str, Rows]:
        """Rows of the current, non-RESTRICTED points among ``recs``, weighted as the pipeline
        weights them; new documents get codes in ``doc_code``/``docs``/``doc_payload``; the
        points indexed are appended to ``kept``."""
        out = {f: Rows() for f in FIELD_KINDS}
        by_kind = {k: f for f, k in FIELD_KINDS.items()}
        n = 0
        for r in recs:
            p = r.payload
            f = by_kind.get(p.get("kind", ""))
            doc_id = p.get("doc_id")
            sig = sigs.get(doc_id) if isinstance(doc_id, str) else None
            if f is None or sig is None or p.get("version") != sig[0] or p.get("state") != "live":
                continue
            if point_restricted(p):
                continue
            toks = tokenize(payload_text(p))  # the context and the text, as the ingest weighed them
            if not toks:
                continue  # no vector in the store either
            n += 1
            if n % 512 == 0 and self.closing():
                raise Unsupported("closing")
            vec = document_vector(toks, basis[f], self.bm25)
            code = doc_code.get(doc_id)
            if code is None:
                code = doc_code[doc_id] = len(docs)
                docs.append(doc_id)
                doc_payload.append(None)
            if doc_payload[code] is None:
                doc_payload[code] = {k: p[k] for k in DOC_KEYS if k in p}
            rows = out[f]
            rows.ids.append(r.id)
            rows.doc.append(code)
            rows.page.append(int(p["page"]))
            rows.chunk_ids.append(p.get("chunk_id"))
            rows.classes.append(p.get(CLASSIFICATION))
            rows.terms.append(np.asarray(vec.indices, dtype=np.uint32))
            rows.vals.append(np.asarray(vec.values, dtype=np.float32))
            kept.append(r)
        return out

    def build(
        self, name: str, active: Any, sigs: dict[str, DocSig], basis: dict[str, float]
    ) -> tuple[LibView, list[Record]] | None:
        t0 = time.perf_counter()
        docs: list[str] = []
        doc_code: dict[str, int] = {}
        doc_payload: list[dict[str, Any] | None] = []
        recs: list[Record] = []
        for kind in (KIND_PAGE, KIND_CHUNK):  # passages last: the most used payloads stay cached
            recs.extend(self.points(name, Where(kind=kind, live=True)))
        kept: list[Record] = []
        try:
            rows = self.rows(recs, sigs, basis, doc_code, docs, doc_payload, kept)
            fields = {f: field_from_rows(FIELD_KINDS[f], r) for f, r in rows.items()}
        except Unsupported as e:
            logger.info("lexical index of library %s not built: %s", name, e)
            return None
        view = LibView(active, dict(sigs), dict(basis), docs, doc_code, doc_payload, fields)
        logger.info(
            "lexical index of library %s built: %d documents, %s rows, %d postings, %.1f MB in %.2f s",
            name, len(sigs), {f: fi.n_rows for f, fi in fields.items()},
            sum(fi.n_postings for fi in fields.values()), view.nbytes() / 1e6, time.perf_counter() - t0,
        )
        return view, kept

    def patch(
        self, name: str, old: LibView, active: Any, sigs: dict[str, DocSig], changed: set[str],
        basis: dict[str, float],
    ) -> tuple[LibView, list[Record]] | None:
        docs = list(old.docs)
        doc_code = dict(old.doc_code)
        doc_payload = list(old.doc_payload)
        drop = np.asarray([doc_code[d] for d in changed if d in doc_code], dtype=np.int32)
        for d in changed:
            if d in doc_code:
                doc_payload[doc_code[d]] = None
        recs: list[Record] = []
        for d in sorted(changed):
            if d in sigs:
                recs.extend(self.points(name, Where(doc_id=d, version=sigs[d][0], live=True)))
        kept: list[Record] = []
        try:
            rows = self.rows(recs, sigs, basis, doc_code, docs, doc_payload, kept)
            fields = {
                f: patched(old.fields[f], drop, field_from_rows(FIELD_KINDS[f], r)) for f, r in rows.items()
            }
        except Unsupported as e:
            logger.info("lexical index of library %s not patched: %s", name, e)
            return None
        return LibView(active, dict(sigs), dict(basis), docs, doc_code, doc_payload, fields), kept
