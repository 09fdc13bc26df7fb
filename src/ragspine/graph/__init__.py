"""Relation graph and multi-hop lookups.

Typed nodes (company, subsidiary, segment, metric, period, geography, and the documents)
with aliases in any language, typed edges (``subsidiary_of``, ``peer_of``, ``derived_from``,
``mentions``, ``co_occurs_with``), every edge cited: by the declared source (file and row), or
by document, page and chunk. Built from relations the user declares, from document metadata,
and from the alias dictionary matched in passage text; kept in step with the index.

Public names are loaded on first use, so ``ragspine --help`` does not pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragspine.graph._extract import AliasMatcher, ExtractedRelation, RelationExtractor
    from ragspine.graph._declared import MAX_RELATIONS_BYTES
    from ragspine.graph._expand import expanded_search
    from ragspine.graph._model import (
        DEFAULT_MAX_HOPS,
        ENTITY_TYPES,
        Contribution,
        MAX_DEPTH,
        MAX_PATH_HOPS,
        RELATIONS,
        Edge,
        Node,
        norm,
    )
    from ragspine.graph._service import DEFAULT_NEIGHBORS, MAX_NEIGHBORS, GraphService
    from ragspine.graph.errors import GraphError
    from ragspine.graph.store import GraphStore, open_graph_store

_EXPORTS = {
    "GraphService": "ragspine.graph._service",
    "expanded_search": "ragspine.graph._expand",
    "GraphStore": "ragspine.graph.store",
    "open_graph_store": "ragspine.graph.store",
    "RelationExtractor": "ragspine.graph._extract",
    "AliasMatcher": "ragspine.graph._extract",
    "norm": "ragspine.graph._model",
    "ExtractedRelation": "ragspine.graph._extract",
    "Node": "ragspine.graph._model",
    "Contribution": "ragspine.graph._model",
    "Edge": "ragspine.graph._model",
    "RELATIONS": "ragspine.graph._model",
    "ENTITY_TYPES": "ragspine.graph._model",
    "MAX_DEPTH": "ragspine.graph._model",
    "MAX_PATH_HOPS": "ragspine.graph._model",
    "DEFAULT_MAX_HOPS": "ragspine.graph._model",
    "DEFAULT_NEIGHBORS": "ragspine.graph._service",
    "MAX_NEIGHBORS": "ragspine.graph._service",
    "MAX_RELATIONS_BYTES": "ragspine.graph._declared",
    "GraphError": "ragspine.graph.errors",
}

__all__ = [
    "AliasMatcher",
    "Contribution",
    "DEFAULT_MAX_HOPS",
    "DEFAULT_NEIGHBORS",
    "ENTITY_TYPES",
    "Edge",
    "ExtractedRelation",
    "GraphError",
    "GraphService",
    "GraphStore",
    "MAX_DEPTH",
    "MAX_NEIGHBORS",
    "MAX_PATH_HOPS",
    "MAX_RELATIONS_BYTES",
    "Node",
    "RELATIONS",
    "RelationExtractor",
    "expanded_search",
    "norm",
    "open_graph_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragspine.graph' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
