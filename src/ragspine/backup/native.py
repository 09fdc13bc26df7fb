"""The embedded store's own files in a backup, so that a restore onto the embedded store copies
files instead of rebuilding the index.

A backup of an embedded library writes its points as ever (the portable format every restore
can read: onto a Qdrant server, with other models dropped, an older ragspine) and, beside them,
a *native* copy: a fresh Qdrant Edge shard built in a scratch folder from exactly the points the
backup carries, its indexes built (``optimize``), then its files. The library's own shard is
never copied: it holds what a backup must leave out (staged and retired versions, deleted
points not yet vacuumed, leases). A restore onto the embedded store moves those files into
place and opens them, and then scrubs them as the point path filters points (RESTRICTED and
bookkeeping points out, the record written anew): measured 6.1 s -> see docs/measured.md,
"Backup and restore at copy speed".

Members: ``<lib>/native/files.json`` lists ``[relative path, size, stored bytes]`` per file of
the library folder (``shard/...``, ``columns/...``), and ``<lib>/native/<n>`` holds file n
without its trailing zero bytes (Qdrant Edge preallocates its page files; the restore extends
each file to its size again, sparse).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragspine.backup.archive import ArchiveWriter, BackupFileError
from ragspine.store.base import CollectionSpec, PointData, Where
from ragspine.store.edge import EdgeStore

INDEX = "native/files.json"
#: Files of one library folder a restore accepts, how deep, and how large one may be (sparse).
MAX_FILES = 20_000
MAX_FILE_BYTES = 1 << 40
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
MAX_DEPTH = 8


class NativeCopy:
    """Backup side: a scratch Edge shard fed the carried points batch by batch."""

    def __init__(self, name: str, spec: CollectionSpec) -> None:
        self.name = name
        self.root = Path(tempfile.mkdtemp(prefix="ragspine-native-"))
        self.store: EdgeStore | None = EdgeStore(self.root)
        self.store.create_collection(name, spec)

    def add(self, points: Sequence[PointData]) -> None:
        assert self.store is not None
        self.store.upsert(self.name, points)

    def write(self, writer: ArchiveWriter, library: str) -> int:
        """Build the indexes, close the shard, and write its files as members of ``library``;
        returns how many files. The scratch folder is removed."""
        assert self.store is not None
        try:
            self.store.optimize(self.name)
            self.store.close()
            self.store = None
            folder = self.root / "libraries" / self.name
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            index: list[list[Any]] = []
            blobs: list[bytes] = []
            for p in files:
                data = p.read_bytes()
                kept = data.rstrip(b"\0")
                index.append([p.relative_to(folder).as_posix(), len(data), len(kept)])
                blobs.append(kept)
            writer.add_json(f"{library}/{INDEX}", {"files": index})
            for n, blob in enumerate(blobs):
                writer.add(f"{library}/native/{n}", blob)
            return len(files)
        finally:
            self.close()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        shutil.rmtree(self.root, ignore_errors=True)


def check_index(name: str, body: Any) -> list[tuple[str, int, int]]:
    """The file list of a native copy, each path a plain relative one inside the library folder
    (no ``..``, no absolute path, no odd characters), sizes sane; BackupFileError otherwise."""
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, list) or not files or len(files) > MAX_FILES:
        raise BackupFileError(f"backup member {name} lists no files, or more than {MAX_FILES}")
    out: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    for f in files:
        if not (isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in f[1:])):
            raise BackupFileError(f"backup member {name}: entry {f!r} is not [path, size, stored]")
        rel, size, stored = f
        parts = rel.split("/")
        if (len(parts) > MAX_DEPTH or parts[0] not in ("shard", "columns") or not all(_PART.match(x) for x in parts)
                or any(x in (".", "..") for x in parts) or rel in seen):
            raise BackupFileError(f"backup member {name}: {rel!r} is not a file of a library folder")
        if not 0 <= stored <= size <= MAX_FILE_BYTES:
            raise BackupFileError(f"backup member {name}: {rel!r} has sizes {size}/{stored}")
        seen.add(rel)
        out.append((rel, size, stored))
    return out


class NativeStaging:
    """Restore side: a library folder written file by file in a scratch data dir beside the
    store's own, then moved into place."""

    def __init__(self, libraries_root: Path, target: str, files: list[tuple[str, int, int]]) -> None:
        self.data_dir = libraries_root / f".restore-{target}-{uuid.uuid4().hex[:12]}"
        self.folder = self.data_dir / "libraries" / target
        self.folder.mkdir(parents=True)
        self.files = files
        self.written = 0

    def put(self, n: int, data: bytes, member: str) -> None:
        if not 0 <= n < len(self.files) or n != self.written:
            raise BackupFileError(f"backup member {member} is out of order or not in its file list")
        rel, size, stored = self.files[n]
        if len(data) != stored:
            raise BackupFileError(f"backup member {member} holds {len(data)} bytes, its list says {stored}")
        path = self.folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb") as fh:
            fh.write(data)
            if size > stored:
                fh.truncate(size)  # the preallocated tail, sparse
        self.written += 1

    @property
    def complete(self) -> bool:
        return self.written == len(self.files)

    def remove(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)


def scrub(store: EdgeStore, name: str, drop: Callable[[dict[str, Any]], bool], fields: list[str]) -> int:
    """Delete from a restored native shard every point the point path would not have written
    (``drop(payload)``, reading only ``fields``, says which); returns how many."""
    gone = [r.id for r in store.scroll(name, Where(), fields=fields) if drop(r.payload)]
    if gone:
        store.delete_ids(name, gone)
    return len(gone)


def adopt(staging: NativeStaging, libraries_root: Path) -> Path:
    """Move the staged library folder into the store's libraries folder (one rename, same
    file system); returns its new path."""
    dest = libraries_root / staging.folder.name
    if dest.exists():
        raise BackupFileError(f"library folder {dest.name} appeared while it was restored")
    os.replace(staging.folder, dest)
    staging.remove()
    return dest
