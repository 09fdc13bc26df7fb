"""Backup and restore of libraries, as one file that restores on either backend.

A backup holds, per library: its record (with the model identity of every vector field), the
document manifest, every point of the active versions with all its vectors, the glossary, the
knowledge-gap log, the folder-sync record, the relation graph, the page thumbnails, and the PDFs
whose OCR is still owed (:mod:`ragspine.backup.archive` has the layout).

- :func:`~ragspine.backup.dump.backup` writes it under each library's write lock (and writer
  lease), so it is consistent while the server keeps serving and writing: a commit waits for it.
- :func:`~ragspine.backup.load.restore` checks the whole file first, refuses a library whose
  vectors came from other models than those configured (unless told to keep BM25 only), and
  writes a new library: record first (marked *restoring*, which every reader refuses), points,
  graph, thumbnails, pending PDFs, then the record unmarked. Any failure removes what it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragspine.catalog import Libraries
from ragspine.graph import GraphStore
from ragspine.indexing import Thumbnails
from ragspine.indexing.ocr_phase import PendingSources
from ragspine.models.modelset import ModelSet
from ragspine.store.base import Store


@dataclass(frozen=True)
class Parts:
    """What a backup reads and a restore writes: an engine's store and what lives beside it."""

    store: Store
    libraries: Libraries
    graphs: GraphStore
    thumbnails: Thumbnails
    pending: PendingSources
    models: ModelSet


@dataclass
class LibraryCounts:
    name: str
    documents: int = 0
    points: int = 0
    thumbnails: int = 0
    graph_sources: int = 0
    pending_ocr: int = 0
    #: Restore only: the library's name in the backup, and what became of each vector field.
    source: str | None = None
    vectors: dict[str, str] = field(default_factory=dict)
    #: Files of the embedded store's native copy written (backup) or moved into place (restore);
    #: 0: the points alone (ragspine.backup.native). Logged, not part of the API's answer.
    native_files: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "documents": self.documents, "points": self.points,
                               "thumbnails": self.thumbnails, "graph_sources": self.graph_sources,
                               "pending_ocr": self.pending_ocr}
        if self.source is not None:
            out.update({"from": self.source, "vectors": self.vectors})
        return out


@dataclass
class Report:
    libraries: list[LibraryCounts]
    seconds: float = 0.0
    bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"libraries": [c.to_json() for c in self.libraries], "seconds": round(self.seconds, 3),
                "bytes": self.bytes}


__all__ = ["LibraryCounts", "Parts", "Report"]
