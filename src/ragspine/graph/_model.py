"""The graph's vocabulary and value types: relations, node types, contributions, citations.

Everything in a library's graph is *contributed* by a source, and the graph is the union of
the contributions:

- ``declared`` — the relations file the user uploaded (nodes with types and aliases, edges
  cited by file and row);
- ``meta:<doc_id>`` — a document's metadata (``entity``, ``period``): the document node, the
  entity and period nodes, ``mentions`` and ``co_occurs_with`` edges cited by the document;
- ``text:<doc_id>`` — what the alias dictionary (and, when configured, a model) found in the
  document's passages: ``mentions`` and ``co_occurs_with`` edges cited by page and chunk.

Replacing or deleting a document replaces or removes its two sources, and with them exactly
the edges and citations they contributed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

#: Which edges a lookup follows from a node: both ways, outgoing, or incoming.
Direction = Literal["both", "out", "in"]
DIRECTIONS: tuple[str, ...] = ("both", "out", "in")

#: Every edge type. ``mentions`` goes from a document to an entity; the others join entities.
RELATIONS: tuple[str, ...] = ("subsidiary_of", "peer_of", "derived_from", "mentions", "co_occurs_with")
#: Relations a user may declare in a relations file (the other two are derived from documents).
DECLARABLE: tuple[str, ...] = ("subsidiary_of", "peer_of", "derived_from")
#: Relations without a direction: stored once, with the smaller node id as source.
SYMMETRIC: frozenset[str] = frozenset({"peer_of", "co_occurs_with"})
#: Relations that must not form cycles (an entity cannot be its own indirect parent or input).
ACYCLIC: tuple[str, ...] = ("subsidiary_of", "derived_from")
#: Preference when two nodes are joined by several relations (paths show the first).
RELATION_ORDER: dict[str, int] = {r: i for i, r in enumerate(RELATIONS)}
#: Relations a search expansion follows when the request names none: the declared kinds.
DEFAULT_EXPAND_RELATIONS: tuple[str, ...] = DECLARABLE

ENTITY_TYPES: tuple[str, ...] = ("company", "subsidiary", "segment", "metric", "period", "geography")
DOCUMENT = "document"
NODE_TYPES: tuple[str, ...] = ENTITY_TYPES + (DOCUMENT,)
#: Node types whose names and aliases are matched in passage text. Periods come from metadata
#: and declarations only: a year occurs in nearly every passage of a report.
TEXT_MATCHED_TYPES: frozenset[str] = frozenset({"company", "subsidiary", "segment", "metric", "geography"})

#: Neighbourhoods are explored at most this deep.
MAX_DEPTH = 3
#: Paths are searched up to this many hops; ``DEFAULT_MAX_HOPS`` when the caller says nothing.
MAX_PATH_HOPS = 6
DEFAULT_MAX_HOPS = 4
#: Shortest alias matched in text (one CJK character or one letter matches far too much).
MIN_ALIAS_CHARS = 2
#: Longest entity name or alias accepted.
MAX_NAME_CHARS = 200

#: Citation kinds, in the order citations are listed.
CITE_DECLARED, CITE_METADATA, CITE_TEXT, CITE_MODEL = "declared", "metadata", "text", "model"
CITE_ORDER: dict[str, int] = {CITE_DECLARED: 0, CITE_METADATA: 1, CITE_TEXT: 2, CITE_MODEL: 3}
#: What an edge found by a model extractor says about itself.
MODEL_STATUS = "model-derived, unverified"

#: Where a node's name and type come from; the highest rank wins.
RANK_EXPLICIT = 3  # a type column in the relations file
RANK_DECLARED = 2  # inferred from a declared relation
RANK_METADATA = 1  # document metadata, document nodes

#: Source keys.
DECLARED = "declared"
META_PREFIX = "meta:"
TEXT_PREFIX = "text:"
DOC_NODE_PREFIX = "doc:"

_SPACE_RE = re.compile(r"\s+")
_SLUG_RE = re.compile(r"[^\w]+|_+")


def norm(text: str) -> str:
    """Matching form of a name: NFKC, case-folded, whitespace runs as one space, trimmed.

    Applied alike to aliases and to passage text, so ``ＡＣＭＥ\\nRobotics`` matches
    ``Acme Robotics``.
    """
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def slug(name: str) -> str:
    """Node id of an entity name: ``Acme Holdings`` → ``acme-holdings``; CJK is kept
    (``阿克米控股`` → ``阿克米控股``)."""
    s = _SLUG_RE.sub("-", norm(name)).strip("-")
    return s or "e-" + hashlib.sha1(name.encode()).hexdigest()[:10]


def doc_node(doc_id: str) -> str:
    return DOC_NODE_PREFIX + doc_id


def canonical(source: str, relation: str, target: str) -> tuple[str, str]:
    """Endpoints as stored: symmetric relations keep the smaller id first."""
    if relation in SYMMETRIC and target < source:
        return target, source
    return source, target


def cite_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    """Order of citations: declared, metadata, text, model; then by document, page, chunk, row."""
    return (
        CITE_ORDER.get(str(c.get("kind")), 9), str(c.get("doc_id", "")), int(c.get("page") or 0),
        str(c.get("chunk_id", "")), str(c.get("file", "")), int(c.get("row") or 0), str(c.get("field", "")),
    )


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What one source says about a node."""

    id: str
    name: str
    type: str
    rank: int
    aliases: tuple[str, ...] = ()

    def to_json(self) -> list[Any]:
        return [self.id, self.name, self.type, self.rank, list(self.aliases)]

    @classmethod
    def from_json(cls, v: Sequence[Any]) -> "NodeSpec":
        return cls(str(v[0]), str(v[1]), str(v[2]), int(v[3]), tuple(v[4]))


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    """One citation of one edge, as contributed by one source."""

    source: str
    relation: str
    target: str
    citation: Mapping[str, Any]

    def to_json(self) -> list[Any]:
        return [self.source, self.relation, self.target, dict(self.citation)]

    @classmethod
    def from_json(cls, v: Sequence[Any]) -> "EdgeSpec":
        return cls(str(v[0]), str(v[1]), str(v[2]), dict(v[3]))


