"""Libraries, documents, ingest jobs, the query chain's glossary and gaps, and errors, as the
API sends them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragspine.api._base import Reply
from ragspine.api.names import DOC_ID_PATTERN, FIELD_NAME_PATTERN, LIBRARY_NAME_PATTERN

OcrState = Literal["none", "pending", "done", "failed"]
DenseState = Literal["none", "pending", "done"]


class Problem(Reply):
    """Every error (RFC 9457 ``application/problem+json``): ``type`` is stable, ``detail``
    names the problem."""

    type: str = Field(description="/problems/<kind>", examples=["/problems/unknown-library"])
    title: str = Field(examples=["Not found"])
    status: int = Field(ge=400, le=599, examples=[404])
    detail: str = Field(examples=["unknown library 'reports'"])


class CreateLibrary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Declared, and enforced by the server with its own message (the pattern, in words).
    name: str = Field(description="1-63 lowercase letters, digits, '-' or '_'",
                      json_schema_extra={"pattern": LIBRARY_NAME_PATTERN})
    # The layout: a Qdrant server's shards and copies (the embedded store refuses more than one),
    # and which vector fields keep their originals on disk. Unset: RAGSPINE_SHARD_NUMBER and the
    # others, else the server's defaults; on a server page_full goes on disk.
    shard_number: int | None = Field(None, ge=1, le=1000, description="shards (Qdrant server only)")
    replication_factor: int | None = Field(None, ge=1, le=1000, description="copies of each shard "
                                           "(Qdrant server only)")
    write_consistency_factor: int | None = Field(None, ge=1, le=1000, description="copies a write waits "
                                                 "for, at most replication_factor (Qdrant server only)")
    on_disk: dict[Literal["page_full", "page_pooled", "page_fde", "dense_chunk"], bool] | None = Field(
        None, description="vector field -> keep its originals on disk "
                                            "(page_full, page_pooled, page_fde, dense_chunk); default: "
                                            "page_full on a Qdrant server, nothing on the embedded store")


class UploadMetadata(BaseModel):
    """The ``metadata`` part of an upload (a JSON object). Other fields are kept as custom,
    filterable metadata: a name of letters, digits and '_', a string, number, boolean or list
    of them."""

    model_config = ConfigDict(extra="allow", json_schema_extra={
        "propertyNames": {"pattern": FIELD_NAME_PATTERN},
        "additionalProperties": {"anyOf": [{"type": ["string", "number", "boolean"]},
                                           {"type": "array", "items": {"type": ["string", "number", "boolean"]}}]}})

    doc_id: str | None = Field(None, json_schema_extra={"pattern": DOC_ID_PATTERN},
                               description="default: from the file name")
    title: str | None = None
    entity: str | None = None
    period: str | int | None = None
    topic: str | None = None
    geography: str | None = None
    language: str | None = None
    sensitivity: str | None = Field(None, description="RESTRICTED: the document is not indexed")
    page_sensitivity: dict[str, str] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": "^[1-9][0-9]{0,5}$"}},
        description='1-based page number -> level, e.g. {"3": "RESTRICTED"}')


class LibraryCreated(Reply):
    name: str
    created_at: float
    #: The vector fields' model identities (model, revision, dim) the library is written with.
    encoders: dict[str, Any]
    #: Shards, copies and on-disk vector fields (None: the store's default).
    layout: dict[str, Any] = Field(default_factory=dict)


class LibrarySummary(Reply):
    name: str
    #: None when the library cannot be read now (``problem`` says why and what to run).
    documents: int | None
    pages: int | None
    problem: str | None = None


class LibraryList(Reply):
    libraries: list[LibrarySummary]


class DenseAdded(Reply):
    library: str
    model: str
    revision: str
    passages: int
    #: The library already had this model's vectors: nothing was done.
    already: bool
    seconds: float


class OutlineEntry(Reply):
    """A section of a document: its heading, its level (1 = top) and the pages it spans."""

    title: str
    level: int = Field(ge=1)
    #: 1-based physical page where the section starts, and its last page.
    page: int = Field(ge=1)
    end_page: int = Field(ge=1)


class DocumentProfile(Reply):
    """The document as a whole, derived at ingest from its kept pages, PDF metadata and outline,
    and file name; the caller's metadata wins. ``sources`` says where each field came from."""

    title: str | None = None
    #: The company or organisation that issued it (the caller's ``entity``, when given).
    issuer: str | None = None
    #: ``FY2018``, ``2018-Q3``, ``2016-06-08``, ``2018``, or the caller's own.
    period: str | None = None
    fiscal_year: int | None = None
    #: 10-K, 10-Q, 8-K, annual_report, earnings_release, statistical_bulletin, research_paper,
    #: slides, manual, brochure, report.
    doc_type: str | None = None
    language: str | None = None
    outline: list[OutlineEntry] = Field(default_factory=list)
    #: field -> user | pdf_metadata | outline | headings | filename | first_pages | running_header | page_text
    sources: dict[str, str] = Field(default_factory=dict)
    #: Other names of the issuer found in the document (file name, cover, running header).
    aliases: list[str] = Field(default_factory=list)
    #: Physical page (as a string key) -> the numbers printed on it, for the pages whose printed
    #: number is not their place in the file (the PDF's page labels, else the header or footer).
    printed_pages: dict[str, list[int]] = Field(default_factory=dict)
    #: ``figure:3`` / ``table:1-1`` -> the pages whose caption lines begin with that label.
    captions: dict[str, list[int]] = Field(default_factory=dict)


