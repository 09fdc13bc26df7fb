"""Page multivectors kept by ragspine beside an Edge shard: int8 codes, one scale per token, in
SQLite, scored by :func:`~ragspine.scoring.multivector.maxsim_int8` in numpy.

Why not in the shard: Qdrant stores a multivector as float16 at best (264 KB a ColPali page of
1,030 x 128), its int8 copies are extra to the originals, and its MaxSim rescoring of 100
candidates cost ~45 ms at 20,000 pages on 2 cores (~0.45 ms a candidate, random reads of
264 KB). Here a page is 132 KB of codes plus 4 KB of scales, and the exact stage reads the
candidates' codes in one SQLite query (~5 ms for 100) and scores them as one matrix product
(~10 ms). ``bench/scale.py`` measures both; docs/visual-scale.md has the figures.

Why SQLite (the standard library's ``sqlite3``): it gives atomic batches, crash recovery and
deletes that zero the freed bytes (``secure_delete``) for free; a hand-rolled append-only file
would need its own journal and compaction to promise the same. Pages are ~136 KB blobs, so the
database uses 64 KB pages (a blob spans 3 pages instead of 34; reading 100 candidates took
4-7 ms against 9-18 ms with 4 KB pages).

One process owns a library's shard (Edge locks it), and so its columns: every write goes
through this object. Readers use one connection per thread (WAL mode lets them read while a
document is written).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ragspine.errors import StoreError
from ragspine.scoring.multivector import maxsim_int8, quantize_int8

#: Format of the column file; a file of another format is refused, not misread.
COLUMN_FORMAT = 1
_PAGE_SIZE = 65536
#: SQLite binds at most 32,766 parameters per statement; ids are looked up in chunks of this.
_IN_CHUNK = 900


class MultivectorColumn:
    """One multivector field of one library: ``id -> (n_tokens, dim)`` int8 codes + scales."""

    def __init__(self, path: Path, dim: int | None = None) -> None:
        """Open the column at ``path``; with ``dim``, create it (it must not exist)."""
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self._closed = False
        if dim is not None:
            if self.path.exists():
                raise StoreError(f"vector column {self.path} already exists")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            with conn:
                conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
                conn.executemany("INSERT INTO meta VALUES (?, ?)", [("format", COLUMN_FORMAT), ("dim", int(dim))])
                conn.execute(
                    "CREATE TABLE pages (id TEXT PRIMARY KEY, n INTEGER NOT NULL, codes BLOB NOT NULL, "
                    "scale BLOB NOT NULL)"
                )
        elif not self.path.exists():
            raise StoreError(f"vector column {self.path} is missing")
        meta = dict(self._conn().execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != COLUMN_FORMAT:
            raise StoreError(f"vector column {self.path} has format {meta.get('format')}, "
                             f"this ragspine reads format {COLUMN_FORMAT}")
        self.dim = int(meta["dim"])

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError(f"vector column {self.path} is closed")
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")  # takes effect on a new file only
            conn.execute("PRAGMA journal_mode = WAL")
            # Deleted pages are overwritten with zeros: a page deleted (or re-classified
            # RESTRICTED) leaves no vectors in the file (docs/invariants.md).
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise StoreError(f"could not open vector column {self.path}: {exc}") from exc
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        return conn

    # -- writes -----------------------------------------------------------------------------

    def put(self, items: Sequence[tuple[str, npt.ArrayLike]]) -> None:
        """Store (or replace) the multivectors ``(n_tokens, dim)``, all or none."""
        rows = []
        for pid, vectors in items:
            v = np.asarray(vectors, dtype=np.float32)
            if v.ndim == 2 and v.shape[1] != self.dim:
                raise ValueError(f"multivector of point {pid} has dim {v.shape[1]}, the field has {self.dim}")
            if not np.isfinite(v).all():
                raise ValueError(f"multivector of point {pid} has non-finite values")
            q = quantize_int8(v)  # raises on a non-2-D or empty multivector
            rows.append((str(pid), int(q.codes.shape[0]), q.codes.tobytes(), q.scale.reshape(-1).tobytes()))
        if not rows:
            return
        conn = self._conn()
        with self._lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO pages (id, n, codes, scale) VALUES (?, ?, ?, ?)", rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def delete(self, ids: Iterable[str]) -> None:
        ids = [str(i) for i in ids]
        if not ids:
            return
        conn = self._conn()
        with self._lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for i in range(0, len(ids), _IN_CHUNK):
                    chunk = ids[i : i + _IN_CHUNK]
                    conn.execute(f"DELETE FROM pages WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def keep_only(self, ids: Iterable[str]) -> int:
        """Delete every page not in ``ids`` (the shard's points), then fold the write-ahead log
        into the file and give free space back; returns how many pages were deleted. Rows
        whose shard write failed after the column's succeeded are removed here."""
        keep = {str(i) for i in ids}
        stale = [pid for pid in self.ids() if pid not in keep]
        self.delete(stale)
        conn = self._conn()
        with self._lock:
            free, total = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_count"))
            if total and free / total > 0.25:
                conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(stale)

    # -- reads ------------------------------------------------------------------------------

    def ids(self) -> list[str]:
        return [r[0] for r in self._conn().execute("SELECT id FROM pages")]

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM pages").fetchone()[0])

    def _rows(self, ids: Sequence[str]) -> dict[str, tuple[int, bytes, bytes]]:
        conn = self._conn()
        out: dict[str, tuple[int, bytes, bytes]] = {}
        for i in range(0, len(ids), _IN_CHUNK):
            chunk = [str(x) for x in ids[i : i + _IN_CHUNK]]
            for pid, n, codes, scale in conn.execute(
                f"SELECT id, n, codes, scale FROM pages WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ):
                out[pid] = (n, codes, scale)
        return out

    def get(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored multivectors of ``ids`` (absent ids are left out), dequantized to float32."""
        out = {}
        for pid, (n, codes, scale) in self._rows(ids).items():
            c = np.frombuffer(codes, dtype=np.int8).reshape(n, self.dim)
            out[pid] = c.astype(np.float32) * np.frombuffer(scale, dtype=np.float32)[:, None]
        return out

    def maxsim(self, query: npt.ArrayLike, ids: Sequence[str]) -> dict[str, float]:
        """Exact MaxSim of ``query`` ``(nq, dim)`` against the stored pages of ``ids``
        (absent ids are left out)."""
        rows = self._rows(ids)
        if not rows:
            return {}
        order = list(rows)
        lengths = np.fromiter((rows[p][0] for p in order), dtype=np.int64, count=len(order))
        codes = np.frombuffer(b"".join(rows[p][1] for p in order), dtype=np.int8).reshape(-1, self.dim)
        scale = np.frombuffer(b"".join(rows[p][2] for p in order), dtype=np.float32)
        scores = maxsim_int8(query, codes, scale, lengths)
        return dict(zip(order, scores.tolist(), strict=True))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except sqlite3.Error:  # pragma: no cover - closing never fails on a sane file
                pass
        self._local = threading.local()
