"""The networkx graph store on hand-built contributions: exact removal by source, persistence,
several replicas on one data dir, neighbourhoods and shortest paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from ragspine.catalog import Libraries
from ragspine.graph._model import (
    CITE_DECLARED,
    CITE_TEXT,
    DOCUMENT,
    RANK_DECLARED,
    RANK_METADATA,
    Contribution,
    EdgeSpec,
    NodeSpec,
)
from ragspine.graph._networkx import DB_NAME, NetworkXGraphStore
from ragspine.graph._stored import KIND_SRC, StoredGraphStore
from ragspine.graph.store import GraphStore, open_graph_store
from ragspine.scoring.bm25 import BM25Params
from ragspine.store.base import Where
from ragspine.store.server import ServerStore

LIB = "lib"
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


def node(nid: str, type_: str = "company", rank: int = RANK_DECLARED, aliases: tuple[str, ...] = ()) -> NodeSpec:
    return NodeSpec(nid, nid.upper(), type_, rank, aliases)


def declared(*edges: tuple[str, str, str], nodes: tuple[NodeSpec, ...] = ()) -> Contribution:
    ids = sorted({x for u, _, v in edges for x in (u, v)})
    specs = {n.id: n for n in (node(i) for i in ids)} | {n.id: n for n in nodes}
    return Contribution(tuple(specs.values()), tuple(
        EdgeSpec(u, rel, v, {"kind": CITE_DECLARED, "provenance": f"{u}-{v}", "file": "f", "row": i + 2})
        for i, (u, rel, v) in enumerate(edges)
    ))


def doc_text(doc: str, *targets: str) -> Contribution:
    return Contribution((), tuple(
        EdgeSpec(f"doc:{doc}", "mentions", t, {"kind": CITE_TEXT, "doc_id": doc, "page": 1, "chunk_id": f"{doc}/p1/c{i}"})
        for i, t in enumerate(targets)
    ))


def doc_meta(doc: str) -> Contribution:
    return Contribution((NodeSpec(f"doc:{doc}", doc, DOCUMENT, RANK_METADATA),), ())


def qdrant_graphs(client: QdrantClient | None = None) -> StoredGraphStore:
    """The cluster backend: the graph in library ``LIB``'s collection of a Qdrant double."""
    client = client if client is not None else QdrantClient(":memory:")
    libs = Libraries(ServerStore(client), BM25Params())
    if not libs.store.has_collection(LIB):
        libs.create(LIB)
    return StoredGraphStore(libs.store, libs)


def reopen(store: NetworkXGraphStore) -> NetworkXGraphStore:
    """A second store over the same persisted graph (another process, or a restart)."""
    if isinstance(store, StoredGraphStore):
        return StoredGraphStore(store.store, Libraries(store.store, BM25Params()))
    return NetworkXGraphStore(store.root)


