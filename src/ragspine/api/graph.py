"""The relation graph's answers: entities, neighbours and paths, every edge with its
citations."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from ragspine.api._base import Reply


class Entity(Reply):
    id: str
    name: str
    type: str
    aliases: list[str] = Field(default_factory=list)


class EntityList(Reply):
    entities: list[Entity]


class GraphEdge(Reply):
    source: str
    relation: str
    target: str
    #: Where the edge comes from: a declared relation file's row, or a passage (doc_id, page,
    #: chunk_id, bbox) that states it.
    citations: list[dict[str, Any]]
    citations_total: int


class GraphNeighbor(Entity):
    depth: int
    #: The edges from the start entity to this one, in walking order.
    path: list[GraphEdge]


class GraphNeighbors(Reply):
    entity: Entity
    relations: list[str] | None = None
    depth: int
    direction: str
    truncated: bool
    neighbors: list[GraphNeighbor]


class GraphPaths(Reply):
    model_config = ConfigDict(populate_by_name=True)

    from_: Entity = Field(alias="from")
    to: Entity
    max_hops: int
    relations: list[str] | None = None
    found: bool
    hops: int | None = None
    #: The path's entities in walking order, ``{id, name, type}`` each (empty when not found).
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    path: list[GraphEdge] | None = None


class RelationsUploaded(Reply):
    library: str
    file: str
    mode: str
    rows: int
    #: What this file declared: ``{"entities": n, "relations": n}``.
    declared: dict[str, int]
    #: The whole graph after the upload: ``{"nodes": n, "edges": n}``.
    graph: dict[str, int]
