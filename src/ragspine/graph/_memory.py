"""One library's relation graph in memory (:class:`Memory`), derived from its sources'
contributions: a ``networkx.MultiDiGraph`` (edge key = relation) with each edge's citations,
and the sorted steps the walks take from it. The graph stores (:mod:`ragspine.graph._networkx`,
:mod:`ragspine.graph._stored`) keep it in step with what they persist.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from ragspine.graph._model import (
    DOCUMENT,
    RELATION_ORDER,
    SYMMETRIC,
    Contribution,
    Direction,
    Edge,
    Node,
    NodeSpec,
    canonical,
    cite_key,
    match_keys,
    merge_specs,
)


def key_hash(key: str) -> str:
    """A removed source is remembered by this digest only: a deleted document's id does not stay
    in the file (docs/invariants.md, 4)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Building the graph allocates millions of small dicts; the cyclic collector would scan the
    growing heap again and again (a third of the build time at 100k edges)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()



EdgeKey = tuple[str, str, str]  # (source, relation, target) as stored


#: Nodes with at least this many edges keep their sorted adjacency (hubs such as a metric every
#: report mentions are crossed by most walks; sorting them each time dominated lookups).
STEP_CACHE_MIN_DEGREE = 64
_OUT, _IN, _BOTH = 1, 2, 0  # direction tag of a step: along the edge, against it, symmetric

Step = tuple[str, int, EdgeKey, int]  # (other end, relation order, stored edge, direction tag)


class Memory:
    """One library's graph in memory, derived from its contributions.

    Edge ``(u, v, key=relation)`` of the ``MultiDiGraph`` has as its attribute dict the
    citations per source: ``{source key: [citation, ...]}``.
    """

    def __init__(self) -> None:
        import networkx as nx

        self.g = nx.MultiDiGraph()
        #: source key → (digest of its stored JSON, node ids, stored edges): what removing it
        #: takes away. The contributions themselves stay in the file, not in memory.
        self.sources: dict[str, tuple[str, tuple[str, ...], tuple[EdgeKey, ...]]] = {}
        self.specs: dict[str, dict[str, NodeSpec]] = {}
        #: norm(id, name or alias) → ids of the non-document nodes it names
        self.names: dict[str, set[str]] = {}
        #: key_hash(source key) → source key (tombstones name sources by hash only)
        self.hashes: dict[str, str] = {}
        self._steps: dict[str, list[Step]] = {}

    def apply(self, key: str, new: Contribution | None, digest: str = "") -> None:
        g = self.g
        touched: set[str] = set()  # nodes whose specs changed: merged again
        ends: set[str] = set()  # nodes whose edges changed: only new or orphaned ones matter
        old = self.sources.pop(key, None)
        if old is not None:
            self.hashes.pop(key_hash(key), None)
            _, node_ids, edge_keys = old
            for u, rel, v in edge_keys:
                cites = g.get_edge_data(u, v, rel)
                if cites is not None and cites.pop(key, None) is not None and not cites:
                    g.remove_edge(u, v, rel)
                ends.update((u, v))
            for nid in node_ids:
                specs = self.specs.get(nid)
                if specs is not None:
                    specs.pop(key, None)
                touched.add(nid)
        if new is not None:
            self.hashes[key_hash(key)] = key
            for s in new.nodes:
                self.specs.setdefault(s.id, {})[key] = s
                touched.add(s.id)
            stored: dict[EdgeKey, None] = {}
            for e in new.edges:
                u, v = canonical(e.source, e.relation, e.target)
                cites = g.get_edge_data(u, v, e.relation)
                if cites is None:
                    g.add_edge(u, v, key=e.relation)
                    cites = g._succ[u][v][e.relation]
                cites.setdefault(key, []).append(e.citation)
                stored[(u, e.relation, v)] = None
                ends.update((u, v))
            self.sources[key] = (digest, tuple(s.id for s in new.nodes), tuple(stored))
        for nid in ends:
            self._steps.pop(nid, None)
        for nid in touched:
            self._refresh(nid)
        nodes = g._node
        for nid in ends - touched:
            attrs = nodes.get(nid)
            if attrs is not None and ("node" not in attrs or (nid not in self.specs and g.degree(nid) == 0)):
                self._refresh(nid)

    def _refresh(self, nid: str) -> None:
        g = self.g
        attrs = g._node.get(nid)
        for k in (attrs or {}).get("keys", ()):
            ids = self.names.get(k)
            if ids is not None:
                ids.discard(nid)
                if not ids:
                    del self.names[k]
        specs = self.specs.get(nid)
        if not specs:
            self.specs.pop(nid, None)
            if attrs is not None and g.degree(nid) == 0:
                g.remove_node(nid)
                return
            if attrs is None:
                return
        node = merge_specs(nid, specs or {})
        keys = frozenset() if node.type == DOCUMENT else frozenset(match_keys(node))
        g.add_node(nid, node=node, keys=keys)
        for k in keys:
            self.names.setdefault(k, set()).add(nid)

    # -- reads --------------------------------------------------------------------------------

    def node(self, nid: str) -> Node | None:
        attrs = self.g._node.get(nid)
        return attrs.get("node") if attrs is not None else None

    def edge(self, key: EdgeKey, memo: dict[EdgeKey, Edge] | None = None) -> Edge:
        """The edge with its citations sorted; ``memo`` shares the work within one lookup."""
        if memo is not None and key in memo:
            return memo[key]
        u, rel, v = key
        cites = self.g._succ[u][v][rel]
        out = Edge(u, rel, v, tuple(sorted((c for cs in cites.values() for c in cs), key=cite_key)))
        if memo is not None:
            memo[key] = out
        return out

    def steps(self, u: str, allowed: Collection[str] | None, direction: Direction) -> list[Step]:
        """Edges at ``u``, sorted by other end then relation: the walk is the same whatever
        order the graph was built in."""
        full = self._steps.get(u)
        if full is None:
            full = []
            # networkx's own adjacency dicts: the public views wrap every inner dict in a new object.
            for v, keyed in self.g._succ[u].items():
                for rel in keyed:
                    full.append((v, RELATION_ORDER[rel], (u, rel, v), _BOTH if rel in SYMMETRIC else _OUT))
            for v, keyed in self.g._pred[u].items():
                for rel in keyed:
                    full.append((v, RELATION_ORDER[rel], (v, rel, u), _BOTH if rel in SYMMETRIC else _IN))
            full.sort()
            if len(full) >= STEP_CACHE_MIN_DEGREE:
                self._steps[u] = full
        if allowed is None and direction == "both":
            return full
        want = _OUT if direction == "out" else _IN if direction == "in" else None
        return [s for s in full
                if (allowed is None or s[2][1] in allowed) and (want is None or s[3] == _BOTH or s[3] == want)]
