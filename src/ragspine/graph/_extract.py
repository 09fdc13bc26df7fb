"""What documents contribute: metadata edges, and deterministic extraction from passage text.

Text extraction matches the alias dictionary (every name and alias of the company, subsidiary,
segment, metric and geography nodes) in each passage (:class:`AliasMatcher`). Matching is on :func:`~ragspine.graph._model.norm`-alised text
(NFKC, case-folded, whitespace runs as one space), leftmost-longest. Aliases starting or ending
with an ASCII letter or digit match only at a boundary (``Acme`` is not found in ``Acmex``);
CJK aliases match anywhere (``阿克米能源`` in ``阿克米能源有限公司``).

A passage that names one entity yields a ``mentions`` edge (document → entity); two or more
also yield ``co_occurs_with`` edges between each pair. Each is cited by document, version,
page, chunk and bbox. A :class:`RelationExtractor` (off by default) may add declared-kind
relations between entities of the dictionary; its edges are cited as ``model-derived,
unverified``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ragspine.graph._model import (
    CITE_METADATA,
    CITE_MODEL,
    CITE_TEXT,
    DECLARABLE,
    DOCUMENT,
    MIN_ALIAS_CHARS,
    MODEL_STATUS,
    RANK_METADATA,
    Contribution,
    EdgeSpec,
    Node,
    NodeSpec,
    canonical,
    doc_node,
    norm,
    normalize_relation,
    slug,
)

logger = logging.getLogger(__name__)

_WORD_CHAR = "[0-9a-z]"  # text is case-folded before matching
#: Citation bboxes are rounded to this many decimals of a point: passages read back from the
#: store come with their floats re-encoded, and the graph must not depend on the way in.
BBOX_DECIMALS = 3
#: Metadata field whose value is another name of the document's entity (e.g. its Chinese name).
ENTITY_LOCAL_FIELD = "entity_local"


def _is_word_char(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


class AliasMatcher:
    """Finds dictionary aliases in text, leftmost-longest; ``dictionary`` maps
    ``norm(alias) → node id``.

    Hash lookups rather than one big regular expression: candidate starts are found with a
    small regex (a word start for aliases that begin with an ASCII letter or digit, any
    character that begins some other alias), and at each the alias lengths that begin with that
    character are tried longest first. The cost per character does not grow with the number of
    aliases (a trie-shaped regex of 40,000 aliases scanned text at 0.02 Mchar/s here: the regex
    engine tries the branches of the first character one by one).
    """

    def __init__(self, dictionary: Mapping[str, str]) -> None:
        self.dictionary = {k: v for k, v in dictionary.items() if len(k) >= MIN_ALIAS_CHARS}
        lengths: dict[str, set[int]] = {}
        for k in self.dictionary:
            lengths.setdefault(k[0], set()).add(len(k))
        #: first character → lengths of the aliases beginning with it, longest first
        self._lengths = {ch: sorted(ls, reverse=True) for ch, ls in lengths.items()}
        #: first two characters of every alias: most candidate starts stop at this one lookup
        self._prefixes = {k[:2] for k in self.dictionary}
        others = sorted(ch for ch in lengths if not _is_word_char(ch))
        parts = [f"(?<!{_WORD_CHAR}){_WORD_CHAR}"] if any(_is_word_char(ch) for ch in lengths) else []
        if others:
            parts.append("[" + "".join(re.escape(ch) for ch in others) + "]")
        self._starts = re.compile("|".join(parts)) if parts else None

    def find(self, text: str) -> list[tuple[str, str]]:
        """``(alias, node id)`` for each match, left to right."""
        return [(alias, nid) for _, _, alias, nid in self.spans(norm(text))]

    def spans(self, t: str) -> list[tuple[int, int, str, str]]:
        """``(start, end, alias, node id)`` of each match in ``t``, already :func:`norm`-ed,
        left to right."""
        if self._starts is None:
            return []
        n = len(t)
        out: list[tuple[int, int, str, str]] = []
        pos = 0  # matches do not overlap
        get = self.dictionary.get
        for m in self._starts.finditer(t):
            i = m.start()
            if i < pos or t[i : i + 2] not in self._prefixes:
                continue
            for ln in self._lengths.get(t[i], ()):
                j = i + ln
                if j > n:
                    continue
                cand = t[i:j]
                nid = get(cand)
                if nid is None:
                    continue
                if j < n and _is_word_char(cand[-1]) and _is_word_char(t[j]):
                    continue  # 'acme' inside 'acmex': try a shorter alias
                out.append((i, j, cand, nid))
                pos = j
                break
        return out


@dataclass(frozen=True)
class ExtractedRelation:
    """A relation a model read in a passage, between names of the alias dictionary."""

    source: str
    relation: str
    target: str
    confidence: float | None = None


@runtime_checkable
class RelationExtractor(Protocol):
    """A model that reads relations from a passage (off by default).

    ``entities`` are the dictionary entities found in the passage; the extractor may relate
    them (or other dictionary entities, by name or alias) with a declarable relation. Names
    outside the dictionary, other relations and self-relations are ignored; what remains is
    cited as ``model-derived, unverified``.
    """

    name: str

    def extract(self, text: str, entities: Sequence[Node]) -> Sequence[ExtractedRelation]: ...


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    items = v if isinstance(v, list) else [v]
    return [str(x).strip() for x in items if str(x).strip() and not isinstance(x, bool)]


def metadata_contribution(
    doc_id: str, version: int, title: str | None, meta: Mapping[str, Any], declared: Mapping[str, str]
) -> Contribution:
    """The ``meta:<doc_id>`` source: the document node; its ``entity`` (with ``entity_local``
    as an alias) and ``period`` as nodes it mentions; each entity co-occurring with each period.

    ``declared`` maps ``norm(name or alias) → node id`` of declared entities, so metadata that
    names an entity by a declared alias joins that entity.
    """
    dnode = doc_node(doc_id)
    nodes = [NodeSpec(dnode, title or doc_id, DOCUMENT, RANK_METADATA)]
    edges: list[EdgeSpec] = []

    def cite(fieldname: str) -> dict[str, Any]:
        return {"kind": CITE_METADATA, "doc_id": doc_id, "version": version, "field": fieldname}

    entities = _as_list(meta.get("entity"))
    local = _as_list(meta.get(ENTITY_LOCAL_FIELD)) if len(entities) == 1 else []
    ent_ids = []
    for name in entities:
        eid = declared.get(norm(name)) or slug(name)
        nodes.append(NodeSpec(eid, name, "company", RANK_METADATA, tuple(local)))
        edges.append(EdgeSpec(dnode, "mentions", eid, cite("entity")))
        ent_ids.append(eid)
    for p in _as_list(meta.get("period")):
        pid = declared.get(norm(p)) or slug(p)
        nodes.append(NodeSpec(pid, p, "period", RANK_METADATA))
        edges.append(EdgeSpec(dnode, "mentions", pid, cite("period")))
        for eid in ent_ids:
            a, b = canonical(eid, "co_occurs_with", pid)
            edges.append(EdgeSpec(a, "co_occurs_with", b, cite("entity,period")))
    if not edges:
        return Contribution()  # nothing to say: the document is not in the graph
    return Contribution(tuple(_unique(nodes)), tuple(edges))


def _unique(nodes: list[NodeSpec]) -> list[NodeSpec]:
    seen: dict[str, NodeSpec] = {}
    for n in nodes:
        seen.setdefault(n.id, n)
    return list(seen.values())


def passage_order(p: Mapping[str, Any]) -> tuple[int, int, str]:
    cid = str(p.get("chunk_id", ""))
    idx = cid.rsplit("/c", 1)[-1]
    return (int(p.get("page", 0)), int(idx) if idx.isdigit() else 0, cid)


def text_contribution(
    doc_id: str,
    version: int,
    passages: Iterable[Mapping[str, Any]],
    matcher: AliasMatcher,
    *,
    title: str | None = None,
    nodes: Mapping[str, Node] | None = None,
    extractor: RelationExtractor | None = None,
) -> Contribution:
    """The ``text:<doc_id>`` source: ``mentions`` and ``co_occurs_with`` per passage (and, with
    an extractor, model-derived relations), and the document node when there is any.
    ``nodes`` (id → node) is needed by the extractor."""
    dnode = doc_node(doc_id)
    edges: list[EdgeSpec] = []
    for p in sorted(passages, key=passage_order):
        text = str(p.get("text", ""))
        found = matcher.find(text)
        if not found:
            continue
        where = {"doc_id": doc_id, "version": version, "page": int(p["page"]), "chunk_id": str(p["chunk_id"]),
                 "bbox": tuple(round(float(x), BBOX_DECIMALS) for x in p.get("bbox", []))}
        first: dict[str, str] = {}
        for alias, nid in found:
            first.setdefault(nid, alias)
        for nid, alias in sorted(first.items()):
            edges.append(EdgeSpec(dnode, "mentions", nid, {"kind": CITE_TEXT, **where, "match": alias}))
        ids = sorted(first)
        together = {"kind": CITE_TEXT, **where}  # one object for every pair of the passage
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                edges.append(EdgeSpec(a, "co_occurs_with", b, together))
        if extractor is not None and nodes is not None:
            edges.extend(_model_edges(extractor, text, [nodes[i] for i in ids if i in nodes], matcher, where))
    if not edges:
        return Contribution()
    return Contribution((NodeSpec(dnode, title or doc_id, DOCUMENT, RANK_METADATA),), tuple(edges))


def _model_edges(
    extractor: RelationExtractor, text: str, entities: list[Node], matcher: AliasMatcher, where: dict[str, Any]
) -> list[EdgeSpec]:
    try:
        found = list(extractor.extract(text, entities))
    except Exception:
        logger.warning("relation extractor %s failed on a passage; skipped", getattr(extractor, "name", "?"),
                       exc_info=True)
        return []
    out = []
    for r in found:
        u = matcher.dictionary.get(norm(r.source))
        v = matcher.dictionary.get(norm(r.target))
        rel = normalize_relation(r.relation)
        if u is None or v is None or u == v or rel not in DECLARABLE:
            continue
        a, b = canonical(u, rel, v)
        cite: dict[str, Any] = {"kind": CITE_MODEL, **where, "extractor": extractor.name, "status": MODEL_STATUS}
        if r.confidence is not None:
            cite["confidence"] = float(r.confidence)
        out.append(EdgeSpec(a, rel, b, cite))
    return out
