"""Which documents a filter lets through: the documents an API key that carries a filter may
see (``RAGSPINE_API_KEYS``, :mod:`ragspine.serving.auth`).

The store decides, with the same compiled filter a search uses on the same page points, so a
document is visible exactly when a search through that key could find one of its pages. (A
second evaluator here could drift from Qdrant's semantics: ``ne`` passing a document without the
field, an array matching when one element does.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ragspine.store.base import KIND_PAGE, Store, Where
from ragspine.store.predicates import Predicate, parse_filters

#: An API key's filters on one library, in the JSON form of a search's ``filters``.
Scope = Sequence[Mapping[str, Any]]

def predicates(filters: Scope) -> tuple[Predicate, ...]:
    return tuple(parse_filters(filters))


def document_visible(store: Store, library: str, doc_id: str, version: int,
                     filters: Scope) -> bool:
    """Whether a page point of ``doc_id``'s ``version`` passes ``filters`` (no filters: yes)."""
    if not filters:
        return True
    where = Where(kind=KIND_PAGE, live=True, doc_id=doc_id, version=version, predicates=predicates(filters))
    return store.count(library, where) > 0


def visible_documents(store: Store, library: str, filters: Scope,
                      versions: Mapping[str, int]) -> Collection[str] | None:
    """The ids of the documents of ``versions`` (doc id -> active version) that pass
    ``filters``; ``None`` when there are no filters (every document)."""
    if not filters:
        return None
    where = Where(kind=KIND_PAGE, live=True, predicates=predicates(filters))
    return {str(r.payload["doc_id"]) for r in store.scroll(library, where, fields=["doc_id", "version"])
            if versions.get(str(r.payload.get("doc_id"))) == r.payload.get("version")}
