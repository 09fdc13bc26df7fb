"""The relation graph service: kept in step with the index, queried by API, CLI and search.

:class:`GraphService` is an :class:`~ragspine.indexing.pipeline.IndexListener`: a committed
document replaces its ``meta:`` and ``text:`` sources (so its old edges go), a deleted document
removes them, a deleted library drops its graph. RESTRICTED pages never reach a listener, and
passages read back from the store (rebuilds) pass the same sensitivity check as search hits.

The alias dictionary is made of the declared entities and the entities of document metadata.
When it changes (an upload, a document naming a new entity, the last document of an entity
deleted), the text of every document is matched again, so the graph is the same whatever order
documents and relations arrived in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from ragspine.catalog import Libraries
from ragspine.catalog.scope import Scope, visible_documents
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.graph._backfill import backfill
from ragspine.graph._derive import Derivation, stored
from ragspine.graph._declared import (
    declared_contribution,
    declared_index,
    parse_relations,
)
from ragspine.graph._extract import RelationExtractor, metadata_contribution
from ragspine.graph._model import (
    DECLARED,
    DEFAULT_MAX_HOPS,
    ENTITY_TYPES,
    MAX_PATH_HOPS,
    META_PREFIX,
    TEXT_MATCHED_TYPES,
    TEXT_PREFIX,
    Node,
    check_depth,
    norm,
    relation_list,
)
from ragspine.graph._stored import StoredGraphStore
from ragspine.graph._view import GraphViews
from ragspine.graph.errors import AmbiguousEntityError, UnknownEntityError
from ragspine.graph.store import DIRECTIONS, GraphStore, open_graph_store
from ragspine.store.base import Store

logger = logging.getLogger(__name__)

#: Citations listed per edge in answers (``citations_total`` says how many there are).
MAX_CITATIONS_SHOWN = 10
#: Neighbours listed when the caller sets no limit, and the most a caller may ask for.
DEFAULT_NEIGHBORS = 100
MAX_NEIGHBORS = 1000
UPLOAD_MODES: tuple[str, ...] = ("replace", "merge")



class GraphService:
    """Relation graphs of every library."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        libraries: Libraries,
        graph_store: GraphStore | None = None,
        extractor: RelationExtractor | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.libraries = libraries
        if graph_store is None:
            in_store = settings.graph_backend == "store" or (settings.graph_backend == "auto" and libraries.leased)
            # Several replicas: the graph lives in the library's collection, written under its
            # writer lease (a SQLite file on a shared network volume is not safe to share).
            graph_store = StoredGraphStore(store, libraries) if in_store else open_graph_store(settings.data_dir)
        self.graphs = graph_store
        #: Graphs of some sources only, for API keys that read a library through a filter.
        self.views = GraphViews(graph_store)
        #: The documents' derived sources in this service's graph store.
        self.derive = Derivation(graph_store, store, libraries, extractor)
        self._guard = threading.Lock()
        #: One backfill per library at a time in this process (see _ensure_built).
        self._building: dict[str, threading.Lock] = {}

    @property
    def extractor(self) -> RelationExtractor | None:
        """Optional model-based relation extractor; off (None) by default."""
        return self.derive.extractor

    @extractor.setter
    def extractor(self, extractor: RelationExtractor | None) -> None:
        self.derive.extractor = extractor

    def close(self) -> None:
        self.graphs.close()

    # -- IndexListener ------------------------------------------------------------------------

    def document_committed(
        self, library: str, doc_id: str, version: int, title: str, meta: dict[str, Any],
        passages: list[dict[str, Any]],
    ) -> None:
        fresh = not self.graphs.exists(library)
        if fresh and set(self.libraries.active_versions(library)) - {doc_id}:
            # A library indexed before it had a graph: built by its first read (graph._backfill),
            # outside the lock this commit holds, not here.
            return
        with self.graphs.locked(library):
            if fresh:  # the library's first document: its graph is this document's
                self.derive.sync_documents(library, force_text=True, own={doc_id: passages})
                return
            before = self.derive.dictionary(library)
            declared = declared_index(self.graphs.contribution(library, DECLARED))
            self.graphs.replace_sources(
                library, {META_PREFIX + doc_id: stored(metadata_contribution(doc_id, version, title, meta, declared))}
            )
            after = self.derive.dictionary(library)
            if after != before:
                self.derive.rederive_text(library, after, self.derive.active_docs(library), {doc_id: passages})
            else:
                text = self.derive.text(library, doc_id, version, title, passages, after)
                self.graphs.replace_sources(library, {TEXT_PREFIX + doc_id: stored(text)})

    def document_deleted(self, library: str, doc_id: str) -> None:
        if not self.graphs.exists(library):
            return  # no graph yet: the first use builds it from what is left
        with self.graphs.locked(library):
            before = self.derive.dictionary(library)
            self.graphs.replace_sources(library, {META_PREFIX + doc_id: None, TEXT_PREFIX + doc_id: None})
            after = self.derive.dictionary(library)
            if after != before:
                self.derive.rederive_text(library, after, self.derive.active_docs(library), {})

    def library_deleted(self, library: str) -> None:
        self.graphs.drop(library)
        self.derive.forget(library)

    def _ensure_built(self, library: str) -> None:
        """A library indexed before it had a graph gets one on first use (built outside its
        lock: :mod:`ragspine.graph._backfill`; one build at a time per library here)."""
        if self.graphs.exists(library) or not self.libraries.active_versions(library):
            return
        with self._guard:
            building = self._building.setdefault(library, threading.Lock())
        with building:
            if not self.graphs.exists(library):
                self.rebuild(library)

    def rebuild(self, library: str) -> dict[str, int]:
        """Derive every document's sources again from the manifest and the stored passages: the
        work outside the library's lock, the writes under it (:mod:`ragspine.graph._backfill`)."""
        self.libraries.open(library)
        return backfill(self.derive, library)

    # -- declared relations -------------------------------------------------------------------

    def upload_relations(
        self, library: str, data: bytes, filename: str = "relations.csv", mode: str = "replace"
    ) -> dict[str, Any]:
        """Declare relations from a CSV or JSON file. ``replace`` (default) swaps out the
        previous upload; ``merge`` adds to it. Validated in full before anything changes."""
        self.libraries.open(library)
        if mode not in UPLOAD_MODES:
            raise InvalidRequestError(f"mode must be one of {', '.join(UPLOAD_MODES)}, got {mode!r}")
        rows = parse_relations(data, filename)
        with self.graphs.locked(library):
            base = self.graphs.contribution(library, DECLARED) if mode == "merge" else None
            contrib = declared_contribution(rows, filename, base)
            before = self.derive.dictionary(library)
            self.graphs.replace_sources(library, {DECLARED: contrib if (contrib.nodes or contrib.edges) else None})
            self.derive.sync_documents(library, force_text=False, before=before)
        stats = self.graphs.stats(library)
        return {
            "library": library, "file": filename, "mode": mode, "rows": len(rows),
            "declared": {"entities": len(contrib.nodes), "relations": len(contrib.edges)},
            "graph": {"nodes": stats["nodes"], "edges": stats["edges"]},
        }

    # -- lookups ------------------------------------------------------------------------------

    def synonym_groups(self, library: str, scope: Scope = ()) -> list[tuple[str, ...]]:
        """Each entity's name and aliases (the text-matched types), for the query rewriter: an
        English name and the Chinese one of the same entity are one group. An alias naming two
        entities is left out, as in text matching. Empty while the library has no graph. With an
        API key's ``scope``, only the entities its visible documents and the declared relations
        give (:meth:`graphs_for`): the rewrites are shown to the caller."""
        if not self.graphs.exists(library):
            return []
        dictionary = self.derive.dictionary(library)
        graphs = self.graphs_for(library, scope) if scope else self.graphs
        groups: list[tuple[str, ...]] = []
        for node in graphs.nodes(library, types=TEXT_MATCHED_TYPES):
            names = tuple(dict.fromkeys(a for a in (node.name, *node.aliases) if dictionary.get(norm(a)) == node.id))
            if len(names) > 1:
                groups.append(names)
        return groups

    def graphs_for(self, library: str, scope: Scope = ()) -> GraphStore:
        """The graph a caller reading ``library`` through an API key's filter ``scope`` sees:
        the declared relations and what the documents ``scope`` lets through contributed (no
        filter: the whole graph). Call after :meth:`_ensure_built`."""
        if not scope:
            return self.graphs
        versions = {e["doc_id"]: e["active_version"] for e in self.libraries.doc_entries(library)
                    if e.get("active_version")}
        visible = visible_documents(self.store, library, scope, versions) or ()
        sources = {DECLARED} | {p + d for d in visible for p in (META_PREFIX, TEXT_PREFIX)}
        return self.views.view(library, sources & set(self.graphs.source_keys(library)))

    def entities(self, library: str, query: str = "", *, type: str | None = None, limit: int = 20,
                 scope: Scope = ()) -> list[Node]:
        self.libraries.open(library)
        self._ensure_built(library)
        graphs = self.graphs_for(library, scope)
        types = None
        if type is not None:
            if type not in ENTITY_TYPES:
                raise InvalidRequestError(f"unknown entity type {type!r}; allowed: {', '.join(ENTITY_TYPES)}")
            types = {type}
        return graphs.find(library, query, types=types, limit=limit)

    def resolve(self, library: str, ref: str, graphs: GraphStore | None = None) -> Node:
        """The node ``ref`` names in ``graphs`` (default: the whole graph): an id, or a name or
        alias naming exactly one entity."""
        if graphs is None:
            graphs = self.graphs
        node = graphs.node(library, ref)
        if node is not None:
            return node
        ids = graphs.lookup(library, ref)
        if len(ids) == 1:
            found = graphs.node(library, ids[0])
            if found is not None:
                return found
        if len(ids) > 1:
            names = [n for n in (graphs.node(library, i) for i in ids) if n is not None]
            listed = ", ".join(f"{n.id} ({n.name}, {n.type})" for n in names)
            raise AmbiguousEntityError(f"{ref!r} names {len(ids)} entities in library '{library}': {listed}; "
                                       "ask by id")
        similar = graphs.find(library, ref, limit=5)
        if similar:
            hint = "; did you mean " + ", ".join(f"{n.id} ({n.name})" for n in similar)
        elif graphs.find(library, "", limit=1):
            hint = f"; look entities up with GET /v1/libraries/{library}/graph/entities?q=NAME"
        else:
            hint = (f"; the graph is empty: declare relations (POST /v1/libraries/{library}/graph/relations) "
                    "or index documents with 'entity' metadata")
        raise UnknownEntityError(f"no entity {ref!r} in the graph of library '{library}'{hint}")

    def neighbors(
        self, library: str, ref: str, *, relation: str | Sequence[str] | None = None, depth: int = 1,
        direction: str = "both", limit: int = DEFAULT_NEIGHBORS, max_citations: int = MAX_CITATIONS_SHOWN,
        scope: Scope = (),
    ) -> dict[str, Any]:
        self.libraries.open(library)
        relations = relation_list(relation)
        check_depth(depth)
        _check_direction(direction)
        _check_limit(limit, MAX_NEIGHBORS)
        self._ensure_built(library)
        graphs = self.graphs_for(library, scope)
        origin = self.resolve(library, ref, graphs)
        found, truncated = graphs.neighbors(
            library, origin.id, relations=relations, depth=depth, direction=direction, limit=limit  # type: ignore[arg-type]
        )
        return {
            "entity": origin.to_json(), "relations": list(relations) if relations else None, "depth": depth,
            "direction": direction, "truncated": truncated,
            "neighbors": [{**n.node.to_json(), "depth": n.depth,
                           "path": [e.to_json(max_citations) for e in n.path]} for n in found],
        }

    def paths(
        self, library: str, source: str, target: str, *, max_hops: int = DEFAULT_MAX_HOPS,
        relation: str | Sequence[str] | None = None, max_citations: int = MAX_CITATIONS_SHOWN,
        scope: Scope = (),
    ) -> dict[str, Any]:
        """A shortest path (edges in either direction) of at most ``max_hops``, every edge with
        its citations; ``found`` is false when there is none that short."""
        self.libraries.open(library)
        relations = relation_list(relation)
        check_depth(max_hops, what="max_hops", high=MAX_PATH_HOPS)
        self._ensure_built(library)
        graphs = self.graphs_for(library, scope)
        a, b = self.resolve(library, source, graphs), self.resolve(library, target, graphs)
        path = graphs.shortest_path(library, a.id, b.id, max_hops=max_hops, relations=relations)
        nodes: list[dict[str, Any]] = []
        if path is not None:
            ids = [a.id]
            for e in path:
                ids.append(e.target if e.source == ids[-1] else e.source)
            nodes = [_brief(graphs.node(library, i)) for i in ids]
        return {
            "from": a.to_json(), "to": b.to_json(), "max_hops": max_hops,
            "relations": list(relations) if relations else None, "found": path is not None,
            "hops": len(path) if path is not None else None, "nodes": nodes,
            "path": [e.to_json(max_citations) for e in path] if path is not None else None,
        }

    def snapshot(self, library: str) -> dict[str, Any]:
        self.libraries.open(library)
        self._ensure_built(library)
        return self.graphs.snapshot(library)


def _brief(node: Node | None) -> dict[str, Any]:
    if node is None:
        return {}
    return {"id": node.id, "name": node.name, "type": node.type}


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise InvalidRequestError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")


def _check_limit(limit: int, high: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= high:
        raise InvalidRequestError(f"limit must be an integer from 1 to {high}, got {limit!r}")
