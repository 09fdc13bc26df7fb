"""The files of a synced folder: which are synced, the document id of each, its sidecar
metadata and its fingerprint.

**Which files.** Every regular file under the root whose name ends in ``.pdf`` (any case),
found by walking the tree without following links to folders; names starting with ``.``
(hidden files, editors' lock and temporary files) and hidden folders are skipped.

**Document ids** (:func:`doc_id_for`) come from the path relative to the root, so
``a/report.pdf`` and ``b/report.pdf`` stay two documents:

- a file directly in the root whose name is already a valid id (letters, digits, ``.``, ``-``,
  ``_``, starting with a letter or digit, no ``..``, at most 128 characters) keeps its name:
  ``report.pdf`` -> ``report.pdf``; unless the name ends like a hashed id (below);
- any other path gets a readable slug plus the first 12 hex digits of the SHA-256 of the
  relative path: ``2023/Annual Report.pdf`` -> ``2023_Annual-Report-<12 hex>.pdf`` (``/``
  becomes ``_``, runs of other characters ``-``).

The two forms cannot meet: a kept name never ends in ``-<12 lowercase hex>.pdf``, which every
hashed id does. Two paths of one run that still map to one id (a 48-bit hash collision) both
fail, naming each other. The rule is deterministic: the same path gives the same id on every
run and machine.

**Metadata** per file: ``--meta`` (applied to every file), overridden field by field by a
sidecar ``<name>.pdf.json`` beside the file (a JSON object with the fields of an upload's
``metadata``). ``doc_id`` may not be set either way: the path decides it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine.catalog.libraries import check_doc_id
from ragspine.errors import RagspineError
from ragspine.indexing import DocumentMetadata, parse_metadata

SUFFIX = ".pdf"
SIDECAR_SUFFIX = ".json"
#: Hex digits of the path hash in a hashed id.
HASH_CHARS = 12
MAX_ID_CHARS = 128
_KEEPABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HASHED_END = re.compile(rf"-[0-9a-f]{{{HASH_CHARS}}}\.pdf$", re.IGNORECASE)
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
#: Chunk size when hashing a file.
_READ_CHUNK = 1 << 20


def doc_id_for(rel: str) -> str:
    """The document id of the file at ``rel`` (its POSIX path relative to the root)."""
    if ("/" not in rel and _KEEPABLE.fullmatch(rel) and ".." not in rel and len(rel) <= MAX_ID_CHARS
            and not _HASHED_END.search(rel)):
        return rel
    digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_CHARS]
    stem = rel[: -len(SUFFIX)] if rel.lower().endswith(SUFFIX) else rel
    slug = _UNSAFE_RUN.sub("-", stem.replace("/", "_"))
    slug = re.sub(r"\.{2,}", ".", slug).strip("-._")
    slug = slug[: MAX_ID_CHARS - 1 - HASH_CHARS - len(SUFFIX)].rstrip("-._")
    return check_doc_id(f"{slug or 'doc'}-{digest}{SUFFIX}")


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def find_pdfs(root: Path, unreadable: list[str] | None = None) -> list[str]:
    """The relative POSIX paths of the PDFs under ``root``, sorted. A folder that cannot be
    listed (permission, I/O error, a stale network handle) is appended to ``unreadable`` as its
    relative path ("" for the root): its files are unknown, not gone."""
    out: list[str] = []

    def failed(exc: OSError) -> None:
        if unreadable is not None:
            where = Path(exc.filename) if exc.filename else root
            try:
                unreadable.append(where.relative_to(root).as_posix().removeprefix("."))
            except ValueError:
                unreadable.append("")

    for folder, dirs, names in os.walk(root, followlinks=False, onerror=failed):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(folder)
        for name in names:
            if name.startswith(".") or not name.lower().endswith(SUFFIX):
                continue
            path = base / name
            if path.is_file():  # a link to a file counts; a link to nothing does not
                out.append(path.relative_to(root).as_posix())
    return sorted(out)


@dataclass(frozen=True)
class LocalFile:
    """One PDF of the folder as this run sees it."""

    rel: str
    path: Path
    doc_id: str
    size: int = 0
    mtime_ns: int = 0
    #: The effective metadata (``--meta`` then the sidecar), without ``doc_id``.
    meta: dict[str, Any] | None = None
    meta_sha: str = ""
    #: Why the file cannot be synced this run (a bad sidecar, a clash of ids, unreadable).
    error: str | None = None
    #: When the file or its sidecar last changed or arrived (the latest mtime or ctime of the
    #: two: a copy that keeps mtimes, ``cp -p`` or ``rsync -t``, still sets the ctime), for
    #: ``--watch``'s settle time: a PDF whose RESTRICTED sidecar is still on its way waits.
    changed_ns: int = 0

    def metadata(self) -> DocumentMetadata:
        """What the ingest gets: the effective metadata with the path's document id."""
        return parse_metadata({**(self.meta or {}), "doc_id": self.doc_id})


