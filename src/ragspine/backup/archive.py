"""The backup file: a tar stream of named members, checked end to end.

Layout (POSIX tar, members in this order)::

    ragspine-backup.json                 header: format, version, libraries, when, by which ragspine
    <lib>/library.json                   the library: record, vector fields, counts, source backend
    <lib>/points/000000.json.gz          a batch of points: ids, payloads, where each vector is
    <lib>/points/000000.npz              ... and the batch's vectors (uncompressed npz)
    <lib>/graph.json.gz                  the relation graph: every source's contribution
    <lib>/thumbnails/<doc_id>/p<n>.png   page thumbnails of the active versions
    <lib>/pending/<key>.pdf | .json      the PDFs whose OCR second phase is still owed
    SHA256SUMS.json                      size and SHA-256 of every member above, last

Why tar by hand rather than a Qdrant snapshot: a snapshot is one backend's file (an Edge shard
cannot load a server's snapshot, nor the reverse), it holds neither the graph nor the thumbnails,
and int8 page columns live beside the shard. This format is the library as ragspine sees it, so
a backup taken on one backend restores into the other.

Reading is defensive: every member must be a regular file with a name of the layout above
(nothing is ever extracted by its own name), no bigger than :data:`MAX_MEMBER_BYTES`, and match
its checksum; a file cut short lacks the trailer. :meth:`ArchiveReader.verify` checks the whole
file before a restore writes anything, and :meth:`ArchiveReader.members` checks each member
again as it is read (the file could change between the two passes).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ragspine.api.names import DOC_ID_PATTERN, LIBRARY_NAME_PATTERN
from ragspine.errors import InvalidRequestError

FORMAT = "ragspine-backup"
#: The version of this layout; a reader refuses a newer one.
#: 2: a library of the embedded store may carry its native shard files (ragspine.backup.native).
VERSION = 2
HEADER = "ragspine-backup.json"
TRAILER = "SHA256SUMS.json"
#: No member may be bigger than this (a batch of points is cut at ~32 MB of vectors).
MAX_MEMBER_BYTES = 1 << 30
#: Nor may a compressed JSON member inflate past this.
MAX_JSON_BYTES = 256 << 20

_LIB = LIBRARY_NAME_PATTERN.strip("^$")
_DOC = DOC_ID_PATTERN.strip("^$")
MEMBER_RE = re.compile(
    rf"^(?P<lib>{_LIB})/(?:library\.json|graph\.json\.gz|points/\d{{6}}\.(?:json\.gz|npz)"
    rf"|thumbnails/(?P<doc>{_DOC})/p[1-9]\d{{0,5}}\.png|pending/[0-9a-f]{{40}}\.(?:pdf|json)"
    rf"|native/(?:files\.json|(?P<native>0|[1-9]\d{{0,4}})))\Z"
)


class BackupFileError(InvalidRequestError):
    """A backup file that cannot be restored: corrupt, truncated, or of a newer layout (422;
    nothing was changed)."""

    type = "invalid-backup"
    title = "Invalid backup file"


class NotABackupError(BackupFileError):
    """A file that is not a ragspine backup at all (415, as a PDF upload that is not a PDF)."""

    status = 415
    type = "not-a-backup"
    title = "Not a ragspine backup"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_bytes(obj: Any, *, gz: bool = False) -> bytes:
    raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    # Level 1: payload JSON shrinks ~4x at ~100 MB/s; level 6 saves a few % more at a third the speed.
    return gzip.compress(raw, compresslevel=1, mtime=0) if gz else raw


def read_json(name: str, data: bytes) -> Any:
    """A JSON member (gzip when its name ends ``.gz``), bounded in size; a clear error otherwise."""
    try:
        if name.endswith(".gz"):
            d = zlib.decompressobj(wbits=31)
            raw = d.decompress(data, MAX_JSON_BYTES + 1)
            if len(raw) > MAX_JSON_BYTES or d.unconsumed_tail:
                raise BackupFileError(f"backup member {name} inflates past {MAX_JSON_BYTES} bytes")
        else:
            raw = data
        return json.loads(raw)
    except RecursionError:
        raise BackupFileError(f"backup member {name} is nested too deeply to be read") from None
    except (zlib.error, ValueError, UnicodeDecodeError) as exc:
        raise BackupFileError(f"backup member {name} is not valid JSON: {exc}") from None


class ArchiveWriter:
    """Writes members to a binary stream (a file, or a spool a server streams out)."""

    def __init__(self, out: IO[bytes], libraries: list[str]) -> None:
        self._tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)  # noqa: SIM115 - closed by close()
        self._sums: dict[str, list[Any]] = {}
        self._now = time.time()
        self.bytes = 0
        self._put(HEADER, json_bytes({"format": FORMAT, "version": VERSION, "created_at": self._now,
                                      "ragspine": _version(), "libraries": libraries}))

    def _put(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = int(self._now)
        info.mode = 0o600
        self._tar.addfile(info, io.BytesIO(data))
        self.bytes += len(data)
        if name != TRAILER:
            self._sums[name] = [len(data), _sha(data)]

    def add(self, name: str, data: bytes) -> None:
        if not MEMBER_RE.match(name):
            raise ValueError(f"not a backup member name: {name!r}")
        self._put(name, data)

    def add_json(self, name: str, obj: Any) -> None:
        self.add(name, json_bytes(obj, gz=name.endswith(".gz")))

    def close(self) -> None:
        self._put(TRAILER, json_bytes({"members": self._sums}))
        self._tar.close()


@dataclass(frozen=True)
class Header:
    created_at: float
    ragspine: str
    libraries: list[str]
    #: Size and SHA-256 of every member, from the trailer.
    sums: dict[str, tuple[int, str]]


class ArchiveReader:
    """Reads a backup file from disk (see the module docstring)."""

    def __init__(self, path: Path | str, label: str | None = None) -> None:
        self.path = Path(path)
        #: How errors name the file (``backup file NAME``; a server says "the uploaded backup").
        self.what = label or f"backup file {self.path.name}"

    def _raw(self) -> Iterator[tuple[str, bytes]]:
        read = 0
        try:
            with open(self.path, "rb") as fh, tarfile.open(fileobj=fh, mode="r|") as tar:
                for info in tar:
                    if not info.isreg():
                        raise BackupFileError(f"backup member {info.name!r} is not a regular file")
                    if info.size > MAX_MEMBER_BYTES:
                        raise BackupFileError(f"backup member {info.name!r} is {info.size} bytes, over the "
                                              f"{MAX_MEMBER_BYTES} a member may have")
                    f = tar.extractfile(info)
                    assert f is not None  # a regular file
                    data = f.read()
                    if len(data) != info.size:
                        raise BackupFileError(f"{self.what} is truncated (in member {info.name})")
                    read += 1
                    yield info.name, data
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            if read == 0:  # not even one member: not a tar file (or an empty one)
                raise NotABackupError(f"{self.what} is not a ragspine backup (not a tar file: {exc})") from None
            raise BackupFileError(f"{self.what} is not a readable ragspine backup "
                                  f"(corrupt or truncated: {exc})") from None
        except OSError as exc:
            raise BackupFileError(f"cannot read backup file {self.path}: {exc.strerror or exc}") from None

    def verify(self) -> Header:
        """Read the whole file once: the header first, the trailer last, every member named by
        the layout and equal to its checksum. Raises :class:`BackupFileError` naming what is
        wrong; returns the header with the checksums."""
        seen: dict[str, tuple[int, str]] = {}
        head: dict[str, Any] | None = None
        trailer: dict[str, Any] | None = None
        for name, data in self._raw():
            if trailer is not None:
                raise BackupFileError(f"{self.what} has member {name!r} after its checksum list")
            if head is None:
                if name != HEADER:
                    raise NotABackupError(f"{self.what} is not a ragspine backup (it starts with {name!r}, "
                                          f"not {HEADER})")
                head = _check_header(read_json(name, data))
                continue
            if name == TRAILER:
                trailer = read_json(name, data)
                continue
            m = MEMBER_RE.match(name)
            if not m or m.group("lib") not in head["libraries"]:
                raise BackupFileError(f"backup member {name!r} is not part of a ragspine backup's layout")
            if name in seen:
                raise BackupFileError(f"backup member {name!r} appears twice")
            seen[name] = (len(data), _sha(data))
        if head is None:
            raise NotABackupError(f"{self.what} is empty")
        if trailer is None:
            raise BackupFileError(f"{self.what} is truncated: its checksum list "
                                  f"({TRAILER}, written last) is missing")
        sums = _check_sums(trailer)
        sums.pop(HEADER, None)
        for name in sorted(set(sums) | set(seen)):
            if name not in seen:
                raise BackupFileError(f"{self.what} lacks member {name!r}")
            if name not in sums:
                raise BackupFileError(f"backup member {name!r} is not in the checksum list")
            if seen[name] != sums[name]:
                raise BackupFileError(f"backup member {name!r} is corrupt (its size or SHA-256 differs from "
                                      "the checksum list)")
        return Header(float(head.get("created_at", 0.0)), str(head.get("ragspine", "")), list(head["libraries"]),
                      sums)

    def members(self, header: Header) -> Iterator[tuple[str, bytes]]:
        """Every member but the header and trailer, in order, each checked against ``header``'s
        checksums as it is read."""
        for name, data in self._raw():
            if name in (HEADER, TRAILER):
                continue
            if header.sums.get(name) != (len(data), _sha(data)):
                raise BackupFileError(f"backup member {name!r} changed since the file was checked")
            yield name, data


def _check_header(d: Any) -> dict[str, Any]:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise BackupFileError(f"not a ragspine backup (its header does not say format {FORMAT!r})")
    version = d.get("version")
    if not isinstance(version, int) or version < 1:
        raise BackupFileError(f"the backup header has no valid version: {version!r}")
    if version > VERSION:
        raise BackupFileError(f"the backup is in layout {version}, written by a newer ragspine; this one reads "
                              f"layout {VERSION} (nothing was changed)")
    if not isinstance(d.get("created_at", 0.0), (int, float)) or isinstance(d.get("created_at"), bool):
        raise BackupFileError("the backup header's created_at is not a number")
    libs = d.get("libraries")
    if not isinstance(libs, list) or not libs or not all(
            isinstance(n, str) and re.match(LIBRARY_NAME_PATTERN, n) for n in libs) or len(set(libs)) != len(libs):
        raise BackupFileError("the backup header does not list its libraries")
    return d


def _check_sums(d: Any) -> dict[str, tuple[int, str]]:
    members = d.get("members") if isinstance(d, dict) else None
    if not isinstance(members, dict):
        raise BackupFileError(f"the backup's {TRAILER} is not a checksum list")
    out: dict[str, tuple[int, str]] = {}
    for name, v in members.items():
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], str)):
            raise BackupFileError(f"the backup's checksum of {name!r} is malformed")
        out[name] = (v[0], v[1])
    return out


def _version() -> str:
    from ragspine import __version__

    return __version__
