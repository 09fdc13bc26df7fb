"""A library's relation graph built from some of its sources only: what a caller whose API key
reads the library through a filter may see (:meth:`GraphService.graphs_for`).

A view holds the declared relations and the contributions of the documents the filter lets
through, so an entity, an edge or a citation that only a hidden document gave is absent from
it, and a path cannot cross it. It reuses the full graph's reads (lookup, neighbours, shortest
path) over its own memory, and refuses every write.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ragspine.graph._model import Contribution
from ragspine.graph._memory import Memory
from ragspine.graph._networkx import NetworkXGraphStore, _Lib
from ragspine.graph.store import GraphStore

#: Views kept per service (one per library, graph generation and set of visible sources).
VIEW_CACHE = 16


class ReadOnlyGraphError(TypeError):
    pass


class GraphView(NetworkXGraphStore):
    """One library's graph from the sources given, in memory, read-only."""

    def __init__(self, library: str, mem: Memory) -> None:
        super().__init__(Path(os.devnull))
        self.library = library
        self._only = _Lib(Path(os.devnull))
        self._only.mem = mem

    def _lib(self, library: str) -> _Lib:
        if library != self.library:
            raise KeyError(f"this graph view is of library '{self.library}', not '{library}'")
        return self._only

    def _mem(self, lib: _Lib) -> Memory:
        assert lib.mem is not None
        return lib.mem

    @contextmanager
    def locked(self, library: str) -> Iterator[None]:
        raise ReadOnlyGraphError("a graph view is read-only")
        yield  # pragma: no cover

    def replace_sources(self, library: str, changes: Mapping[str, Contribution | None]) -> None:
        raise ReadOnlyGraphError("a graph view is read-only")

    def drop(self, library: str) -> None:
        raise ReadOnlyGraphError("a graph view is read-only")


def build_view(graphs: GraphStore, library: str, sources: Collection[str]) -> GraphView:
    mem = Memory()
    for key in sorted(sources):  # sorted: the same view whatever order the sources come in
        c = graphs.contribution(library, key)
        if c is not None:
            mem.apply(key, c)
    return GraphView(library, mem)


class GraphViews:
    """The views built lately, rebuilt when the library's graph changes (its generation)."""

    def __init__(self, graphs: GraphStore, size: int = VIEW_CACHE) -> None:
        self.graphs = graphs
        self.size = size
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, int, frozenset[str]], GraphView] = OrderedDict()

    def view(self, library: str, sources: Collection[str]) -> GraphView:
        key = (library, self.graphs.stats(library)["generation"], frozenset(sources))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        view = build_view(self.graphs, library, key[2])
        with self._lock:
            self._cache[key] = view
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return view
