"""The default :class:`~ragspine.graph.store.GraphStore`: networkx in memory, SQLite on disk.

Per library, ``<root>/<library>/graph.sqlite`` holds the contribution of every source as one
row (JSON), stamped with the generation that last wrote it; removed sources leave a tombstone
with their generation. The in-memory ``networkx.MultiDiGraph`` (edge key = relation) is
derived from the contributions (:class:`~ragspine.graph._memory.Memory`).

- Writes are SQLite transactions (atomic; ``BEGIN IMMEDIATE`` serialises writers across
  threads and processes); ``secure_delete`` overwrites what a write removes, and tombstones
  name removed sources by a digest, so a deleted document's id and title do not stay in the
  file.
- Every read first checks the file (inode, epoch, generation): a replica sharing the data
  dir applies only the rows written since the generation it holds, and starts over when the
  file was deleted or replaced (library deleted, re-created).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragspine.graph._memory import EdgeKey, Memory, gc_paused, key_hash
from ragspine.graph._model import Contribution, Direction, Edge, Neighbor, Node, NodeSpec, norm

logger = logging.getLogger(__name__)

DB_NAME = "graph.sqlite"
#: How long a writer waits for another process's write transaction before giving up.
BUSY_TIMEOUT_S = 120.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (key TEXT PRIMARY KEY, gen INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sources_gen ON sources (gen);
CREATE TABLE IF NOT EXISTS tombstones (key TEXT PRIMARY KEY, gen INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_gen ON tombstones (gen);
"""

def _digest(data: str) -> str:
    return hashlib.sha1(data.encode()).hexdigest()


class _Lib:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.db = folder / DB_NAME
        self.lock = threading.RLock()
        self.conn: sqlite3.Connection | None = None
        self.ident: tuple[int, int] | None = None
        self.epoch: str | None = None
        self.gen = 0
        self.mem: Memory | None = None
        self.txn_depth = 0
        self.txn_gen: int | None = None


