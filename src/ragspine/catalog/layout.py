"""How a library's collection is laid out on the store: its shards, the copies of each, and which
vector fields keep their original vectors on disk. Chosen when the library is created (REST,
CLI, Python client; defaults from the settings), recorded in the library record, and followed
by a restore.

The default on a Qdrant server puts the full page multivectors on disk: a visual query reads
only the ~100 candidates its first stage keeps, while the first stage (pooled or MUVERA
encodings) and the dense passages stay in RAM. With two float16 ColPali copies in RAM a
manifest node of 8 GiB holds ~20k pages; with ``page_full`` on disk ~180k fit the cluster
(``docs/capacity.md``, "Pages per machine"). The embedded store keeps one copy in one shard,
and its int8 page columns are files of their own, so nothing goes on disk there by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ragspine.errors import ConflictError, InvalidRequestError
from ragspine.store.base import CollectionSpec, DenseField

#: Fields whose originals a Qdrant server keeps on disk unless the library says otherwise.
SERVER_ON_DISK = frozenset({"page_full"})
#: Every vector field a library may have (catalog.libraries: PAGE_FULL, PAGE_POOLED, PAGE_FDE,
#: DENSE_CHUNK; named here, not imported, since catalog.libraries imports this module).
VECTOR_FIELDS = ("page_full", "page_pooled", "page_fde", "dense_chunk")
COUNTS = ("shard_number", "replication_factor", "write_consistency_factor")
#: Qdrant's own bound on shards per collection is far above this; more is a typo.
MAX_SHARDS = 1000


@dataclass(frozen=True)
class Layout:
    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None
    #: vector field -> originals on disk (a field not named: in RAM)
    on_disk: Mapping[str, bool] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"shard_number": self.shard_number, "replication_factor": self.replication_factor,
                "write_consistency_factor": self.write_consistency_factor, "on_disk": dict(self.on_disk)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Layout:
        """A recorded layout; ValueError for one that is not (a hand-edited or hostile backup)."""
        d = d or {}
        if not isinstance(d, Mapping):
            raise ValueError(f"a layout must be an object, got {d!r}")
        counts = [d.get(k) for k in COUNTS]
        for k, v in zip(COUNTS, counts):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SHARDS):
                raise ValueError(f"layout {k} must be a whole number from 1 to {MAX_SHARDS}, got {v!r}")
        on_disk = d.get("on_disk") or {}
        if not isinstance(on_disk, Mapping) or not all(isinstance(v, bool) for v in on_disk.values()):
            raise ValueError(f"layout on_disk must map field names to true or false, got {on_disk!r}")
        return cls(*counts, on_disk={str(k): v for k, v in on_disk.items()})

    def fields(self, dense: Sequence[DenseField]) -> tuple[DenseField, ...]:
        return tuple(replace(f, on_disk=bool(self.on_disk.get(f.name, False))) for f in dense)

    def spec(self, dense: Sequence[DenseField]) -> CollectionSpec:
        return CollectionSpec(dense=self.fields(dense), shard_number=self.shard_number,
                              replication_factor=self.replication_factor,
                              write_consistency_factor=self.write_consistency_factor)

    def on(self, backend: str) -> Layout:
        """This layout for a library of ``backend`` (a restore may move a library): the
        embedded store has no shards or copies to set."""
        return self if backend != "embedded" else replace(self, shard_number=None, replication_factor=None,
                                                          write_consistency_factor=None)


def plan_layout(dense: Sequence[DenseField], backend: str, *, shard_number: int | None = None,
                replication_factor: int | None = None, write_consistency_factor: int | None = None,
                on_disk: Mapping[str, bool] | None = None, defaults: Mapping[str, int | None] | None = None
                ) -> Layout:
    """The layout of a new library with vector fields ``dense`` on ``backend`` (``"embedded"``
    or ``"server"``): what the request asks for, else ``defaults`` (the settings; on a server
    only), else the store's. A malformed request is an :class:`InvalidRequestError` (422); one
    this server cannot honour as it is configured (shards on the embedded store, a field of a
    model it does not load) a :class:`ConflictError` (409); each names the problem."""
    asked = {"shard_number": shard_number, "replication_factor": replication_factor,
             "write_consistency_factor": write_consistency_factor}
    for k, v in asked.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SHARDS):
            raise InvalidRequestError(f"{k} must be a whole number from 1 to {MAX_SHARDS}, got {v!r}")
    if backend == "embedded":
        many = {k: v for k, v in asked.items() if v not in (None, 1)}
        if many:
            raise ConflictError(
                f"{', '.join(f'{k} {v}' for k, v in many.items())}: the embedded store keeps one copy in one "
                "shard; shards and replicas need a Qdrant server (RAGSPINE_QDRANT_URL)")
        counts: dict[str, int | None] = dict.fromkeys(COUNTS)
    else:
        counts = {k: asked[k] if asked[k] is not None else (defaults or {}).get(k) for k in COUNTS}
        wcf, rf = counts["write_consistency_factor"], counts["replication_factor"]
        if wcf is not None and rf is not None and wcf > rf:
            raise InvalidRequestError(f"write_consistency_factor {wcf} is more than the {rf} copies "
                                      "(replication_factor) a write can reach")
    names = [f.name for f in dense]
    foreign = sorted(set(on_disk or {}) - set(VECTOR_FIELDS))
    if foreign:
        raise InvalidRequestError(f"on_disk names {foreign}; vector fields are {', '.join(VECTOR_FIELDS)}")
    unknown = sorted(set(on_disk or {}) - set(names))
    if unknown:
        have = ", ".join(names) or "none: BM25 only, no model is configured"
        raise ConflictError(f"on_disk names {unknown}, not vector fields of this library (its fields: {have})")
    chosen = {n: (n in SERVER_ON_DISK and backend != "embedded") for n in names}
    chosen.update({k: bool(v) for k, v in (on_disk or {}).items()})
    return Layout(counts["shard_number"], counts["replication_factor"], counts["write_consistency_factor"],
                  {n: v for n, v in chosen.items() if v})
