"""A library's metric glossary: terms and their synonyms, uploaded as CSV or JSON.

CSV: a header with ``term,synonyms`` (optional ``kind``: ``metric`` (default), ``entity`` or
``other``); synonyms separated by ``|``. Rows are numbered as a spreadsheet shows them (the
header is row 1). JSON: a list of ``{"term", "synonyms", "kind"}`` objects (or
``{"entries": [...]}``), numbered from 1; synonyms as a list or a ``|``-separated string.

The whole file is validated before anything changes; every bad row is named (up to
:data:`MAX_ERRORS_SHOWN` of them) in one 422. The glossary is one point of ``kind=glossary`` in
the library's collection, so every replica reads the same one and it goes with the library.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass
from typing import Any

from ragspine.catalog import Libraries, point_id
from ragspine.errors import InvalidRequestError, NotFoundError, OversizeError
from ragspine.graph import norm
from ragspine.store.base import PointData, Store

KIND_GLOSSARY = "glossary"
GLOSSARY_POINT = point_id("glossary")
#: Largest glossary file accepted, in bytes, and most rows.
MAX_GLOSSARY_BYTES = 1024 * 1024
MAX_GLOSSARY_ROWS = 5000
#: Most synonyms of one term, and the length bounds of a term or synonym (in characters; a
#: one-character synonym would match inside far too many queries).
MAX_SYNONYMS = 20
MIN_TERM_CHARS = 2
MAX_TERM_CHARS = 200
KINDS: tuple[str, ...] = ("metric", "entity", "other")
SEPARATOR = "|"
MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class GlossaryEntry:
    term: str
    synonyms: tuple[str, ...]
    kind: str = "metric"

    def names(self) -> tuple[str, ...]:
        """The term, then its synonyms: one group of interchangeable names."""
        return (self.term, *self.synonyms)

    def to_json(self) -> dict[str, Any]:
        return {"term": self.term, "synonyms": list(self.synonyms), "kind": self.kind}


class GlossaryError(InvalidRequestError):
    """A glossary file that cannot be used (422, every bad row named)."""

    type = "invalid-glossary"
    title = "Invalid glossary"


def parse_glossary(data: bytes, filename: str = "glossary.csv") -> list[GlossaryEntry]:
    """The entries of a glossary file (CSV or JSON: by extension, else by the first character)."""
    if len(data) > MAX_GLOSSARY_BYTES:
        raise OversizeError(f"the glossary is {len(data)} bytes; the limit is {MAX_GLOSSARY_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise GlossaryError(f"the glossary is not UTF-8 (byte {e.start} cannot be decoded)") from None
    if not text.strip():
        raise GlossaryError("the glossary is empty")
    is_json = filename.lower().endswith(".json") or (
        not filename.lower().endswith(".csv") and text.lstrip()[:1] in "[{"
    )
    rows = _json_rows(text) if is_json else _csv_rows(text)
    if len(rows) > MAX_GLOSSARY_ROWS:
        raise GlossaryError(f"the glossary has {len(rows)} rows; the limit is {MAX_GLOSSARY_ROWS}")
    entries: list[GlossaryEntry] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for n, row in rows:
        try:
            entry = _entry(row)
        except ValueError as e:
            errors.append(f"row {n}: {e}")
            continue
        key = norm(entry.term)
        if key in seen:
            errors.append(f"row {n}: term {entry.term!r} is already defined in row {seen[key]}")
            continue
        seen[key] = n
        entries.append(entry)
    if errors:
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise GlossaryError("; ".join(errors[:MAX_ERRORS_SHOWN]) + more)
    if not entries:
        raise GlossaryError("the glossary has a header but no rows")
    return entries


def _csv_rows(text: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in ("term", "synonyms") if c not in header]
    if missing:
        raise GlossaryError(f"the CSV header lacks {', '.join(missing)} (expected term,synonyms[,kind])")
    unknown = [h for h in header if h not in ("term", "synonyms", "kind")]
    if unknown:
        raise GlossaryError(f"unknown CSV column(s) {', '.join(unknown)} (expected term,synonyms[,kind])")
    reader.fieldnames = header
    out: list[tuple[int, dict[str, Any]]] = []
    try:
        for row in reader:
            if None in row:
                out.append((reader.line_num, {"_error": "more fields than the header has columns"}))
            elif any((v or "").strip() for v in row.values()):
                out.append((reader.line_num, row))
    except csv.Error as e:
        raise GlossaryError(f"the CSV cannot be read at line {reader.line_num}: {e}") from None
    return out


def _json_rows(text: str) -> list[tuple[int, dict[str, Any]]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GlossaryError(f"the glossary is not valid JSON: {e.msg} at line {e.lineno}") from None
    if isinstance(doc, dict):
        doc = doc.get("entries")
    if not isinstance(doc, list):
        raise GlossaryError('a JSON glossary is a list of {"term", "synonyms"} objects, or {"entries": [...]}')
    return [(i, row if isinstance(row, dict) else {"_error": "not an object"}) for i, row in enumerate(doc, 1)]


def _entry(row: dict[str, Any]) -> GlossaryEntry:
    if "_error" in row:
        raise ValueError(row["_error"])
    extra = sorted(set(row) - {"term", "synonyms", "kind"})
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(extra)}")
    term = _name(row.get("term"), "term")
    raw = row.get("synonyms")
    if isinstance(raw, str):
        raw = raw.split(SEPARATOR)
    if not isinstance(raw, list):
        raise ValueError("synonyms must be a list or a '|'-separated string")
    synonyms: list[str] = []
    for s in raw:
        if isinstance(s, str) and not s.strip():
            continue
        name = _name(s, "synonym")
        if norm(name) != norm(term) and norm(name) not in {norm(x) for x in synonyms}:
            synonyms.append(name)
    if not synonyms:
        raise ValueError(f"term {term!r} has no synonym")
    if len(synonyms) > MAX_SYNONYMS:
        raise ValueError(f"term {term!r} has {len(synonyms)} synonyms; the limit is {MAX_SYNONYMS}")
    kind = row.get("kind") or "metric"
    if not isinstance(kind, str) or kind.strip().lower() not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    return GlossaryEntry(term, tuple(synonyms), kind.strip().lower())


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} is empty")
    name = " ".join(value.split())
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise ValueError(f"{what} {name[:40]!r} contains control characters")
    if not MIN_TERM_CHARS <= len(name) <= MAX_TERM_CHARS:
        raise ValueError(f"{what} {name[:40]!r} must be {MIN_TERM_CHARS} to {MAX_TERM_CHARS} characters")
    return name


class Glossaries:
    """Each library's glossary, kept in the library's own collection."""

    def __init__(self, store: Store, libraries: Libraries) -> None:
        self.store = store
        self.libraries = libraries

    def upload(self, library: str, data: bytes, filename: str = "glossary.csv") -> dict[str, Any]:
        """Replace the library's glossary with the file's (validated in full first)."""
        self.libraries.open(library)
        entries = parse_glossary(data, filename)
        payload = {"kind": KIND_GLOSSARY, "file": filename, "uploaded_at": time.time(),
                   "entries": [e.to_json() for e in entries]}
        self.store.upsert(library, [PointData(id=GLOSSARY_POINT, payload=payload)])
        return self._summary(library, payload)

    def get(self, library: str) -> dict[str, Any]:
        self.libraries.open(library)
        recs = self.store.retrieve(library, [GLOSSARY_POINT])
        if not recs:
            raise NotFoundError(f"library '{library}' has no glossary")
        return {**self._summary(library, recs[0].payload), "entries": recs[0].payload["entries"]}

    def delete(self, library: str) -> None:
        self.get(library)  # 404 when there is none
        self.store.delete_ids(library, [GLOSSARY_POINT])

    def entries(self, library: str) -> list[GlossaryEntry]:
        """The entries (none when the library has no glossary)."""
        recs = self.store.retrieve(library, [GLOSSARY_POINT], fields=["entries"])
        if not recs:
            return []
        return [GlossaryEntry(e["term"], tuple(e["synonyms"]), e.get("kind", "metric"))
                for e in recs[0].payload.get("entries", [])]

    @staticmethod
    def _summary(library: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"library": library, "file": payload.get("file"), "uploaded_at": payload.get("uploaded_at"),
                "terms": len(payload.get("entries", []))}
