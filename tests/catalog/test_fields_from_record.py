"""A library's vector fields come back from its record exactly as they were created: what a
restore relies on to rebuild a library's layout on any backend."""

from __future__ import annotations

from itertools import product
from types import SimpleNamespace

import pytest

from ragspine.catalog import fields_from_record, library_fields
from ragspine.config import Settings
from ragspine.store.base import DenseField

POOLINGS = ["muvera", "muvera_hnsw", "rowcol", "hierarchical", "none"]


def _models(page: bool, dense: bool) -> SimpleNamespace:
    page_model = SimpleNamespace(model_id="vidore/colqwen2-v1.0", revision="abc123", dim=128) if page else None
    dense_model = SimpleNamespace(model_id="intfloat/multilingual-e5-small", revision="r1", dim=384) if dense else None
    return SimpleNamespace(page=page_model, dense=dense_model, errors={}, configured={})


CASES = [
    *[dict(page_pooling=p, page_vector_dtype=d, first_stage_quantization=q)
      for p, d, q in product(POOLINGS, ["int8", "float16", "float32"], ["turbo2", "scalar"])],
    dict(page_pooling="rowcol", page_vector_dtype="float16", page_quantization="scalar"),
    dict(page_pooling="muvera", page_vector_dtype="float32", page_quantization="binary"),
    dict(page_pooling="hierarchical", page_pool_factor=8, page_vector_dtype="float16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("dense", [False, True])
def test_the_fields_a_library_was_created_with_come_back_from_its_record(case: dict, dense: bool, tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, dense_model="none", **case)
    fields, encoders = library_fields(settings, _models(page=True, dense=dense))  # type: ignore[arg-type]
    assert fields_from_record(encoders) == fields
    assert any(f.name == "page_full" for f in fields)


def test_a_text_library_has_no_model_fields_and_a_dense_one_has_one(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, dense_model="none")
    assert fields_from_record(library_fields(settings, _models(False, False))[1]) == ()
    assert fields_from_record(library_fields(settings, _models(False, True))[1]) == (DenseField("dense_chunk", 384),)


def test_a_muvera_record_from_before_the_quantization_choice_scans_int8() -> None:
    """Records written before ``quantization`` was recorded for the MUVERA copy scanned a
    scalar (int8) copy: library_models reads them so, and so does the layout."""
    from ragspine.scoring.muvera import MuveraParams

    params = MuveraParams(dim=128)
    fde = {"model": "m", "revision": "r", "dim": 128, "pooling": "muvera", "datatype": "float16",
           "muvera": params.record()}
    (field,) = fields_from_record({"page_fde": fde})
    assert field.quantization == "scalar" and field.size == params.size and not field.hnsw
