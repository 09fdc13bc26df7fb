"""Optional API keys, each limited to named libraries and, per library, to the documents a filter
lets through (``RAGSPINE_API_KEYS``, ``RAGSPINE_API_KEYS_FILE``; formats in
:mod:`ragspine.config.api_keys`).

No keys configured: every request is allowed. Keys configured: a request without a valid key
gets 401; a key used on a library outside its list gets 403, also when that library is one
of several in a search.

A key whose grant on a library carries a filter (its *scope*) reads that library through it,
as document-level security does in Elasticsearch and OpenSearch:

- every search ANDs the filter with the request's own in every channel, before ranking, and
  neither the unfiltered fallback nor the corrective loop drops it
  (:attr:`~ragspine.api.search.SearchRequest.scope`);
- a document outside it is exactly as absent as a missing one (404, the same message), for the
  document, its pages, thumbnails and similarity maps; listings leave it out;
- the relation graph answers from the visible documents' contributions and the library's
  declared relations only; the gap log shows the gaps searched through the same filter;
- what needs the whole library is refused with 403: writes (uploads, deletes, dense backfill,
  relations, glossary), jobs, and backups.

The keys file is read again when it changes (size, mtime or inode), so keys are added, changed
and revoked without a restart. A file that no longer parses leaves the keys read before in
place and logs the problem (never a secret); a file that is gone revokes its keys.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request

from ragspine.config.api_keys import Condition, KeyEntry, digest, read_keys_file
from ragspine.errors import FilterError
from ragspine.store.predicates import Predicate, parse_predicate, parse_predicate_text

logger = logging.getLogger(__name__)

ALL = "*"


class KeysError(ValueError):
    """A key's filter that is not valid (at start: the server does not start)."""
#: A scope: filters in the JSON form of a search's ``filters``.
Filters = tuple[dict[str, Any], ...]


def condition_filter(c: Condition) -> dict[str, Any]:
    """One condition of a key as a search filter (``{"field", "op", "value"}``), checked.
    ``page`` is refused: a key's filter chooses documents, not pages of them."""
    p: Predicate = parse_predicate_text(c) if isinstance(c, str) else parse_predicate(c)
    if p.field == "page":
        raise FilterError("a key's filter chooses documents: 'page' cannot be part of it")
    return {"field": p.field, "op": p.op, "value": list(p.value) if isinstance(p.value, tuple) else p.value}


@dataclass(frozen=True)
class Grant:
    """A key's name (for logs, never the secret) and its libraries with their filters."""

    name: str
    libraries: Mapping[str, Filters]

    @classmethod
    def of(cls, entry: KeyEntry) -> Grant:
        libs: dict[str, Filters] = {}
        for lib, conds in entry.libraries.items():
            try:
                libs[lib] = tuple(condition_filter(c) for c in conds)
            except FilterError as exc:
                raise KeysError(f"API key '{entry.name}', library '{lib}': {exc.detail}") from None
        return cls(entry.name, libs)


@dataclass(frozen=True)
class Principal:
    """The caller: ``grant`` None means auth is off."""

    grant: Grant | None

    @property
    def libraries(self) -> Mapping[str, Filters] | None:
        return None if self.grant is None else self.grant.libraries

    def allows(self, library: str) -> bool:
        libs = self.libraries
        return libs is None or ALL in libs or library in libs

    def require(self, library: str) -> None:
        if not self.allows(library):
            raise HTTPException(403, f"this API key may not use library '{library}'")

    def scope(self, library: str) -> list[dict[str, Any]]:
        """The filters this key reads ``library`` through (empty: the whole library). A grant
        naming the library wins over ``*``."""
        libs = self.libraries
        if libs is None:
            return []
        return list(libs[library] if library in libs else libs.get(ALL, ()))

    def scopes(self, libraries: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        return {lib: f for lib in libraries if (f := self.scope(lib))}

    def require_whole(self, library: str, what: str) -> None:
        """403 unless this key reads the whole of ``library``: ``what`` acts on all of it."""
        self.require(library)
        if self.scope(library):
            raise HTTPException(403, f"this API key reads library '{library}' through a filter; "
                                     f"{what} needs a key that may use the whole library")

    @property
    def everything(self) -> bool:
        """Every library, whole (what a backup of all libraries or a restore needs)."""
        libs = self.libraries
        return libs is None or (ALL in libs and not libs[ALL] and not any(libs.values()))


class KeysFile:
    """``RAGSPINE_API_KEYS_FILE``, read again whenever it changes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self.grants: dict[str, Grant] = self._read()  # at start, a bad file is an error
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _read(self) -> dict[str, Grant]:
        return {d: Grant.of(e) for d, e in read_keys_file(self.path).items()}

    def current(self) -> dict[str, Grant]:
        stamp = self._stat()
        if stamp == self._stamp:
            return self.grants
        with self._lock:
            if stamp == self._stamp:
                return self.grants
            if stamp is None:
                logger.warning("the API keys file %s is gone: its keys are revoked", self.path)
                self.grants = {}
            else:
                try:
                    self.grants = self._read()
                    logger.info("API keys file %s read again: %d keys", self.path, len(self.grants))
                except ValueError as exc:  # messages name entries by number and name, never a secret
                    logger.error("API keys file %s changed but is not valid (%s); the keys read "
                                 "before stay in force", self.path, exc)
            self._stamp = stamp
            return self.grants


class Auth:
    """FastAPI dependency: the caller's :class:`Principal`."""

    def __init__(self, keys: Mapping[str, KeyEntry] | None, keys_file: Path | None = None) -> None:
        self.fixed = None if keys is None else {d: Grant.of(e) for d, e in keys.items()}
        self.file = KeysFile(keys_file) if keys_file is not None else None

    @property
    def enabled(self) -> bool:
        return self.fixed is not None or self.file is not None

    def __call__(self, request: Request) -> Principal:
        if not self.enabled:
            return Principal(None)
        given = request.headers.get("x-api-key")
        authz = request.headers.get("authorization", "")
        if given is None and authz.lower().startswith("bearer "):
            given = authz[7:].strip()
        if not given:
            raise HTTPException(401, "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'")
        # Keys are looked up by their SHA-256: the secret is compared nowhere, and a dict lookup
        # on a digest tells an attacker nothing about the secret's prefix.
        d = digest(given)
        grant = (self.fixed or {}).get(d)
        if grant is None and self.file is not None:
            grant = self.file.current().get(d)
        if grant is None:
            raise HTTPException(401, "the API key is not valid")
        return Principal(grant)
