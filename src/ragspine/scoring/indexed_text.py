"""The text BM25 and the dense channel index for a stored point: its own text, after the short
context the ingest gave it (its document's title, issuer and period, its section path; see
``ragspine.indexing.context``), kept in the payload under :data:`CONTEXT_KEY`.

The payload's ``text`` stays the passage's own (citations, hits, reranking read it); every
place that weighs or encodes a point from its payload (the ingest, BM25 re-weighting, the dense
phase and backfill, the in-memory lexical index) reads :func:`payload_text`, so all of them see
the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Payload key of a point's context (absent or empty: none).
CONTEXT_KEY = "context"
#: Between the context and the text: a paragraph break, so no CJK bigram or word spans the two.
CONTEXT_SEP = "\n\n"


def indexed_text(text: str, context: str | None = None) -> str:
    """What is indexed for ``text`` given its ``context``."""
    return f"{context}{CONTEXT_SEP}{text}" if context else text


def payload_text(payload: Mapping[str, Any]) -> str:
    """What is indexed for a stored point (its payload's ``text`` and context)."""
    return indexed_text(str(payload.get("text") or ""), payload.get(CONTEXT_KEY) or None)