@dataclass(frozen=True, slots=True)
class Contribution:
    """Everything one source adds to the graph."""

    nodes: tuple[NodeSpec, ...] = ()
    edges: tuple[EdgeSpec, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"nodes", "cites", "edges"}``: each distinct citation once in ``cites``, edges as
        ``[source, relation, target, index into cites]`` (a passage's co-occurrences share one)."""
        index: dict[str, int] = {}
        cites: list[Mapping[str, Any]] = []
        edges = []
        for e in self.edges:
            k = json.dumps(e.citation, sort_keys=True, ensure_ascii=False)
            i = index.get(k)
            if i is None:
                i = index[k] = len(cites)
                cites.append(e.citation)
            edges.append([e.source, e.relation, e.target, i])
        return {"nodes": [n.to_json() for n in self.nodes], "cites": [_plain(c) for c in cites], "edges": edges}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Contribution":
        # Equal citations become one object, and their strings are interned: a library's graph
        # holds millions of them.
        cites = [_compact(c) for c in d.get("cites", ())]
        return cls(tuple(NodeSpec.from_json(n) for n in d.get("nodes", ())),
                   tuple(EdgeSpec(sys.intern(u), sys.intern(r), sys.intern(v), cites[i])
                         for u, r, v, i in d.get("edges", ())))


def _plain(c: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in c.items()}


def _compact(c: Mapping[str, Any]) -> dict[str, Any]:
    return {sys.intern(k): sys.intern(v) if isinstance(v, str) and len(v) <= 128 else
            tuple(v) if isinstance(v, list) else v for k, v in c.items()}


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the graph shows it: the merge of every source's :class:`NodeSpec`."""

    id: str
    name: str
    type: str
    aliases: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": self.type, "aliases": list(self.aliases)}


@dataclass(frozen=True, slots=True)
class Edge:
    """An edge with every citation that supports it (sorted by :func:`cite_key`)."""

    source: str
    relation: str
    target: str
    citations: tuple[Mapping[str, Any], ...] = ()

    def to_json(self, max_citations: int | None = None) -> dict[str, Any]:
        cites = self.citations if max_citations is None else self.citations[:max_citations]
        return {
            "source": self.source, "relation": self.relation, "target": self.target,
            "citations": [_plain(c) for c in cites], "citations_total": len(self.citations),
        }


@dataclass(frozen=True, slots=True)
class Neighbor:
    node: Node
    depth: int
    #: Edges from the start node to this one, in walking order.
    path: tuple[Edge, ...] = field(default_factory=tuple)


def merge_specs(node_id: str, specs: Mapping[str, NodeSpec]) -> Node:
    """One node from what several sources say: the highest rank names and types it (ties: the
    first source key), the other names and every alias become aliases."""
    if not specs:
        return Node(node_id, node_id, "unknown")
    best = min(specs.items(), key=lambda kv: (-kv[1].rank, kv[0]))[1]
    seen = {norm(best.name)}
    aliases: list[str] = []
    for key in sorted(specs):
        s = specs[key]
        for a in (s.name, *s.aliases):
            k = norm(a)
            if k and k not in seen:
                seen.add(k)
                aliases.append(a)
    return Node(node_id, best.name, best.type, tuple(sorted(aliases, key=lambda a: (norm(a), a))))


def match_keys(node: Node) -> set[str]:
    """The normalised strings that name a node: its id, name and aliases."""
    return {k for k in (node.id, norm(node.name), *(norm(a) for a in node.aliases)) if k}


def relation_list(raw: str | Iterable[str] | None, *, allowed: Sequence[str] = RELATIONS) -> tuple[str, ...] | None:
    """Parse ``"peer_of,subsidiary_of"`` or a list into known relations; ``None`` stays None.

    Raises :class:`~ragspine.graph.errors.UnknownRelationError` naming what is allowed.
    """
    from ragspine.graph.errors import UnknownRelationError

    if raw is None:
        return None
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise UnknownRelationError(f"relation {item!r} is not a string; allowed: {', '.join(allowed)}")
        r = normalize_relation(item)
        if not r:
            continue
        if r not in allowed:
            raise UnknownRelationError(f"unknown relation {item.strip()!r}; allowed: {', '.join(allowed)}")
        if r not in out:
            out.append(r)
    if not out:
        raise UnknownRelationError(f"no relation given in {raw!r}; allowed: {', '.join(allowed)}")
    return tuple(out)


def normalize_relation(text: str) -> str:
    """``"Subsidiary of"`` → ``subsidiary_of``."""
    return re.sub(r"[\s\-]+", "_", text.strip().lower())


def check_depth(depth: int, *, what: str = "depth", low: int = 1, high: int = MAX_DEPTH) -> int:
    from ragspine.graph.errors import DepthOutOfRangeError

    if isinstance(depth, bool) or not isinstance(depth, int) or not low <= depth <= high:
        raise DepthOutOfRangeError(f"{what} must be an integer from {low} to {high}, got {depth!r}")
    return depth
