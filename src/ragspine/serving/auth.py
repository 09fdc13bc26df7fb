"""Optional API keys, each limited to named libraries (``RAGSPINE_API_KEYS``).

No keys configured: every request is allowed. Keys configured: a request without a valid key
gets 401; a key used on a library outside its list gets 403 — also when that library is one
of several in a search.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import HTTPException, Request

ALL = "*"


@dataclass(frozen=True)
class Principal:
    libraries: frozenset[str] | None  # None: auth is off

    def allows(self, library: str) -> bool:
        return self.libraries is None or ALL in self.libraries or library in self.libraries

    def require(self, library: str) -> None:
        if not self.allows(library):
            raise HTTPException(403, f"this API key may not use library '{library}'")


class Auth:
    """FastAPI dependency: the caller's :class:`Principal`."""

    def __init__(self, keys: dict[str, frozenset[str]] | None) -> None:
        self.keys = keys

    def __call__(self, request: Request) -> Principal:
        if self.keys is None:
            return Principal(None)
        given = request.headers.get("x-api-key")
        authz = request.headers.get("authorization", "")
        if given is None and authz.lower().startswith("bearer "):
            given = authz[7:].strip()
        if not given:
            raise HTTPException(401, "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'")
        for key, libs in self.keys.items():
            if hmac.compare_digest(key.encode(), given.encode()):
                return Principal(libs)
        raise HTTPException(401, "the API key is not valid")