class Document(Reply):
    doc_id: str
    title: str | None = None
    version: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    filename: str | None = None
    pages_total: int | None = None
    pages_indexed: int | None = None
    #: 1-based pages the RESTRICTED policy dropped (never indexed).
    pages_dropped: list[int] = Field(default_factory=list)
    page_numbers: list[int] = Field(default_factory=list)
    #: [width, height] in PDF points, one per ``page_numbers`` entry.
    page_sizes: list[list[float]] = Field(default_factory=list)
    chunks: int | None = None
    indexed_at: float | None = None
    ocr: OcrState = "none"
    ocr_pending_pages: list[int] = Field(default_factory=list)
    #: ``pending``: searchable by its words, its passages' dense vectors still being encoded.
    dense: DenseState = "none"
    #: None for a document indexed before profiles existed (its next ingest derives one).
    profile: DocumentProfile | None = None


class Passage(Reply):
    chunk_id: str
    #: x0, y0, x1, y1 in PDF points, origin top-left.
    bbox: list[float]
    text: str
    text_source: Literal["pdf", "ocr"] = "pdf"


class Page(Reply):
    """A page's text and passages: what a hit on it cites."""

    library_id: str
    doc_id: str
    title: str | None = None
    page: int
    version: int
    width: float | None = None
    height: float | None = None
    text: str
    passages: list[Passage]
    #: The document's metadata.
    metadata: dict[str, Any] = Field(default_factory=dict)
    thumbnail_url: str | None = None


class DocumentList(Reply):
    documents: list[Document]


class IngestResult(Reply):
    library: str
    doc_id: str | None
    status: Literal["indexed", "unchanged", "dropped_by_policy", "ocr_pending"]
    version: int | None = None
    pages_total: int = 0
    pages_indexed: int = 0
    pages_dropped: list[int] = Field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    warnings: list[str] = Field(default_factory=list)
    pages_ocr: int = 0
    ocr: OcrState = "none"
    ocr_pending_pages: list[int] = Field(default_factory=list)
    ocr_pages_read: int = 0
    ocr_seconds: float = 0.0
    dense: DenseState = "none"
    dense_pending: int = 0
    #: Seconds of each ingest stage (parse, render_wait, encode_wait, points, write_wait, commit,
    #: and the encode and writer threads' own encode and write): which one bounds this ingest.
    stages: dict[str, float] = Field(default_factory=dict)


class Job(Reply):
    """An upload's ingest. It succeeds when the document's first phase is live; ``ocr`` then
    reports the pages OCR still reads (``pending``) until they are live (``done``) or not
    (``failed``, ``ocr_error``)."""

    id: str
    state: Literal["queued", "running", "succeeded", "failed"]
    library: str
    filename: str | None = None
    doc_id: str | None = None
    status: str | None = None
    pages_done: int = 0
    pages_total: int = 0
    ocr_pages_done: int = 0
    ocr_pages_total: int = 0
    ocr: OcrState = "none"
    ocr_result: IngestResult | None = None
    ocr_error: Problem | None = None
    pages_dropped: list[int] = Field(default_factory=list)
    result: IngestResult | None = None
    error: Problem | None = None
    created_at: float
    finished_at: float | None = None
    #: The server process (replica) that runs or ran the job.
    replica: str | None = None


class Glossary(Reply):
    library: str
    file: str | None = None
    uploaded_at: float | None = None
    terms: int
    #: ``{term, synonyms, kind}`` (only in a GET of the glossary).
    entries: list[dict[str, Any]] | None = None


class Gap(Reply):
    library: str
    gap_id: str
    query: str
    filters: list[dict[str, Any]] = Field(default_factory=list)
    #: The filter of the API key it was searched through (empty: none). A key with a filter
    #: sees only the gaps searched through that same filter.
    scope: list[dict[str, Any]] = Field(default_factory=list)
    hit_count: int
    first_seen: float
    last_seen: float
    reason: str


class GapList(Reply):
    gaps: list[Gap]


class GapsCleared(Reply):
    deleted: int


class RestoredLibrary(Reply):
    """One library a restore wrote."""

    name: str = Field(description="its name here")
    source: str = Field(alias="from", description="its name in the backup")
    documents: int = Field(ge=0)
    points: int = Field(ge=0, description="points written: passages, pages, manifest entries, glossary, gaps")
    thumbnails: int = Field(ge=0)
    graph_sources: int = Field(ge=0, description="relation-graph sources (0: built from the documents on first use)")
    pending_ocr: int = Field(ge=0, description="documents whose OCR second phase is still owed (it resumes here)")
    vectors: dict[str, str] = Field(description="what became of each model vector field: kept, dropped (BM25 "
                                    "only), or converted for this store")


class Restored(Reply):
    """The answer of ``POST /v1/restore``."""

    libraries: list[RestoredLibrary]
    seconds: float = Field(ge=0)
    bytes: int = Field(ge=0, description="size of the backup file")
