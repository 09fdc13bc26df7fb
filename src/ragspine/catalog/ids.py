"""Point ids: stable UUIDs derived from what a point is (``point_id("doc", doc_id)``)."""

from __future__ import annotations

import uuid

_NS = uuid.UUID("6f1c1d0e-6b8e-4f55-9a7e-2b9f4d6c8a10")


def point_id(*parts: object) -> str:
    return str(uuid.uuid5(_NS, "/".join(str(p) for p in parts)))
