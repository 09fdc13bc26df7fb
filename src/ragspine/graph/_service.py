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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragspine.catalog import Libraries
from ragspine.catalog.scope import Scope, visible_documents
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError
from ragspine.graph._backfill import backfill
from ragspine.graph._declared import (
    declared_contribution,
    declared_index,
    parse_relations,
)
from ragspine.graph._extract import (
    AliasMatcher,
    RelationExtractor,
    metadata_contribution,
    text_contribution,
)
from ragspine.graph._model import (
    DECLARED,
    DEFAULT_MAX_HOPS,
    ENTITY_TYPES,
    MAX_PATH_HOPS,
    META_PREFIX,
    TEXT_MATCHED_TYPES,
    TEXT_PREFIX,
    Contribution,
    Node,
    check_depth,
    norm,
    relation_list,
)
from ragspine.graph._stored import StoredGraphStore
from ragspine.graph._view import GraphViews
from ragspine.graph.errors import AmbiguousEntityError, UnknownEntityError
from ragspine.graph.store import DIRECTIONS, GraphStore, open_graph_store
from ragspine.policy import is_restricted, point_restricted
from ragspine.store.base import KIND_CHUNK, Store, Where

if TYPE_CHECKING:
    from ragspine.retrieval.search import (
        Searcher,
        SearchRequest,
        SearchResponse,
    )

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
        #: Optional model-based relation extractor; off (None) by default.
        self.extractor = extractor
        self._matchers: dict[str, tuple[dict[str, str], AliasMatcher]] = {}
        self._guard = threading.Lock()
        #: One backfill per library at a time in this process (see _ensure_built).
        self._building: dict[str, threading.Lock] = {}

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
                self._sync_documents(library, force_text=True, own={doc_id: passages})
                return
            before = self._dictionary(library)
            declared = declared_index(self.graphs.contribution(library, DECLARED))
            self.graphs.replace_sources(
                library, {META_PREFIX + doc_id: _stored(metadata_contribution(doc_id, version, title, meta, declared))}
            )
            after = self._dictionary(library)
            if after != before:
                self._rederive_text(library, after, self._active_docs(library), {doc_id: passages})
            else:
                text = self._text(library, doc_id, version, title, passages, after)
                self.graphs.replace_sources(library, {TEXT_PREFIX + doc_id: _stored(text)})

    def document_deleted(self, library: str, doc_id: str) -> None:
        if not self.graphs.exists(library):
            return  # no graph yet: the first use builds it from what is left
        with self.graphs.locked(library):
            before = self._dictionary(library)
            self.graphs.replace_sources(library, {META_PREFIX + doc_id: None, TEXT_PREFIX + doc_id: None})
            after = self._dictionary(library)
            if after != before:
                self._rederive_text(library, after, self._active_docs(library), {})

    def library_deleted(self, library: str) -> None:
        self.graphs.drop(library)
        with self._guard:
            self._matchers.pop(library, None)

    # -- building -----------------------------------------------------------------------------

    def _dictionary(self, library: str) -> dict[str, str]:
        """``norm(name or alias) → node id`` over the text-matched nodes; an alias naming two
        entities is left out (it cannot say which one a passage means)."""
        owners: dict[str, set[str]] = {}
        for node in self.graphs.nodes(library, types=TEXT_MATCHED_TYPES):
            for a in (node.name, *node.aliases):
                k = norm(a)
                if k:
                    owners.setdefault(k, set()).add(node.id)
        ambiguous = sorted(k for k, ids in owners.items() if len(ids) > 1)
        if ambiguous:
            logger.info("library %s: %d aliases name several entities and are not matched in text",
                        library, len(ambiguous))
        return {k: next(iter(ids)) for k, ids in owners.items() if len(ids) == 1}

    def _matcher(self, library: str, dictionary: dict[str, str]) -> AliasMatcher:
        with self._guard:
            cached = self._matchers.get(library)
            if cached is not None and cached[0] == dictionary:
                return cached[1]
        matcher = AliasMatcher(dictionary)
        with self._guard:
            self._matchers[library] = (dictionary, matcher)
        return matcher

    def _text(
        self, library: str, doc_id: str, version: int, title: str | None, passages: Sequence[Mapping[str, Any]],
        dictionary: dict[str, str],
    ) -> Contribution:
        nodes = {n.id: n for n in self.graphs.nodes(library)} if self.extractor is not None else None
        return text_contribution(doc_id, version, passages, self._matcher(library, dictionary), title=title,
                                 nodes=nodes, extractor=self.extractor)

    def _active_docs(self, library: str) -> dict[str, tuple[int, str | None, dict[str, Any]]]:
        """``doc_id → (active version, title, metadata)`` from the manifest."""
        return {
            e["doc_id"]: (int(e["active_version"]), e.get("title"), e.get("meta") or {})
            for e in self.libraries.doc_entries(library)
            if e.get("active_version") and not is_restricted((e.get("meta") or {}).get("sensitivity"))
        }

    def _stored_passages(self, library: str, doc_id: str, version: int) -> list[dict[str, Any]]:
        """A document's passages as the store holds them (RESTRICTED ones never are; checked
        again here, as on every way out of the store)."""
        recs = self.store.scroll(library, Where(kind=KIND_CHUNK, live=True, doc_id=doc_id, version=version))
        return [
            {"chunk_id": p["chunk_id"], "page": p["page"], "text": p.get("text", ""), "bbox": p.get("bbox", [])}
            for p in (r.payload for r in recs) if not point_restricted(p)
        ]

    def _rederive_text(
        self, library: str, dictionary: dict[str, str], docs: Mapping[str, tuple[int, str | None, Any]],
        own: Mapping[str, Sequence[Mapping[str, Any]]], only: set[str] | None = None,
    ) -> None:
        """Match the text of ``docs`` (all, or ``only`` these) again; drop text sources of
        documents that are gone. ``own`` holds passages already at hand."""
        changes: dict[str, Contribution | None] = {
            k: None for k in self.graphs.source_keys(library)
            if k.startswith(TEXT_PREFIX) and k[len(TEXT_PREFIX):] not in docs
        }
        for doc_id, (version, title, _) in sorted(docs.items()):
            if only is not None and doc_id not in only:
                continue
            passages = own[doc_id] if doc_id in own else self._stored_passages(library, doc_id, version)
            changes[TEXT_PREFIX + doc_id] = _stored(self._text(library, doc_id, version, title, passages, dictionary))
        self.graphs.replace_sources(library, changes)

    def _sync_documents(
        self, library: str, *, force_text: bool, before: dict[str, str] | None = None,
        own: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Make every document's sources match the manifest (call inside ``locked``): metadata
        sources always (they resolve against the declared aliases), text sources when the
        dictionary changed or ``force_text`` is set, else only those of documents whose text
        source is missing or of another version."""
        if before is None:
            before = self._dictionary(library)
        docs = self._active_docs(library)
        declared = declared_index(self.graphs.contribution(library, DECLARED))
        keys = set(self.graphs.source_keys(library))
        changes: dict[str, Contribution | None] = {
            k: None for k in keys if k.startswith(META_PREFIX) and k[len(META_PREFIX):] not in docs
        }
        for doc_id, (version, title, meta) in docs.items():
            changes[META_PREFIX + doc_id] = _stored(metadata_contribution(doc_id, version, title, meta, declared))
        self.graphs.replace_sources(library, changes)
        after = self._dictionary(library)
        if force_text or after != before:
            self._rederive_text(library, after, docs, own or {})
        else:
            stale = {d for d, (version, _, _) in docs.items() if self._text_version(library, d) not in (None, version)}
            self._rederive_text(library, after, docs, own or {}, only=stale)

    def _text_version(self, library: str, doc_id: str) -> int | None:
        c = self.graphs.contribution(library, TEXT_PREFIX + doc_id)
        return int(c.edges[0].citation.get("version", 0)) if c is not None and c.edges else None

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
        return backfill(self, library)

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
            before = self._dictionary(library)
            self.graphs.replace_sources(library, {DECLARED: contrib if (contrib.nodes or contrib.edges) else None})
            self._sync_documents(library, force_text=False, before=before)
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
        dictionary = self._dictionary(library)
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

    # -- search expansion ---------------------------------------------------------------------

    def search(self, req: "SearchRequest", searcher: "Searcher") -> "SearchResponse":
        """Run ``req`` over the entities its ``expand`` reaches (:mod:`ragspine.graph._expand`)."""
        from ragspine.graph._expand import expanded_search

        return expanded_search(self, req, searcher)


def _stored(c: Contribution) -> Contribution | None:
    """What a source stores: nothing when it has nothing to say."""
    return c if c.nodes or c.edges else None


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