class NetworkXGraphStore:
    """Graphs of many libraries under ``root`` (``<data_dir>/graphs``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._libs: dict[str, _Lib] = {}
        self._guard = threading.Lock()

    def _lib(self, library: str) -> _Lib:
        with self._guard:
            lib = self._libs.get(library)
            if lib is None:
                lib = self._libs[library] = _Lib(self.root / library)
            return lib

    # -- files --------------------------------------------------------------------------------

    @staticmethod
    def _reset(lib: _Lib) -> None:
        if lib.conn is not None:
            lib.conn.close()
        lib.conn, lib.ident, lib.epoch, lib.gen, lib.mem = None, None, None, 0, None

    def _connect(self, lib: _Lib, *, create: bool) -> sqlite3.Connection | None:
        """A connection to the library's current file (re-opened when the file was replaced)."""
        try:
            st = os.stat(lib.db)
        except FileNotFoundError:
            self._reset(lib)
            if not create:
                return None
            lib.folder.mkdir(parents=True, exist_ok=True)
            conn = self._open(lib.db)
            conn.executescript(_SCHEMA)
            conn.execute("INSERT OR IGNORE INTO meta (k, v) VALUES ('epoch', ?)", (uuid.uuid4().hex,))
            conn.execute("INSERT OR IGNORE INTO meta (k, v) VALUES ('gen', '0')")
            st = os.stat(lib.db)
            lib.conn, lib.ident = conn, (st.st_dev, st.st_ino)
            return conn
        if lib.conn is None or lib.ident != (st.st_dev, st.st_ino):
            self._reset(lib)
            lib.conn, lib.ident = self._open(lib.db), (st.st_dev, st.st_ino)
            if create:
                lib.conn.executescript(_SCHEMA)
                lib.conn.execute("INSERT OR IGNORE INTO meta (k, v) VALUES ('epoch', ?)", (uuid.uuid4().hex,))
                lib.conn.execute("INSERT OR IGNORE INTO meta (k, v) VALUES ('gen', '0')")
        return lib.conn

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA secure_delete = ON")
        return conn

    def _catch_up(self, lib: _Lib, conn: sqlite3.Connection) -> None:
        """Bring memory to the file's generation (call inside a transaction)."""
        try:
            meta = dict(conn.execute("SELECT k, v FROM meta").fetchall())
        except sqlite3.OperationalError:  # another process is creating the file
            lib.mem, lib.epoch, lib.gen = Memory(), None, 0
            return
        epoch, gen = meta.get("epoch"), int(meta.get("gen", 0))
        if lib.mem is None or epoch != lib.epoch or gen < lib.gen:
            mem = Memory()
            with gc_paused():
                for key, data in conn.execute("SELECT key, data FROM sources ORDER BY key"):
                    mem.apply(key, Contribution.from_json(json.loads(data)), _digest(data))
            lib.mem, lib.epoch, lib.gen = mem, epoch, gen
            logger.debug("graph %s loaded at generation %d", lib.folder.name, gen)
        elif gen > lib.gen:
            with gc_paused():
                for key, data in conn.execute("SELECT key, data FROM sources WHERE gen > ? ORDER BY key", (lib.gen,)):
                    lib.mem.apply(key, Contribution.from_json(json.loads(data)), _digest(data))
                for (digest,) in conn.execute("SELECT key FROM tombstones WHERE gen > ? ORDER BY key", (lib.gen,)):
                    key = lib.mem.hashes.get(digest)
                    if key is not None:
                        lib.mem.apply(key, None)
            lib.gen = gen

    def _mem(self, lib: _Lib) -> Memory:
        """The library's graph, current with the file (call with ``lib.lock`` held)."""
        if lib.txn_depth:
            assert lib.mem is not None
            return lib.mem
        conn = self._connect(lib, create=False)
        if conn is None:
            return Memory() if lib.mem is None else lib.mem
        conn.execute("BEGIN")
        try:
            self._catch_up(lib, conn)
        finally:
            conn.execute("COMMIT")
        assert lib.mem is not None
        return lib.mem

    # -- writes -------------------------------------------------------------------------------

    @staticmethod
    @contextmanager
    def _nested(lib: _Lib) -> Iterator[None]:
        lib.txn_depth += 1
        try:
            yield
        finally:
            lib.txn_depth -= 1

    @contextmanager
    def locked(self, library: str) -> Iterator[None]:
        lib = self._lib(library)
        with lib.lock:
            if lib.txn_depth:  # nested in this thread's write: part of it
                with self._nested(lib):
                    yield
                return
            conn = self._connect(lib, create=True)
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._catch_up(lib, conn)
                lib.txn_depth, lib.txn_gen = 1, None
                yield
                if lib.txn_gen is not None:
                    conn.execute("UPDATE meta SET v = ? WHERE k = 'gen'", (str(lib.txn_gen),))
                conn.execute("COMMIT")
                if lib.txn_gen is not None:
                    lib.gen = lib.txn_gen
            except BaseException:
                lib.mem = None  # memory may hold part of the failed write: reload it
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    logger.warning("graph %s: rollback failed", library, exc_info=True)
                raise
            finally:
                lib.txn_depth, lib.txn_gen = 0, None

    def exists(self, library: str) -> bool:
        return (self.root / library / DB_NAME).is_file()

    @staticmethod
    def _changes(lib: _Lib, changes: Mapping[str, Contribution | None]
                 ) -> Iterator[tuple[str, Contribution | None, str | None, str]]:
        """The changes that change something, in key order, as ``(key, new, its JSON, digest)``;
        the first one opens the write's generation (``lib.txn_gen``). Unchanged sources make no
        write and no new generation."""
        mem = lib.mem
        assert mem is not None
        for key in sorted(changes):
            new = changes[key]
            current = mem.sources.get(key)
            data = None if new is None else json.dumps(new.to_json(), ensure_ascii=False, separators=(",", ":"))
            digest = "" if data is None else _digest(data)
            if (current is None and new is None) or (current is not None and current[0] == digest):
                continue
            if lib.txn_gen is None:
                lib.txn_gen = lib.gen + 1
            yield key, new, data, digest

    def replace_sources(self, library: str, changes: Mapping[str, Contribution | None]) -> None:
        lib = self._lib(library)
        with self.locked(library), gc_paused():
            mem, conn = lib.mem, lib.conn
            assert mem is not None and conn is not None
            for key, new, data, digest in self._changes(lib, changes):
                if data is None:
                    conn.execute("DELETE FROM sources WHERE key = ?", (key,))
                    conn.execute("INSERT OR REPLACE INTO tombstones (key, gen) VALUES (?, ?)",
                                 (key_hash(key), lib.txn_gen))
                else:
                    conn.execute("INSERT OR REPLACE INTO sources (key, gen, data) VALUES (?, ?, ?)",
                                 (key, lib.txn_gen, data))
                    conn.execute("DELETE FROM tombstones WHERE key = ?", (key_hash(key),))
                mem.apply(key, new, digest)

    def drop(self, library: str) -> None:
        lib = self._lib(library)
        with lib.lock:
            self._reset(lib)
            shutil.rmtree(lib.folder, ignore_errors=True)

    def close(self) -> None:
        with self._guard:
            libs = list(self._libs.values())
        for lib in libs:
            with lib.lock:
                self._reset(lib)

    # -- reads --------------------------------------------------------------------------------

    def source_keys(self, library: str) -> list[str]:
        lib = self._lib(library)
        with lib.lock:
            return sorted(self._mem(lib).sources)

    def contribution(self, library: str, key: str) -> Contribution | None:
        lib = self._lib(library)
        with lib.lock:
            if key not in self._mem(lib).sources or lib.conn is None:
                return None
            row = lib.conn.execute("SELECT data FROM sources WHERE key = ?", (key,)).fetchone()
        return Contribution.from_json(json.loads(row[0])) if row else None

    def node_specs(self, library: str, node_id: str) -> Mapping[str, NodeSpec]:
        lib = self._lib(library)
        with lib.lock:
            return dict(self._mem(lib).specs.get(node_id, {}))

    def node(self, library: str, node_id: str) -> Node | None:
        lib = self._lib(library)
        with lib.lock:
            return self._mem(lib).node(node_id)

    def nodes(self, library: str, types: Collection[str] | None = None) -> Iterator[Node]:
        lib = self._lib(library)
        with lib.lock:
            out = [a["node"] for _, a in self._mem(lib).g.nodes(data=True) if "node" in a]
        return iter(sorted((n for n in out if types is None or n.type in types), key=lambda n: n.id))

    def lookup(self, library: str, name: str) -> list[str]:
        lib = self._lib(library)
        with lib.lock:
            return sorted(self._mem(lib).names.get(norm(name), ()))

    def find(self, library: str, query: str, *, types: Collection[str] | None = None, limit: int = 20) -> list[Node]:
        q = norm(query)
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            best: dict[str, int] = {}
            for key, ids in mem.names.items():
                rank = 0 if key == q else 1 if key.startswith(q) else 2 if q in key else None
                if rank is None:
                    continue
                for nid in ids:
                    if rank < best.get(nid, 3):
                        best[nid] = rank
            nodes = [(r, mem.node(nid)) for nid, r in best.items()]
        hits = [(r, n) for r, n in nodes if n is not None and (types is None or n.type in types)]
        hits.sort(key=lambda rn: (rn[0], norm(rn[1].name), rn[1].id))
        return [n for _, n in hits[:limit]]

    def edges(
        self, library: str, node_id: str, *, relations: Collection[str] | None = None, direction: Direction = "both"
    ) -> list[Edge]:
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            if node_id not in mem.g:
                return []
            return [mem.edge(s[2]) for s in mem.steps(node_id, relations, direction)]

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
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            g = mem.g
            if node_id not in g:
                return [], False
            allowed = frozenset(relations) if relations is not None else None
            skip = frozenset(skip_types)
            nodes = g._node
            memo: dict[EdgeKey, Edge] = {}
            parent: dict[str, tuple[str, EdgeKey] | None] = {node_id: None}
            level: dict[str, int] = {}
            found: list[str] = []
            truncated = False
            frontier = [node_id]
            for d in range(1, depth + 1):
                nxt: list[str] = []
                for u in frontier:
                    for v, _, key, _ in mem.steps(u, allowed, direction):
                        if v in parent:
                            continue
                        node = nodes[v].get("node")
                        if node is None or node.type in skip:
                            parent[v] = None  # seen; neither listed nor crossed
                            continue
                        if limit is not None and len(found) >= limit:
                            truncated = True
                            break
                        parent[v] = (u, key)
                        level[v] = d
                        found.append(v)
                        nxt.append(v)
                    if truncated:
                        break
                if truncated:
                    break
                frontier = nxt
            out = []
            for v in found:
                path: list[Edge] = []
                cur = v
                while (step := parent.get(cur)) is not None:
                    cur, key = step
                    path.append(mem.edge(key, memo))
                out.append(Neighbor(nodes[v]["node"], level[v], tuple(reversed(path))))
            return out, truncated

    def shortest_path(
        self, library: str, source: str, target: str, *, max_hops: int, relations: Collection[str] | None = None
    ) -> list[Edge] | None:
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            if source not in mem.g or target not in mem.g:
                return None
            if source == target:
                return []
            allowed = frozenset(relations) if relations is not None else None
            # Bidirectional breadth-first search, one whole level at a time on the smaller side.
            fwd: dict[str, tuple[str | None, EdgeKey | None, int]] = {source: (None, None, 0)}
            bwd: dict[str, tuple[str | None, EdgeKey | None, int]] = {target: (None, None, 0)}
            ff, fb, df, db = [source], [target], 0, 0
            while ff and fb and df + db < max_hops:
                forward = len(ff) <= len(fb)
                frontier, own, other = (ff, fwd, bwd) if forward else (fb, bwd, fwd)
                d = (df if forward else db) + 1
                nxt, meets = [], []
                for u in frontier:
                    for v, _, key, _ in mem.steps(u, allowed, "both"):
                        if v in own:
                            continue
                        own[v] = (u, key, d)
                        nxt.append(v)
                        if v in other:
                            meets.append(v)
                if forward:
                    ff, df = nxt, d
                else:
                    fb, db = nxt, d
                if meets:
                    m = min(meets, key=lambda v: (fwd[v][2] + bwd[v][2], v))
                    head: list[Edge] = []
                    cur: str | None = m
                    while cur is not None and fwd[cur][1] is not None:
                        prev, key, _ = fwd[cur]
                        head.append(mem.edge(key))  # type: ignore[arg-type]
                        cur = prev
                    tail: list[Edge] = []
                    cur = m
                    while cur is not None and bwd[cur][1] is not None:
                        nxt_node, key, _ = bwd[cur]
                        tail.append(mem.edge(key))  # type: ignore[arg-type]
                        cur = nxt_node
                    return list(reversed(head)) + tail
            return None

    def snapshot(self, library: str) -> dict[str, Any]:
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            nodes = sorted((a["node"].to_json() for _, a in mem.g.nodes(data=True) if "node" in a),
                           key=lambda n: n["id"])
            edges = sorted((mem.edge((u, rel, v)).to_json() for u, v, rel in mem.g.edges(keys=True)),
                           key=lambda e: (e["source"], e["relation"], e["target"]))
        return {"nodes": nodes, "edges": edges}

    def stats(self, library: str) -> dict[str, int]:
        lib = self._lib(library)
        with lib.lock:
            mem = self._mem(lib)
            return {"nodes": mem.g.number_of_nodes(), "edges": mem.g.number_of_edges(),
                    "sources": len(mem.sources), "generation": lib.gen}
