"""The content key of an ingest: what decides whether ingesting a PDF again changes anything -
its bytes, its metadata and every setting that shapes what is stored. Equal keys: the ingest
is ``unchanged``. A new setting that changes what an ingest stores belongs here."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ragspine.config import Settings
from ragspine.indexing.context import HEADING_LINES, MAX_CONTEXT, PAGE_CONTEXT
from ragspine.indexing.metadata import DocumentMetadata
from ragspine.indexing.profile import PROFILE_VERSION
from ragspine.policy import PagePolicy


def content_key(pdf_sha: str, meta: DocumentMetadata, s: Settings, policy: PagePolicy, bm25_revision: Any,
                ocr_key: Any) -> str:
    basis = {
        "pdf": pdf_sha,
        "meta": meta.model_dump(mode="json"),
        "chunk": [s.chunk_chars, s.chunk_overlap],
        "policy": [sorted(policy.markers), policy.band],
        "bm25": bm25_revision,
        "thumb": [s.thumbnail_dpi, s.thumbnail_max_px],
        "ocr": ocr_key,
        "tables": s.tables,
        # What the document's profile and its passages' context are derived with.
        "profile": PROFILE_VERSION,
        "context": [MAX_CONTEXT, PAGE_CONTEXT, HEADING_LINES] if s.passage_context else None,
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()