def meta_sha(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def check_meta(meta: dict[str, Any], where: str) -> None:
    """Refuse metadata an ingest would refuse, and a ``doc_id`` (the path decides it);
    :class:`ValueError` naming ``where``."""
    if "doc_id" in meta:
        raise ValueError(f"{where}: doc_id is set by the file's path in a sync; remove it")
    try:
        parse_metadata({**meta, "doc_id": "x"}).fields()
    except RagspineError as exc:
        raise ValueError(f"{where}: {exc.detail}") from None


def read_sidecar(path: Path, rel: str) -> dict[str, Any] | None:
    """The sidecar's fields, None when there is none; :class:`ValueError` naming it when bad."""
    side = sidecar_of(path)
    if not side.is_file():
        return None
    name = f"sidecar {rel}{SIDECAR_SUFFIX}"
    try:
        raw = json.loads(side.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{name} must hold a JSON object of metadata fields, got {type(raw).__name__}")
    check_meta(raw, name)
    return raw


def scan(root: Path, meta: dict[str, Any] | None = None, unreadable: list[str] | None = None) -> list[LocalFile]:
    """Every PDF under ``root`` with its id, stat and effective metadata, in path order. A file
    that cannot be synced carries its ``error`` (the others go on); a folder that cannot be
    listed goes to ``unreadable`` (see :func:`find_pdfs`)."""
    files: list[LocalFile] = []
    for rel in find_pdfs(root, unreadable):
        path = root / rel
        doc_id = doc_id_for(rel)
        try:
            st = path.stat()
            side = read_sidecar(path, rel)
        except (OSError, ValueError) as exc:
            files.append(LocalFile(rel, path, doc_id, error=str(exc)))
            continue
        effective = {**(meta or {}), **(side or {})}  # the sidecar wins, field by field
        changed = max(st.st_mtime_ns, st.st_ctime_ns)
        try:
            side_st = sidecar_of(path).stat()
            changed = max(changed, side_st.st_mtime_ns, side_st.st_ctime_ns)
        except OSError:  # no sidecar
            pass
        files.append(LocalFile(rel, path, doc_id, st.st_size, st.st_mtime_ns, effective, meta_sha(effective),
                               changed_ns=changed))
    by_id: dict[str, list[str]] = {}
    for f in files:
        by_id.setdefault(f.doc_id, []).append(f.rel)
    clashes = {i: rels for i, rels in by_id.items() if len(rels) > 1}
    if not clashes:
        return files
    return [f if f.doc_id not in clashes else
            LocalFile(f.rel, f.path, f.doc_id, error=f"document id {f.doc_id} is also that of "
                      f"{', '.join(r for r in clashes[f.doc_id] if r != f.rel)}; rename one of them")
            for f in files]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_bytes(path: Path) -> tuple[bytes, int, int]:
    """The file's bytes with the size and mtime (ns) of the handle they were read from."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        return fh.read(), st.st_size, st.st_mtime_ns
