"""A library's derived graph sources, kept in step with its manifest: each document's metadata
source (the entities its metadata names, resolved against the declared aliases) and its text
source (the alias dictionary matched in its passages). :class:`Derivation` works on one graph
store; the relation graph service keeps the library's own, and a rebuild derives everything on a
scratch store first (:mod:`ragspine.graph._backfill`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ragspine.catalog import Libraries
from ragspine.graph._declared import declared_index
from ragspine.graph._extract import AliasMatcher, RelationExtractor, metadata_contribution, text_contribution
from ragspine.graph._model import DECLARED, META_PREFIX, TEXT_MATCHED_TYPES, TEXT_PREFIX, Contribution, norm
from ragspine.graph.store import GraphStore
from ragspine.policy import is_restricted, point_restricted
from ragspine.store.base import KIND_CHUNK, Store, Where

logger = logging.getLogger(__name__)


def stored(c: Contribution) -> Contribution | None:
    """What a source stores: nothing when it has nothing to say."""
    return c if c.nodes or c.edges else None


class Derivation:
    """The derived sources of the libraries of one graph store (``graphs``), read from the
    manifest (``libraries``) and the stored passages (``store``)."""

    def __init__(self, graphs: GraphStore, store: Store, libraries: Libraries,
                 extractor: RelationExtractor | None = None) -> None:
        self.graphs = graphs
        self.store = store
        self.libraries = libraries
        #: Optional model-based relation extractor; off (None) by default.
        self.extractor = extractor
        self._matchers: dict[str, tuple[dict[str, str], AliasMatcher]] = {}
        self._guard = threading.Lock()

    def forget(self, library: str) -> None:
        """Drop what is cached of a deleted library."""
        with self._guard:
            self._matchers.pop(library, None)

    def dictionary(self, library: str) -> dict[str, str]:
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

    def text(
        self, library: str, doc_id: str, version: int, title: str | None, passages: Sequence[Mapping[str, Any]],
        dictionary: dict[str, str],
    ) -> Contribution:
        nodes = {n.id: n for n in self.graphs.nodes(library)} if self.extractor is not None else None
        return text_contribution(doc_id, version, passages, self._matcher(library, dictionary), title=title,
                                 nodes=nodes, extractor=self.extractor)

    def active_docs(self, library: str) -> dict[str, tuple[int, str | None, dict[str, Any]]]:
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

    def rederive_text(
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
            changes[TEXT_PREFIX + doc_id] = stored(self.text(library, doc_id, version, title, passages, dictionary))
        self.graphs.replace_sources(library, changes)

    def sync_documents(
        self, library: str, *, force_text: bool, before: dict[str, str] | None = None,
        own: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Make every document's sources match the manifest (call inside ``locked``): metadata
        sources always (they resolve against the declared aliases), text sources when the
        dictionary changed or ``force_text`` is set, else only those of documents whose text
        source is missing or of another version."""
        if before is None:
            before = self.dictionary(library)
        docs = self.active_docs(library)
        declared = declared_index(self.graphs.contribution(library, DECLARED))
        keys = set(self.graphs.source_keys(library))
        changes: dict[str, Contribution | None] = {
            k: None for k in keys if k.startswith(META_PREFIX) and k[len(META_PREFIX):] not in docs
        }
        for doc_id, (version, title, meta) in docs.items():
            changes[META_PREFIX + doc_id] = stored(metadata_contribution(doc_id, version, title, meta, declared))
        self.graphs.replace_sources(library, changes)
        after = self.dictionary(library)
        if force_text or after != before:
            self.rederive_text(library, after, docs, own or {})
        else:
            stale = {d for d, (version, _, _) in docs.items() if self._text_version(library, d) not in (None, version)}
            self.rederive_text(library, after, docs, own or {}, only=stale)

    def _text_version(self, library: str, doc_id: str) -> int | None:
        c = self.graphs.contribution(library, TEXT_PREFIX + doc_id)
        return int(c.edges[0].citation.get("version", 0)) if c is not None and c.edges else None
