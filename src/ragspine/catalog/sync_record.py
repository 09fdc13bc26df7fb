"""Which documents a folder sync owns (``ragspine sync``): one ``kind=sync_file`` point per
(root, document) in the library's own collection, so the record lives and dies with the
library on both store backends.

A root is the folder's resolved absolute path. An entry holds the file's fingerprint when it
was last read (size, mtime in ns, SHA-256 of its bytes, SHA-256 of its effective metadata) and
the content keys (``Indexer.content_key``) this root may have committed for the document: the
manifest entry of a document is this root's only while its ``content_key`` is one of them, so
a document replaced by an upload since is never deleted or overwritten by the sync.

States: ``claimed`` (written and flushed *before* the ingest: a crash can never leave a
document of this root that the record does not name), ``indexed`` (the ingest committed
``keys[-1]``), ``dropped`` (the policy dropped the whole document: nothing of it is in the
index, and the entry keeps no name, path or hash of it either), ``failed`` (the bytes of
``keys[-1]`` cannot be indexed: a corrupt, encrypted, empty or text-less PDF; ``error`` says
why, and the file is not read again until it, its metadata or the settings change).

The payload never uses the key ``doc_id``: deleting a document deletes every point that
carries its ``doc_id`` (``Indexer.delete``), and the record must outlive that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ragspine.catalog.ids import point_id
from ragspine.catalog.libraries import Libraries
from ragspine.store.base import PointData, Where

KIND_SYNC = "sync_file"
SyncState = Literal["claimed", "indexed", "dropped", "failed"]
STATES: tuple[str, ...] = ("claimed", "indexed", "dropped", "failed")


def sync_point(root: str, doc_id: str) -> str:
    """The record point of ``doc_id`` synced from ``root`` (a UUID: it names neither)."""
    return point_id("sync", root, doc_id)


@dataclass(frozen=True)
class SyncedFile:
    """One file of a root as the record knows it."""

    root: str
    #: None for a ``dropped`` entry (a RESTRICTED document: nothing names it).
    doc_id: str | None
    path: str | None
    size: int
    mtime_ns: int
    meta_sha: str
    sha256: str | None
    state: SyncState
    #: Content keys this root may have committed for the document, oldest first (at most two:
    #: the last one known committed and the one claimed now).
    keys: tuple[str, ...] = field(default_factory=tuple)
    #: Why the ingest of ``keys[-1]`` failed (state ``failed``).
    error: str | None = None

    def same_stat(self, size: int, mtime_ns: int, meta_sha: str) -> bool:
        return (self.size, self.mtime_ns, self.meta_sha) == (size, mtime_ns, meta_sha)

    def owns(self, entry: dict[str, Any] | None) -> bool:
        """Whether a manifest entry (or its absence) is this root's to change or delete."""
        return entry is None or entry.get("content_key") in self.keys

    def with_(self, **kw: Any) -> SyncedFile:
        return replace(self, **kw)

    def to_payload(self) -> dict[str, Any]:
        return {
            "kind": KIND_SYNC, "root": self.root, "sync_doc": self.doc_id, "path": self.path,
            "size": self.size, "mtime_ns": self.mtime_ns, "meta_sha": self.meta_sha, "sha256": self.sha256,
            "state": self.state, "keys": list(self.keys), "error": self.error,
        }

    @classmethod
    def from_payload(cls, p: dict[str, Any]) -> SyncedFile:
        state = p.get("state")
        if state not in STATES:
            raise ValueError(f"sync record entry with unknown state {state!r}")
        return cls(root=str(p["root"]), doc_id=p.get("sync_doc"), path=p.get("path"), size=int(p["size"]),
                   mtime_ns=int(p["mtime_ns"]), meta_sha=str(p["meta_sha"]), sha256=p.get("sha256"),
                   state=state, keys=tuple(p.get("keys") or ()), error=p.get("error"))


class SyncRecords:
    """Read and write the sync record of a library (the caller holds the library's lock for a
    check-then-write)."""

    def __init__(self, libraries: Libraries) -> None:
        self.libraries = libraries

    def all(self, library: str) -> dict[str, SyncedFile]:
        """Every root's entries: record point id → entry."""
        recs = self.libraries.store.scroll(library, Where(kind=KIND_SYNC))
        return {r.id: SyncedFile.from_payload(r.payload) for r in recs}

    def put(self, library: str, pid: str, entry: SyncedFile, *, durable: bool = False) -> None:
        """Write one entry; ``durable`` flushes it to disk before returning (a claim must survive
        a kill of the process that made it)."""
        self.libraries.store.upsert(library, [PointData(pid, entry.to_payload())])
        if durable:
            self.libraries.store.flush(library)

    def forget(self, library: str, pids: Iterable[str]) -> None:
        ids = list(pids)
        if ids:
            self.libraries.store.delete_ids(library, ids)
