"""A document's phase states, as its manifest entry and its ingest result say them: shared by
the phases that set them and the result that reports them, so neither imports the other."""

from __future__ import annotations

from typing import Literal

#: The OCR second phase (:mod:`ragspine.indexing.ocr_phase`): ``none`` (nothing owed),
#: ``pending``, ``done``, ``failed``.
OcrState = Literal["none", "pending", "done", "failed"]
#: The dense phase (:mod:`ragspine.indexing.dense_phase`): ``none`` (its library has no dense
#: model), ``pending`` (passages still without a vector), ``done``.
DenseState = Literal["none", "pending", "done"]
