"""What the document-level channels read: per library, a value built from each committed
document's manifest entry, rebuilt only when the library's active versions change."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ragspine.catalog import Libraries

T = TypeVar("T")


@dataclass
class _Built(Generic[T]):
    active: Mapping[str, int]  # the active-versions dict it was built for (compared by identity)
    docs: dict[str, T]


class EntryIndex(Generic[T]):
    """``get(library, active)``: ``doc_id -> build(entry)`` for the library's committed documents
    (those ``build`` answers ``None`` for are left out). ``active`` is
    :meth:`Libraries.active_versions`'s dict, which stays the same object while nothing changes."""

    def __init__(self, libraries: Libraries, build: Callable[[Mapping[str, Any]], T | None]) -> None:
        self.libraries = libraries
        self.build = build
        self._built: dict[str, _Built[T]] = {}
        self._lock = threading.Lock()

    def get(self, library: str, active: Mapping[str, int]) -> dict[str, T]:
        with self._lock:
            b = self._built.get(library)
        if b is not None and b.active is active:
            return b.docs
        docs: dict[str, T] = {}
        for e in self.libraries.doc_entries(library):
            if e.get("doc_id") in active and e.get("active_version"):
                v = self.build(e)
                if v is not None:
                    docs[e["doc_id"]] = v
        with self._lock:
            self._built[library] = _Built(active, docs)
        return docs