@pytest.fixture(params=["files", "qdrant"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> NetworkXGraphStore:
    """Every backend answers the same (SQLite files by default; the library's collection in
    cluster mode)."""
    s = open_graph_store(tmp_path) if request.param == "files" else qdrant_graphs()
    assert isinstance(s, NetworkXGraphStore) and isinstance(s, GraphStore)
    return s


def test_sources_add_up_and_go_exactly(store: NetworkXGraphStore) -> None:
    store.replace_sources(LIB, {"declared": declared(("a", "subsidiary_of", "b"))})
    store.replace_sources(LIB, {"meta:d1": doc_meta("d1"), "text:d1": doc_text("d1", "a", "b")})
    store.replace_sources(LIB, {"meta:d2": doc_meta("d2"), "text:d2": doc_text("d2", "a")})
    before = store.snapshot(LIB)
    assert [n["id"] for n in before["nodes"]] == ["a", "b", "doc:d1", "doc:d2"]
    [mention_a] = [e for e in store.edges(LIB, "a", relations=["mentions"]) if e.source == "doc:d1"]
    assert [c["chunk_id"] for c in mention_a.citations] == ["d1/p1/c0"]

    # Removing d1 removes d1's edges and nothing else.
    store.replace_sources(LIB, {"meta:d1": None, "text:d1": None})
    after = store.snapshot(LIB)
    gone = {(e["source"], e["relation"], e["target"]) for e in before["edges"]} - {
        (e["source"], e["relation"], e["target"]) for e in after["edges"]}
    assert gone == {("doc:d1", "mentions", "a"), ("doc:d1", "mentions", "b")}
    assert [e for e in after["edges"] if "d1" in str(e)] == []
    assert [n["id"] for n in after["nodes"]] == ["a", "b", "doc:d2"]


def test_one_edge_many_sources(store: NetworkXGraphStore) -> None:
    store.replace_sources(LIB, {"declared": declared(("a", "peer_of", "b")),
                                "text:x": Contribution((), (EdgeSpec("a", "peer_of", "b", {"kind": "model", "doc_id": "x"}),))})
    [edge] = store.edges(LIB, "a")
    assert [c["kind"] for c in edge.citations] == ["declared", "model"]  # declared first
    store.replace_sources(LIB, {"declared": None})
    [edge] = store.edges(LIB, "a")
    assert [c["kind"] for c in edge.citations] == ["model"]
    # Nodes no source describes stay while an edge needs them (named by their id).
    assert store.node(LIB, "a").type == "unknown"  # type: ignore[union-attr]
    store.replace_sources(LIB, {"text:x": None})
    assert store.snapshot(LIB) == {"nodes": [], "edges": []}


def test_symmetric_edges_are_one_edge(store: NetworkXGraphStore) -> None:
    store.replace_sources(LIB, {"declared": declared(("a", "peer_of", "b")),
                                "other": declared(("a", "peer_of", "b"))})
    snap = store.snapshot(LIB)
    assert len(snap["edges"]) == 1 and snap["edges"][0]["citations_total"] == 2


def test_lookup_and_find(store: NetworkXGraphStore) -> None:
    store.replace_sources(LIB, {"declared": declared(
        ("acme-robotics", "subsidiary_of", "acme"),
        nodes=(node("acme", aliases=("阿克米控股",)), node("acme-robotics", "subsidiary", aliases=("阿克米机器人",))),
    ), "meta:d": doc_meta("d")})
    assert store.lookup(LIB, "阿克米控股") == ["acme"]
    assert store.lookup(LIB, "  ACME ") == ["acme"]
    assert store.lookup(LIB, "d") == []  # documents are not entities
    assert [n.id for n in store.find(LIB, "acme")] == ["acme", "acme-robotics"]  # exact, then prefix
    assert [n.id for n in store.find(LIB, "阿克米")] == ["acme", "acme-robotics"]
    assert [n.id for n in store.find(LIB, "米机")] == ["acme-robotics"]  # substring
    assert [n.id for n in store.find(LIB, "", types={"subsidiary"})] == ["acme-robotics"]
    assert [n.id for n in store.find(LIB, "", limit=1)] == ["acme"]


def chain_store(store: NetworkXGraphStore) -> None:
    # e -> d -> c -> b -> a (subsidiary_of), x peer_of b, doc:z mentions c
    store.replace_sources(LIB, {
        "declared": declared(("e", "subsidiary_of", "d"), ("d", "subsidiary_of", "c"), ("c", "subsidiary_of", "b"),
                             ("b", "subsidiary_of", "a"), ("x", "peer_of", "b")),
        "meta:z": doc_meta("z"), "text:z": doc_text("z", "c"),
    })


def test_neighbors_depth_relations_direction_limit(store: NetworkXGraphStore) -> None:
    chain_store(store)

    def ids(**kw):  # type: ignore[no-untyped-def]
        found, truncated = store.neighbors(LIB, "c", **kw)
        return [(n.node.id, n.depth) for n in found], truncated

    assert ids() == ([("b", 1), ("d", 1), ("doc:z", 1)], False)
    assert ids(depth=2) == ([("b", 1), ("d", 1), ("doc:z", 1), ("a", 2), ("x", 2), ("e", 2)], False)
    assert ids(depth=2, relations=["subsidiary_of"], direction="out") == ([("b", 1), ("a", 2)], False)
    assert ids(depth=3, relations=["subsidiary_of"], direction="in") == ([("d", 1), ("e", 2)], False)
    assert ids(depth=2, skip_types=[DOCUMENT], limit=3) == ([("b", 1), ("d", 1), ("a", 2)], True)
    found, _ = store.neighbors(LIB, "c", depth=2, relations=["subsidiary_of", "peer_of"])
    x = next(n for n in found if n.node.id == "x")
    assert [(e.source, e.relation, e.target) for e in x.path] == [("c", "subsidiary_of", "b"), ("b", "peer_of", "x")]
    assert [e.citations[0]["row"] for e in x.path] == [4, 6]
    assert store.neighbors(LIB, "nope") == ([], False)


def test_shortest_path_bounded_and_deterministic(store: NetworkXGraphStore, tmp_path: Path) -> None:
    chain_store(store)
    path = store.shortest_path(LIB, "e", "x", max_hops=4)
    assert [(e.source, e.relation, e.target) for e in path or []] == [
        ("e", "subsidiary_of", "d"), ("d", "subsidiary_of", "c"), ("c", "subsidiary_of", "b"), ("b", "peer_of", "x")]
    assert store.shortest_path(LIB, "e", "x", max_hops=3) is None
    assert store.shortest_path(LIB, "e", "e", max_hops=1) == []
    assert store.shortest_path(LIB, "e", "nope", max_hops=6) is None
    # Two ways of two hops (through b, through the document): the smaller middle id wins; a
    # relation filter chooses.
    store.replace_sources(LIB, {"text:z": doc_text("z", "c", "x")})
    assert [e.relation for e in store.shortest_path(LIB, "c", "x", max_hops=2) or []] == ["subsidiary_of", "peer_of"]
    only = store.shortest_path(LIB, "c", "x", max_hops=2, relations=["mentions"])
    assert [(e.source, e.target) for e in only or []] == [("doc:z", "c"), ("doc:z", "x")]
    # Two equally short ways: the same one every time, whatever the build order.
    other = NetworkXGraphStore(tmp_path / "other")  # another build, in another order
    other.replace_sources(LIB, {"text:z": doc_text("z", "c", "x")})
    other.replace_sources(LIB, {"meta:z": doc_meta("z")})
    other.replace_sources(LIB, {"declared": declared(("x", "peer_of", "b"), ("b", "subsidiary_of", "a"),
                                                     ("c", "subsidiary_of", "b"), ("d", "subsidiary_of", "c"),
                                                     ("e", "subsidiary_of", "d"))})
    for a, b in (("e", "x"), ("a", "doc:z"), ("x", "e")):
        p1 = store.shortest_path(LIB, a, b, max_hops=6)
        p2 = other.shortest_path(LIB, a, b, max_hops=6)
        assert [(e.source, e.relation, e.target) for e in p1 or []] == [(e.source, e.relation, e.target) for e in p2 or []]


def test_persisted_and_reloaded(tmp_path: Path) -> None:
    one = NetworkXGraphStore(tmp_path)
    chain_store(one)
    snap = one.snapshot(LIB)
    one.close()
    two = NetworkXGraphStore(tmp_path)
    assert two.snapshot(LIB) == snap
    assert two.stats(LIB)["generation"] == 1


def test_replicas_on_one_data_dir_see_each_other(tmp_path: Path) -> None:
    a, b = NetworkXGraphStore(tmp_path), NetworkXGraphStore(tmp_path)
    assert b.snapshot(LIB) == {"nodes": [], "edges": []} and not b.exists(LIB)
    a.replace_sources(LIB, {"declared": declared(("x", "peer_of", "y"))})
    assert [n["id"] for n in b.snapshot(LIB)["nodes"]] == ["x", "y"]
    b.replace_sources(LIB, {"meta:d": doc_meta("d"), "text:d": doc_text("d", "x")})
    a.replace_sources(LIB, {"declared": None})  # a catches up with b before writing
    assert a.snapshot(LIB) == b.snapshot(LIB)
    assert [e["relation"] for e in a.snapshot(LIB)["edges"]] == ["mentions"]
    gen = a.stats(LIB)["generation"]
    # The library is deleted (and re-created) by one replica: the other starts over.
    a.drop(LIB)
    assert not (tmp_path / LIB).exists()
    assert b.snapshot(LIB) == {"nodes": [], "edges": []}
    a.replace_sources(LIB, {"declared": declared(("p", "peer_of", "q"))})
    assert [n["id"] for n in b.snapshot(LIB)["nodes"]] == ["p", "q"]
    assert b.stats(LIB)["generation"] == 1 < gen


def test_a_failed_write_changes_nothing(store: NetworkXGraphStore) -> None:
    store.replace_sources(LIB, {"declared": declared(("a", "peer_of", "b"))})
    snap = store.snapshot(LIB)
    with pytest.raises(RuntimeError):
        with store.locked(LIB):
            store.replace_sources(LIB, {"declared": None, "meta:d": doc_meta("d")})
            assert store.snapshot(LIB)["nodes"] == [{"id": "doc:d", "name": "d", "type": "document", "aliases": []}]
            raise RuntimeError("boom")
    assert store.snapshot(LIB) == snap
    assert reopen(store).snapshot(LIB) == snap


def test_deleted_rows_are_overwritten_on_disk(tmp_path: Path) -> None:
    store = NetworkXGraphStore(tmp_path)
    secret = "zqxgraphsecretdoc"
    store.replace_sources(LIB, {f"meta:{secret}": doc_meta(secret)})
    store.replace_sources(LIB, {f"meta:{secret}": None})
    data = (store.root / LIB / DB_NAME).read_bytes()
    assert secret.encode() not in data


# -- the cluster backend: the graph in the library's collection ---------------------------------


def test_qdrant_replicas_see_each_other_and_start_over_after_a_drop() -> None:
    client = QdrantClient(":memory:")
    a, b = qdrant_graphs(client), qdrant_graphs(client)  # two replicas, one Qdrant
    assert b.snapshot(LIB) == {"nodes": [], "edges": []} and not b.exists(LIB)
    a.replace_sources(LIB, {"declared": declared(("x", "peer_of", "y"))})
    assert b.exists(LIB) and [n["id"] for n in b.snapshot(LIB)["nodes"]] == ["x", "y"]
    b.replace_sources(LIB, {"meta:d": doc_meta("d"), "text:d": doc_text("d", "x")})
    a.replace_sources(LIB, {"declared": None})  # a catches up with b before writing
    assert a.snapshot(LIB) == b.snapshot(LIB) == reopen(a).snapshot(LIB)
    assert [e["relation"] for e in a.snapshot(LIB)["edges"]] == ["mentions"]
    assert a.contribution(LIB, "text:d") == doc_text("d", "x")
    # superseded rows are gone; a removed source is a tombstone that names it by digest only
    rows = a.store.scroll(LIB, Where(kind=KIND_SRC))
    assert sorted(r.payload.get("key", "tomb") for r in rows) == ["meta:d", "text:d", "tomb"]
    assert "declared" not in str([r.payload for r in rows])
    gen = a.stats(LIB)["generation"]
    a.libraries.drop(LIB)  # the library is deleted and created again by one replica
    a.drop(LIB)
    a.libraries.create(LIB)
    assert b.snapshot(LIB) == {"nodes": [], "edges": []}
    a.replace_sources(LIB, {"declared": declared(("p", "peer_of", "q"))})
    assert [n["id"] for n in b.snapshot(LIB)["nodes"]] == ["p", "q"]
    assert b.stats(LIB)["generation"] == 1 < gen


def test_qdrant_a_write_that_died_before_its_commit_is_invisible_and_cleaned() -> None:
    client = QdrantClient(":memory:")
    a, b = qdrant_graphs(client), qdrant_graphs(client)
    a.replace_sources(LIB, {"declared": declared(("a", "peer_of", "b"))})
    snap = a.snapshot(LIB)
    real_put_if = a.store.put_if

    def die_at_commit(name: str, point: object, expect: object) -> bool:  # dies before the meta write
        if point.payload.get("kind") == "graph_meta":  # type: ignore[attr-defined]
            raise SystemExit("killed")
        return real_put_if(name, point, expect)  # type: ignore[arg-type]

    a.store.put_if = die_at_commit  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        a.replace_sources(LIB, {"declared": None, "meta:d": doc_meta("d")})
    a.store.put_if = real_put_if  # type: ignore[method-assign]
    assert b.snapshot(LIB) == snap  # rows above the committed generation are not read
    assert len(a.store.scroll(LIB, Where(kind=KIND_SRC, gen_above=1))) == 2  # left behind
    b.replace_sources(LIB, {"meta:e": doc_meta("e")})  # the next writer removes them first
    assert [n["id"] for n in reopen(b).snapshot(LIB)["nodes"]] == ["a", "b", "doc:e"]
    assert len(b.store.scroll(LIB, Where(kind=KIND_SRC))) == 2


def test_a_source_changed_twice_in_one_write_ends_as_last_set(store: NetworkXGraphStore) -> None:
    """Written then removed (and removed then written again) inside one write: every reader
    sees the last state, on every backend."""
    store.replace_sources(LIB, {"keep": declared(("k", "peer_of", "l"))})
    with store.locked(LIB):
        store.replace_sources(LIB, {"declared": declared(("a", "subsidiary_of", "b"))})
        store.replace_sources(LIB, {"declared": None})
        store.replace_sources(LIB, {"keep": None})
        store.replace_sources(LIB, {"keep": declared(("k", "peer_of", "m"))})
    for s in (store, reopen(store)):
        assert s.source_keys(LIB) == ["keep"]
        assert [(e["source"], e["target"]) for e in s.snapshot(LIB)["edges"]] == [("k", "m")]


def test_qdrant_a_stale_writer_cannot_commit_nor_show_its_rows() -> None:
    """A writer paused past its lease: the next holder commits the same generation while the
    paused writer's rows are still on their way. Its commit is refused (the meta write is
    conditional on the generation it started from), its late rows are not read (they are not
    the committing transaction's), and the next commit sweeps them away."""
    from ragspine.errors import LeaseLostError

    client = QdrantClient(":memory:")
    a, b = qdrant_graphs(client), qdrant_graphs(client)
    a.replace_sources(LIB, {"declared": declared(("a", "peer_of", "b"))})
    real_upsert, armed = a.store.upsert, [True]

    def b_commits_first(name: str, points: list) -> None:  # a's rows are late
        if armed[0] and any(p.payload.get("kind") == KIND_SRC for p in points):
            armed[0] = False
            b.replace_sources(LIB, {"meta:x": doc_meta("x")})
        real_upsert(name, points)

    a.store.upsert = b_commits_first  # type: ignore[method-assign]
    with pytest.raises(LeaseLostError, match="written by another replica"):
        a.replace_sources(LIB, {"meta:y": doc_meta("y")})
    a.store.upsert = real_upsert  # type: ignore[method-assign]
    assert not armed[0]
    assert [n["id"] for n in reopen(a).snapshot(LIB)["nodes"]] == ["a", "b", "doc:x"]
    assert [n["id"] for n in a.snapshot(LIB)["nodes"]] == ["a", "b", "doc:x"]
    late = [r for r in a.store.scroll(LIB, Where(kind=KIND_SRC)) if r.payload.get("key") == "meta:y"]
    assert len(late) == 1  # on disk, not in the graph
    b.replace_sources(LIB, {"meta:z": doc_meta("z")})  # the next commit sweeps it
    assert [r for r in a.store.scroll(LIB, Where(kind=KIND_SRC)) if r.payload.get("key") == "meta:y"] == []
    assert [n["id"] for n in reopen(b).snapshot(LIB)["nodes"]] == ["a", "b", "doc:x", "doc:z"]
