"""The graph storage seam: one Protocol, the backend chosen in :func:`open_graph_store`.

A backend keeps, per library, the contributions of every source (see
:mod:`ragspine.graph._model`) and the graph they make, and answers the lookups the service
needs. Writers wrap read-compute-write sequences in :meth:`GraphStore.locked`, which
serialises them across threads and across processes sharing the data dir.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ragspine.graph._model import DIRECTIONS, Contribution, Direction, Edge, Neighbor, Node, NodeSpec


@runtime_checkable
class GraphStore(Protocol):
    """What the relation graph needs from a graph backend, per library."""

    def locked(self, library: str) -> AbstractContextManager[None]:
        """Hold the library's write lock; reads inside see the latest committed state, and every
        :meth:`replace_sources` inside commits together (or not at all) when the block ends."""
        ...

    def exists(self, library: str) -> bool:
        """Whether the library has a persisted graph."""
        ...

    def replace_sources(self, library: str, changes: Mapping[str, Contribution | None]) -> None:
        """Set the contribution of each named source (``None`` removes the source)."""
        ...

    def source_keys(self, library: str) -> list[str]: ...

    def contribution(self, library: str, key: str) -> Contribution | None: ...

    def node_specs(self, library: str, node_id: str) -> Mapping[str, NodeSpec]:
        """What each source says about a node."""
        ...

    def node(self, library: str, node_id: str) -> Node | None: ...

    def nodes(self, library: str, types: Collection[str] | None = None) -> Iterator[Node]: ...

    def lookup(self, library: str, name: str) -> list[str]:
        """Ids of the non-document nodes named ``name`` (by id, name or alias, normalised)."""
        ...

    def find(self, library: str, query: str, *, types: Collection[str] | None = None, limit: int = 20) -> list[Node]:
        """Non-document nodes whose id, name or alias equals, starts with or contains ``query``
        (in that order; all of them for an empty query)."""
        ...

    def edges(
        self, library: str, node_id: str, *, relations: Collection[str] | None = None, direction: Direction = "both"
    ) -> list[Edge]: ...

    def neighbors(
        self,
        library: str,
        node_id: str,
        *,
        relations: Collection[str] | None = None,
        depth: int = 1,
        direction: Direction = "both",
        limit: int | None = None,
        skip_types: Collection[str] = (),
    ) -> tuple[list[Neighbor], bool]:
        """Nodes within ``depth`` hops, nearest first, each with the path that reached it; and
        whether ``limit`` cut the list. Nodes of ``skip_types`` are neither returned nor crossed."""
        ...

    def shortest_path(
        self, library: str, source: str, target: str, *, max_hops: int, relations: Collection[str] | None = None
    ) -> list[Edge] | None:
        """A shortest path of at most ``max_hops`` edges (either direction), or None."""
        ...

    def snapshot(self, library: str) -> dict[str, Any]:
        """Every node and edge with its citations, sorted (export, tests)."""
        ...

    def stats(self, library: str) -> dict[str, int]: ...

    def drop(self, library: str) -> None: ...

    def close(self) -> None: ...


def open_graph_store(data_dir: Path | str, backend: str = "networkx") -> GraphStore:
    """The graph backend named ``backend``, keeping its files under ``<data_dir>/graphs``."""
    factories = {"networkx": _networkx}
    if backend not in factories:
        from ragspine.graph.errors import GraphError

        raise GraphError(f"unknown graph backend {backend!r}; available: {', '.join(sorted(factories))}")
    return factories[backend](Path(data_dir) / "graphs")


def _networkx(root: Path) -> GraphStore:
    from ragspine.graph._networkx import NetworkXGraphStore

    return NetworkXGraphStore(root)


__all__: Sequence[str] = ["DIRECTIONS", "Direction", "GraphStore", "open_graph_store"]
