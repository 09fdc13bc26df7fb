"""Search expansion through the relation graph: a search over the entities an ``expand``
reaches, one filtered retrieval per entity, fused by RRF, each hit with the paths that brought
it in (split from :mod:`ragspine.graph._service`, which builds and answers the graph)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragspine.graph._model import (
    CITE_METADATA,
    CITE_TEXT,
    DEFAULT_EXPAND_RELATIONS,
    DOC_NODE_PREFIX,
    DOCUMENT,
    Edge,
    Neighbor,
    Node,
    check_depth,
    doc_node,
    relation_list,
)
from ragspine.graph._service import (
    MAX_CITATIONS_SHOWN,
    GraphService,
    _brief,
    _check_direction,
)
from ragspine.graph.errors import UnknownEntityError
from ragspine.graph.store import GraphStore
from ragspine.scoring.fusion import rrf

if TYPE_CHECKING:
    from ragspine.retrieval.search import (
        Searcher,
        SearchHit,
        SearchRequest,
        SearchResponse,
    )

#: Entities a search expansion searches at most (nearest first).
MAX_EXPANDED_ENTITIES = 50
#: Hits fetched per expanded entity: at least this many, or ``EXPAND_CANDIDATE_FACTOR * top_k``
#: (pages of documents that only mention the entity are kept if their page mentions it).
MIN_EXPAND_CANDIDATES = 100
EXPAND_CANDIDATE_FACTOR = 4

Link = tuple[list[Mapping[str, Any]], dict[int, list[Mapping[str, Any]]]]  # metadata cites, page → text cites


def expanded_search(service: GraphService, req: SearchRequest, searcher: Searcher) -> SearchResponse:
    """Run ``req`` over the entities its ``expand`` reaches: one filtered retrieval per
    entity (documents whose metadata names it, and pages that mention it), the per-entity
    rankings fused by RRF (k = ``RAGSPINE_RRF_K``, equal weights; a page reached through
    several entities collects a share from each), ``scores["fused"]`` being that fused score.
    Every hit carries the paths that brought it in (``via``), each edge with its citations."""
    from ragspine.retrieval.search import SearchResponse

    t0 = time.perf_counter()
    spec = req.expand
    assert spec is not None
    relations = relation_list(spec.relation) or DEFAULT_EXPAND_RELATIONS
    check_depth(spec.depth)
    _check_direction(spec.direction)
    base = req.model_copy(update={"expand": None, "allow_unfiltered_fallback": False})
    searcher.validate(base)
    reached: list[tuple[str, Node, list[Neighbor]]] = []
    # Per library, the graph the caller may see (an API key's filter: the visible documents'
    # contributions only), for the walk and for the documents each entity leads to.
    graphs: dict[str, GraphStore] = {}
    for lib in req.libraries:
        service._ensure_built(lib)
        g = graphs[lib] = service.graphs_for(lib, req.scope.get(lib, []))
        try:
            origin = service.resolve(lib, spec.entity, g)
        except UnknownEntityError:
            continue
        found, _ = g.neighbors(
            lib, origin.id, relations=relations, depth=spec.depth, direction=spec.direction,  # type: ignore[arg-type]
            limit=MAX_EXPANDED_ENTITIES, skip_types=(DOCUMENT,),
        )
        items = ([Neighbor(origin, 0, ())] if spec.include_origin else []) + found
        reached.append((lib, origin, items))
    if not reached:
        libs = ", ".join(f"'{lib}'" for lib in req.libraries)
        raise UnknownEntityError(
            f"no entity {spec.entity!r} in the graph of {libs}; find one with "
            "GET /v1/libraries/{lib}/graph/entities?q=..."
        )
    hits, degraded, mode = _expanded(service, base, searcher, reached, graphs)
    relaxed = False
    if not hits and req.filters and req.allow_unfiltered_fallback:
        hits, degraded, mode = _expanded(service, base.model_copy(update={"filters": []}), searcher, reached, graphs)
        relaxed = True
        degraded.append("filters_relaxed: no hit matched the filters; showing results without them "
                        "(the graph's entity filter still applies)")
    expansion = {
        "entity": spec.entity, "relations": list(relations), "depth": spec.depth,
        "direction": spec.direction, "include_origin": spec.include_origin,
        "libraries": [
            {"library_id": lib, "origin": _brief(origin),
             "entities": [{**_brief(n.node), "depth": n.depth} for n in items]}
            for lib, origin, items in reached
        ],
    }
    return SearchResponse(
        hits=hits, mode=mode, degraded=bool(degraded), degraded_reasons=degraded, filters_relaxed=relaxed,
        timings_ms={"total": round((time.perf_counter() - t0) * 1000, 3)}, expansion=expansion,
    )

def _expanded(
    service: GraphService, base: SearchRequest, searcher: Searcher, reached: list[tuple[str, Node, list[Neighbor]]],
    graphs: Mapping[str, GraphStore],
) -> tuple[list[SearchHit], list[str], str]:
    sub_k = min(service.settings.max_top_k, max(EXPAND_CANDIDATE_FACTOR * base.top_k, MIN_EXPAND_CANDIDATES))
    rankings: list[list[tuple[str, str, int]]] = []
    first: dict[tuple[str, str, int], SearchHit] = {}
    vias: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    degraded: list[str] = []
    # The mode the searcher reports when no retrieval runs (no entity has documents).
    mode = "bm25" if base.mode in ("bm25", "lexical") else "economy"
    for lib, origin, items in reached:
        for nb in items:
            links = _doc_links(graphs[lib], lib, nb.node.id)
            if not links:
                continue
            sub = base.model_copy(update={
                "libraries": [lib], "top_k": sub_k,
                "filters": [*base.filters, {"field": "doc_id", "op": "in", "value": sorted(links)}],
            })
            res = searcher.search(sub)
            mode = res.mode
            degraded.extend(r for r in res.degraded_reasons if r not in degraded)
            ranking = []
            for h in res.hits:
                meta_cites, pages = links[h.doc_id]
                cites = meta_cites or pages.get(h.page)
                if not cites:
                    continue  # a page of a document that mentions the entity elsewhere
                key = (lib, h.doc_id, h.page)
                ranking.append(key)
                first.setdefault(key, h)
                link = Edge(doc_node(h.doc_id), "mentions", nb.node.id, tuple(cites))
                vias.setdefault(key, []).append({
                    "library_id": lib, "from": _brief(origin), "entity": _brief(nb.node), "depth": nb.depth,
                    "path": [e.to_json(MAX_CITATIONS_SHOWN) for e in (*nb.path, link)],
                })
            rankings.append(ranking)
    fused = rrf(rankings, k=service.settings.rrf_k)
    hits = [replace(first[key], scores={**first[key].scores, "fused": score}, via=vias[key])
            for key, score in fused[: base.top_k]]
    return hits, degraded, mode

def _doc_links(graphs: GraphStore, library: str, entity_id: str) -> dict[str, Link]:
    """Documents tied to an entity: by metadata (every page) or by text (the pages that
    mention it), with the citations of each tie."""
    out: dict[str, Link] = {}
    for e in graphs.edges(library, entity_id, relations=("mentions",), direction="in"):
        if not e.source.startswith(DOC_NODE_PREFIX) or e.target != entity_id:
            continue
        meta = [c for c in e.citations if c.get("kind") == CITE_METADATA]
        pages: dict[int, list[Mapping[str, Any]]] = {}
        for c in e.citations:
            if c.get("kind") == CITE_TEXT:
                pages.setdefault(int(c["page"]), []).append(c)
        out[e.source[len(DOC_NODE_PREFIX):]] = (meta, pages)
    return out
