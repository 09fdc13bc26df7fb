"""The glossary multi-query rewriter: deterministic, no model.

Names that mean the same thing come in groups: an entity's name and aliases from the relation
graph (``Acme Holdings`` / ``阿克米控股``), and a glossary term with its synonyms (``revenue`` /
``turnover`` / ``营业收入``). A query naming a member of a group is also searched with each
other member in its place, one substitution per variant:

- matches are found leftmost-longest on word boundaries in the normalised query (NFKC,
  case-folded: the graph's :class:`~ragspine.graph.AliasMatcher`);
- the original query is always first; then, round-robin over the matches left to right, each
  match's next alternative in the group's own order (glossary: the order of the file; graph:
  name, then aliases), so that every matched name gets a variant before any gets a second;
- at most ``max_queries`` queries in all (the original included).

Glossary groups that share a name are merged (synonymy spans the rows that share it). A graph
alias that names two entities was already left out by the graph; a name in both a graph group
and a glossary group gets the alternatives of both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragspine.graph import AliasMatcher, norm

#: The design's cap on queries per request: the original and four variants.
MAX_QUERIES = 5


@dataclass(frozen=True)
class Variant:
    """One query searched: the original (no substitution) or the original with one name
    replaced by another of its group."""

    query: str
    #: ``(name in the query, name put in its place)``, normalised; empty for the original.
    substitutions: tuple[tuple[str, str], ...] = ()
    #: Where the substitution came from: ``glossary``, ``graph`` or both.
    sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "substitutions": [list(s) for s in self.substitutions],
                "sources": list(self.sources)}


@dataclass
class _Group:
    names: list[str] = field(default_factory=list)  # normalised, in order, no repeats
    sources: set[str] = field(default_factory=set)


class Rewriter:
    """Variants of queries over one set of synonym groups (build once per glossary/graph
    state; :meth:`variants` is cheap: one pass of the alias matcher over the query)."""

    def __init__(self, *, glossary: Iterable[Sequence[str]] = (), graph: Iterable[Sequence[str]] = (),
                 max_queries: int = MAX_QUERIES) -> None:
        if not 1 <= max_queries <= MAX_QUERIES:
            raise ValueError(f"max_queries must be 1 to {MAX_QUERIES}, got {max_queries}")
        self.max_queries = max_queries
        #: normalised name -> its alternatives in order, and the sources they come from
        self._alternatives: dict[str, tuple[list[str], set[str]]] = {}
        for group in _merged(glossary):
            self._add(group.names, "glossary")
        for names in graph:
            self._add(_unique(norm(n) for n in names), "graph")
        self._matcher = AliasMatcher({name: name for name in self._alternatives})

    def _add(self, names: list[str], source: str) -> None:
        for name in names:
            alts, sources = self._alternatives.setdefault(name, ([], set()))
            alts.extend(n for n in names if n != name and n not in alts)
            sources.add(source)

    def __bool__(self) -> bool:
        return bool(self._alternatives)

    def variants(self, query: str) -> list[Variant]:
        """The original query first, then up to ``max_queries - 1`` variants."""
        out = [Variant(query)]
        q = norm(query)
        spans = self._matcher.spans(q)
        depth = 0
        seen = {q}
        while len(out) < self.max_queries:
            added = False
            for start, end, name, _ in spans:
                alts, sources = self._alternatives[name]
                if depth >= len(alts):
                    continue
                added = True
                text = q[:start] + alts[depth] + q[end:]
                if text in seen:
                    continue
                seen.add(text)
                out.append(Variant(text, ((name, alts[depth]),), tuple(sorted(sources))))
                if len(out) == self.max_queries:
                    break
            if not added:
                break
            depth += 1
        return out


def _unique(names: Iterable[str]) -> list[str]:
    return [n for n in dict.fromkeys(names) if n]


def _merged(groups: Iterable[Sequence[str]]) -> list[_Group]:
    """Glossary rows that share a name become one group (first row's order first)."""
    merged: list[_Group] = []
    owner: dict[str, int] = {}
    for names in groups:
        normed = _unique(norm(n) for n in names)
        hits = sorted({owner[n] for n in normed if n in owner})
        if not hits:
            owner.update({n: len(merged) for n in normed})
            merged.append(_Group(normed, {"glossary"}))
            continue
        keep = merged[hits[0]]
        for other in hits[1:]:  # rows that this one joins together
            for n in merged[other].names:
                if n not in keep.names:
                    keep.names.append(n)
                owner[n] = hits[0]
            merged[other].names = []
        for n in normed:
            if n not in keep.names:
                keep.names.append(n)
            owner[n] = hits[0]
    return [g for g in merged if len(g.names) > 1]
