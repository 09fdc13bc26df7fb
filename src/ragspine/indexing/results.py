"""What one ingest call did (:class:`IngestResult`): the REST API's and the CLI's report of a
document's first or only phase, and of its second (OCR) phase."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ragspine.indexing.states import DenseState, OcrState


@dataclass
class IngestResult:
    library: str
    doc_id: str | None
    #: ``ocr_pending``: every page needs OCR, so nothing could go live in a first phase; the
    #: second (:meth:`Indexer.finish_ocr`) indexes the document.
    status: Literal["indexed", "unchanged", "dropped_by_policy", "ocr_pending"]
    version: int | None = None
    pages_total: int = 0
    pages_indexed: int = 0
    pages_dropped: list[int] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    #: Pages whose pixels OCR read text from (see :mod:`ragspine.indexing.ocr`).
    pages_ocr: int = 0
    #: The document's OCR state (:mod:`ragspine.indexing.ocr_phase`): ``pending`` after a
    #: first phase that held ``ocr_pending_pages`` back until their OCR is read.
    ocr: OcrState = "none"
    ocr_pending_pages: list[int] = field(default_factory=list)
    #: Pages this call read regions of with OCR (a first phase: the stamp-sized images only),
    #: and the seconds it waited for them.
    ocr_pages_read: int = 0
    ocr_seconds: float = 0.0
    #: The document's dense state (:mod:`ragspine.indexing.dense_phase`): ``pending`` while
    #: ``dense_pending`` of its passages wait for their vectors after the commit.
    dense: DenseState = "none"
    dense_pending: int = 0
    #: Seconds of each stage of this call (:mod:`ragspine.indexing.stages`), when it wrote a
    #: version.
    stages: dict[str, float] = field(default_factory=dict)

    @classmethod
    def unchanged(cls, library: str, prev: dict[str, Any], seconds: float) -> IngestResult:
        """The answer to an ingest that changes nothing: what the live version's entry ``prev``
        says of it."""
        return cls(
            library, prev["doc_id"], "unchanged", prev["active_version"], prev.get("pages_total", 0),
            prev.get("pages_indexed", 0), list(prev.get("pages_dropped", [])), prev.get("chunks", 0), seconds,
            ocr=prev.get("ocr", "none"), ocr_pending_pages=list(prev.get("ocr_pending_pages", [])),
            dense=prev.get("dense", "none"),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
