"""Model vectors of a library: which fields it has, which model writes each, and how a page
image becomes the stored full + pooled multivectors.

A library's record names, per vector field, the model id, revision and dimension that wrote
it, and for the page fields the pooling and quantization chosen when the library was created.
Every later ingest uses the record's choices, and a library is never searched or written with
a different model (docs/invariants.md, 5: no vectors of two models in one field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ragspine.config import Settings
from ragspine.errors import ModelMismatchError, ServiceUnavailableError
from ragspine.catalog.libraries import DENSE_CHUNK, PAGE_FDE, PAGE_FULL, PAGE_POOLED, LibraryRecord
from ragspine.models.base import EncodedPage
from ragspine.models.modelset import ModelSet
from ragspine.scoring.multivector import pool_hierarchical, pool_rows_cols
from ragspine.scoring.muvera import MuveraParams, muvera
from ragspine.store.base import DenseField


#: HNSW graph of the MUVERA encodings with ``muvera_hnsw``. Qdrant's default (m 16,
#: ef_construct 100) found 48 % of the exhaustive top 10 among 200 candidates on
#: bench/scale.py's hard workload (--run 1, 5,000 pages) where a scan of the encodings found
#: 98 %; m 64 / ef_construct 512 found 95 % there, but 73 % at 20,000 pages, where the default
#: int8 scan finds 86 % in less time (docs/visual-scale.md).
FDE_HNSW_M = 64
FDE_HNSW_EF_CONSTRUCT = 512


#: First stages that store one MUVERA encoding per page.
MUVERA_STAGES = ("muvera", "muvera_hnsw")


def identity(model: Any) -> dict[str, Any]:
    return {"model": str(model.model_id), "revision": str(model.revision), "dim": int(model.dim)}


def library_fields(settings: Settings, models: ModelSet) -> tuple[tuple[DenseField, ...], dict[str, dict[str, Any]]]:
    """Vector fields and their record entries for a library created now.

    A configured model that failed to load makes creation fail: a library created without the
    page fields could never gain them (Qdrant cannot add vector fields to a collection).
    """
    for slot in ("page", "dense"):
        if slot in models.errors:
            raise ServiceUnavailableError(
                f"the {slot} model {models.configured.get(slot)!r} is configured but failed to load "
                f"({models.errors[slot]}); fix it or unset it before creating a library"
            )
    fields: list[DenseField] = []
    encoders: dict[str, dict[str, Any]] = {}
    if models.page is not None:
        ident = identity(models.page)
        pooling = settings.page_pooling
        full = settings.page_dtype
        fields.append(DenseField(PAGE_FULL, ident["dim"], multivector=True, hnsw=False,
                                 quantization=settings.page_quantization, datatype=full))
        encoders[PAGE_FULL] = {**ident, "quantization": settings.page_quantization, "datatype": full}
        # The first stage's copy is float16 under int8 full vectors: Qdrant scans it (int8 is
        # ragspine's own column format, not a Qdrant datatype).
        dtype = "float16" if full == "int8" else full
        if pooling in MUVERA_STAGES:
            # One encoding per page, scored by inner product (MUVERA approximates MaxSim by it;
            # a cosine would rescale every page). ``muvera``: no graph, a quantized copy in RAM
            # (``Settings.fde_quantization``: TurboQuant 2-bit or int8) scanned and the best
            # rescored with the originals (store.base.FDE_OVERSAMPLING); ``muvera_hnsw``: an
            # HNSW graph over the originals.
            params = MuveraParams(dim=ident["dim"])
            fde_quant = settings.fde_quantization if pooling == "muvera" else None
            if pooling == "muvera":
                fields.append(DenseField(PAGE_FDE, params.size, distance="dot", datatype=dtype, hnsw=False,
                                         quantization=fde_quant))
            else:
                fields.append(DenseField(PAGE_FDE, params.size, distance="dot", datatype=dtype,
                                         hnsw_m=FDE_HNSW_M, hnsw_ef_construct=FDE_HNSW_EF_CONSTRUCT))
            encoders[PAGE_FDE] = {**ident, "pooling": pooling, "datatype": dtype, "quantization": fde_quant,
                                  "muvera": params.record()}
        elif pooling != "none":
            fields.append(DenseField(PAGE_POOLED, ident["dim"], multivector=True, datatype=dtype))
            encoders[PAGE_POOLED] = {**ident, "pooling": pooling, "datatype": dtype,
                                     "pool_factor": settings.page_pool_factor if pooling == "hierarchical" else None}
    if models.dense is not None:
        ident = identity(models.dense)
        fields.append(DenseField(DENSE_CHUNK, ident["dim"]))
        encoders[DENSE_CHUNK] = ident
    return tuple(fields), encoders


def fields_from_record(encoders: dict[str, dict[str, Any]]) -> tuple[DenseField, ...]:
    """The vector fields a library with these record entries was created with: the inverse of
    :func:`library_fields` (a test checks it for every first stage, datatype and quantization),
    which is how a restored library gets the layout of the one backed up on any backend."""
    out: list[DenseField] = []
    full = encoders.get(PAGE_FULL)
    if full is not None:
        out.append(DenseField(PAGE_FULL, int(full["dim"]), multivector=True, hnsw=False,
                              quantization=full.get("quantization"), datatype=full.get("datatype") or "float32"))
    fde = encoders.get(PAGE_FDE)
    if fde is not None:
        pooling = fde.get("pooling", "muvera")
        size = MuveraParams.from_record(fde["muvera"]).size
        dtype = fde.get("datatype") or "float32"
        if pooling == "muvera":  # a record older than the choice scanned an int8 copy
            out.append(DenseField(PAGE_FDE, size, distance="dot", datatype=dtype, hnsw=False,
                                  quantization=fde.get("quantization", "scalar")))
        else:
            out.append(DenseField(PAGE_FDE, size, distance="dot", datatype=dtype,
                                  hnsw_m=FDE_HNSW_M, hnsw_ef_construct=FDE_HNSW_EF_CONSTRUCT))
    pooled = encoders.get(PAGE_POOLED)
    if pooled is not None:
        out.append(DenseField(PAGE_POOLED, int(pooled["dim"]), multivector=True,
                              datatype=pooled.get("datatype") or "float32"))
    dense = encoders.get(DENSE_CHUNK)
    if dense is not None:
        out.append(DenseField(DENSE_CHUNK, int(dense["dim"])))
    return tuple(out)


@dataclass(frozen=True)
class LibraryModels:
    """What a library's vectors need, checked against the models at hand.

    ``page`` / ``dense`` is the model to use for that library (None when the library has no
    such field, or the model is missing); ``*_missing`` says why a field the library has cannot
    be served now.
    """

    page: Any = None
    dense: Any = None
    #: The library's first stage: ``muvera`` (with ``muvera`` its encoding parameters),
    #: ``rowcol`` / ``hierarchical`` (a pooled multivector), None (exhaustive MaxSim).
    pooling: str | None = None
    pool_factor: int | None = None
    muvera: MuveraParams | None = None
    #: The quantized copy a ``muvera`` first stage scans (``turbo2`` / ``scalar``; a library
    #: recorded before the choice existed has ``scalar``); None for other first stages.
    fde_quantization: str | None = None
    page_missing: str | None = None
    dense_missing: str | None = None
    has_page: bool = False
    has_dense: bool = False

    def require_writable(self, library: str) -> None:
        """Ingest must write every vector field the library has, or nothing."""
        for what, missing in (("page", self.page_missing), ("dense", self.dense_missing)):
            if missing:
                raise ServiceUnavailableError(
                    f"cannot ingest into library '{library}': its {what} vectors need {missing}. "
                    "Nothing was changed; retry when the model is back"
                )


def _same(have: dict[str, Any], model: Any) -> bool:
    ident = identity(model)
    return all(have.get(k) == ident[k] for k in ("model", "revision", "dim"))


def library_models(rec: LibraryRecord, models: ModelSet) -> LibraryModels:
    """Match the library's vector fields with the loaded models.

    Raises :class:`ModelMismatchError` when a model is loaded for a field the library has but
    is a different model (id, revision or dimension): its vectors would be meaningless there.
    """
    out: dict[str, Any] = {}
    for slot, fname, model in (("page", PAGE_FULL, models.page), ("dense", DENSE_CHUNK, models.dense)):
        have = rec.encoders.get(fname)
        if have is None:
            continue
        out[f"has_{slot}"] = True
        if model is None:
            why = models.errors.get(slot)
            out[f"{slot}_missing"] = (
                f"the {slot} model {have['model']!r}, which failed to load ({why})" if why
                else f"the {slot} model {have['model']!r}, which this server does not load "
                f"(set RAGSPINE_{'PAGE' if slot == 'page' else 'DENSE'}_MODEL)"
            )
            continue
        if not _same(have, model):
            raise ModelMismatchError(
                f"library '{rec.name}' field '{fname}' was indexed with {have['model']} "
                f"(revision {have['revision']}, dim {have['dim']}), but this server loads "
                f"{model.model_id} (revision {model.revision}, dim {model.dim}). Re-index into a "
                "new library, or configure the model it was built with."
            )
        out[slot] = model
    pooled = rec.encoders.get(PAGE_POOLED)
    if pooled is not None:
        out["pooling"] = pooled.get("pooling", "rowcol")
        out["pool_factor"] = pooled.get("pool_factor")
    fde = rec.encoders.get(PAGE_FDE)
    if fde is not None:
        out["pooling"] = fde.get("pooling", "muvera")
        out["muvera"] = MuveraParams.from_record(fde["muvera"])
        out["fde_quantization"] = fde.get("quantization", "scalar" if out["pooling"] == "muvera" else None)
    return LibraryModels(**out)


def first_stage_vectors(page: EncodedPage, lm: LibraryModels) -> dict[str, np.ndarray]:
    """The first-stage copy of a page multivector, by field: its MUVERA encoding, its pooled
    multivector, or nothing (a library searched exhaustively)."""
    if lm.muvera is not None:
        return {PAGE_FDE: muvera(lm.muvera).document(page.vectors)}
    if lm.pooling is not None:
        return {PAGE_POOLED: pooled_vectors(page, lm.pooling, lm.pool_factor)}
    return {}


def first_stage_query(query: np.ndarray, lm: LibraryModels) -> tuple[str | None, list[float] | None]:
    """The first-stage field of a library and, for a MUVERA library, the query's encoding
    (a pooled multivector field is searched with the query multivector itself)."""
    if lm.muvera is not None:
        return PAGE_FDE, muvera(lm.muvera).query(query).tolist()
    if lm.pooling is not None:
        return PAGE_POOLED, None
    return None, None


def pooled_vectors(page: EncodedPage, pooling: str, pool_factor: int | None) -> np.ndarray:
    """The prefetch copy of a page multivector.

    Row/column pooling needs the patch grid; a model that gives none (or a page whose grid is
    unknown) falls back to hierarchical pooling with factor 32, so every page has a pooled copy.
    """
    if pooling == "rowcol" and page.grid is not None:
        return pool_rows_cols(page.vectors, page.image_mask, page.grid)
    return pool_hierarchical(page.vectors, int(pool_factor or 32))
