"""Page multivectors kept by ragspine beside an Edge shard: int8 codes with one scale per
token, in flat files, scored by :func:`~ragspine.scoring.multivector.maxsim_int8` in numpy.

Why not in the shard: Qdrant stores a multivector as float16 at best (264 KB a ColPali page of
1,030 x 128), its int8 copies come on top of the originals, and its MaxSim rescoring of 100
candidates cost ~45 ms at 20,000 pages on 2 cores. Here a page is 132 KB of codes plus 4 KB of
scales; the exact stage reads the candidates' bytes with ``preadv`` into buffers each thread
reuses and converts them from there into the matrix product. (A first version kept the codes
as SQLite blobs: reading 116 candidates and joining them cost ~25 ms a query, more than the
product. Memory maps cost a page fault every 4 KB touched: ~11,700 faults a query over 20,000
pages against ~2,300 with reused buffers, and a p50 that swung between 17 and 30 ms.)
``bench/scale.py`` measures it; docs/visual-scale.md has the figures.

Layout, per field: ``<field>.sqlite`` (the index: ``id -> (start, n)`` token offsets, and the
file generation), ``<field>.<gen>.codes`` (int8, ``dim`` bytes a token) and
``<field>.<gen>.scale`` (float32 a token). Writes append to the data files, fsync them, then
commit the index rows in one SQLite transaction: a crash leaves at worst unreferenced bytes.
Deletes overwrite a page's bytes with zeros before its index row goes, so a deleted (or
re-classified RESTRICTED) page leaves no vectors on disk. :meth:`keep_only` (run by the store's
optimize) rewrites the live pages into the next generation when a quarter of the file is
garbage; the index switches generation in the same transaction as the new offsets.

One process owns a library's shard (Edge locks it) and so its columns; writes and reads hold
this object's lock (a rewrite swaps the files), the arithmetic on what was read does not.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ragspine.errors import StoreError
from ragspine.scoring.multivector import maxsim_int8, quantize_int8
from ragspine.store.resident import ResidentColumn

logger = logging.getLogger(__name__)

#: Format of the column; a column of another format is refused, not misread.
COLUMN_FORMAT = 1
#: SQLite binds at most 32,766 parameters per statement; ids are deleted in chunks of this.
_IN_CHUNK = 900
#: Pages read and scored at a time (~35 MB of read buffer per thread for ColPali pages).
_READ_CHUNK = 256
#: :meth:`MultivectorColumn.keep_only` rewrites the files when this share of them is garbage.
COMPACT_GARBAGE_SHARE = 0.25

Row = tuple[str, int, bytes, bytes]  # (id, n_tokens, codes, scales)


class MultivectorColumn:
    """One multivector field of one library: ``id -> (n_tokens, dim)`` int8 codes + scales."""

    def __init__(self, path: Path, dim: int | None = None) -> None:
        """Open the column indexed at ``path`` (``<field>.sqlite``); with ``dim``, create it
        (it must not exist)."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._tls = threading.local()  # per-thread read buffers
        #: The device copy scoring this column when one is attached and built (store.resident).
        self.resident: ResidentColumn | None = None
        if dim is not None and self.path.exists():
            raise StoreError(f"vector column {self.path} already exists")
        if dim is None and not self.path.exists():
            raise StoreError(f"vector column {self.path} is missing")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA secure_delete = ON")  # deleted index rows are zeroed too
            if dim is not None:
                with self._txn():
                    self._db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
                    self._db.executemany("INSERT INTO meta VALUES (?, ?)",
                                         [("format", COLUMN_FORMAT), ("dim", int(dim)), ("gen", 0)])
                    self._db.execute("CREATE TABLE pages (id TEXT PRIMARY KEY, start INTEGER NOT NULL, "
                                     "n INTEGER NOT NULL)")
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format") != COLUMN_FORMAT:
                raise StoreError(f"vector column {self.path} has format {meta.get('format')}, "
                                 f"this ragspine reads format {COLUMN_FORMAT}")
            self.dim = int(meta["dim"])
            self._gen = int(meta["gen"])
            self._index: dict[str, tuple[int, int]] = {
                pid: (int(s), int(n)) for pid, s, n in self._db.execute("SELECT id, start, n FROM pages")}
        except sqlite3.Error as exc:
            raise StoreError(f"could not open vector column {self.path}: {exc}") from exc
        self._remove_other_generations()
        self._open_files()
        self._closed = False

    # -- files ------------------------------------------------------------------------------

    def _file(self, kind: str, gen: int) -> Path:
        return self.path.with_name(f"{self.path.stem}.{gen}.{kind}")

    def _remove_other_generations(self) -> None:
        """Files of a generation the index does not name are what a crash during a rewrite
        left (before or after its switch)."""
        for p in self.path.parent.glob(f"{self.path.stem}.*.*"):
            parts = p.name[len(self.path.stem) + 1:].split(".")
            if len(parts) == 2 and parts[1] in ("codes", "scale") and parts[0] != str(self._gen):
                p.unlink()

    def _open_files(self) -> None:
        self._fds = {k: os.open(self._file(k, self._gen), os.O_RDWR | os.O_CREAT, 0o644) for k in ("codes", "scale")}
        # The end of the data in tokens: appends go after any unreferenced tail a crash left.
        size = os.fstat(self._fds["codes"]).st_size // self.dim
        self._end = max([size] + [s + n for s, n in self._index.values()])

    def _close_files(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def _buffers(self, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """This thread's read buffers, at least ``tokens`` long: reused, so their pages stay
        mapped (a fresh 13 MB array, or a memory map of the file, cost a page fault every 4 KB;
        ~11,700 faults against ~2,300 and a steadier p50 over 20,000 pages)."""
        codes = getattr(self._tls, "codes", None)
        if codes is None or codes.shape[0] < tokens:
            cap = max(tokens, 4096)
            self._tls.codes = np.empty((cap, self.dim), dtype=np.int8)
            self._tls.scale = np.empty(cap, dtype=np.float32)
        return self._tls.codes, self._tls.scale

    def _read_into(self, kind: str, out: np.ndarray, offset: int) -> None:
        n = os.preadv(self._fds[kind], [memoryview(out).cast("B")], offset)
        if n != out.nbytes:
            raise StoreError(f"vector column {self.path}: {kind} file ends early ({n} of {out.nbytes} bytes "
                             f"at {offset}); the column is damaged")

    def _read(self, ids: Sequence[str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """``(id, codes, scale)`` of the stored pages of ``ids`` (absent ids left out), read into
        this thread's buffers: valid until this thread's next read. Reads hold the lock (the
        files are swapped by a rewrite); the arithmetic on them does not."""
        with self._lock:
            self._check_open()
            spans = [(str(pid), self._index[str(pid)]) for pid in ids if str(pid) in self._index]
            codes, scale = self._buffers(sum(n for _pid, (_s, n) in spans))
            out, off = [], 0
            for pid, (s, n) in spans:
                c, sc = codes[off : off + n], scale[off : off + n]
                self._read_into("codes", c, s * self.dim)
                self._read_into("scale", sc, s * 4)
                out.append((pid, c, sc))
                off += n
        return out

    def _write_at(self, start: int, codes: bytes, scale: bytes) -> None:
        os.pwrite(self._fds["codes"], codes, start * self.dim)
        os.pwrite(self._fds["scale"], scale, start * 4)

    def _sync(self) -> None:
        for fd in self._fds.values():
            os.fsync(fd)

    def _txn(self) -> "_Txn":
        return _Txn(self._db)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"vector column {self.path} is closed")

    # -- writes -----------------------------------------------------------------------------

    def put(self, items: Sequence[tuple[str, npt.ArrayLike]]) -> None:
        """Store (or replace) the multivectors ``(n_tokens, dim)``, all or none."""
        rows: list[Row] = []
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
        with self._lock:
            self._check_open()
            start = self._end
            spans: list[tuple[str, int, int]] = []
            for pid, n, codes, scale in rows:
                self._write_at(start, codes, scale)
                spans.append((pid, start, n))
                start += n
            self._sync()  # the data is on disk before the index names it
            with self._txn():
                self._db.executemany("INSERT OR REPLACE INTO pages (id, start, n) VALUES (?, ?, ?)", spans)
            self._end = start
            replaced = [self._index[pid] for pid, _s, _n in spans if pid in self._index]
            for pid, s, n in spans:
                self._index[pid] = (s, n)
            self._zero(replaced)
            if self.resident is not None:
                self.resident.put(rows)

    def _zero(self, spans: Sequence[tuple[int, int]]) -> None:
        """Overwrite the bytes of ``(start, n)`` spans with zeros (lock held)."""
        for s, n in spans:
            self._write_at(s, bytes(n * self.dim), bytes(n * 4))
        if spans:
            self._sync()

    def delete(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._check_open()
            found = [str(i) for i in ids if str(i) in self._index]
            if not found:
                return
            self._zero([self._index[pid] for pid in found])  # zeros first: no vectors outlive a delete
            with self._txn():
                for i in range(0, len(found), _IN_CHUNK):
                    chunk = found[i : i + _IN_CHUNK]
                    self._db.execute(f"DELETE FROM pages WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            for pid in found:
                del self._index[pid]
            if self.resident is not None:
                self.resident.delete(found)

    def keep_only(self, ids: Iterable[str]) -> int:
        """Delete every page not in ``ids`` (the shard's points: rows whose shard write failed
        after the column's are removed here), then rewrite the files when a quarter of them is
        garbage; returns how many pages were deleted."""
        keep = {str(i) for i in ids}
        with self._lock:
            self._check_open()
            stale = [pid for pid in self._index if pid not in keep]
            self.delete(stale)
            live = sum(n for _s, n in self._index.values())
            if self._end and (self._end - live) / self._end > COMPACT_GARBAGE_SHARE:
                self._compact()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(stale)

    def _compact(self) -> None:
        """Write the live pages back to back into the next generation and switch to it."""
        gen = self._gen + 1
        fds = {k: os.open(self._file(k, gen), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) for k in ("codes", "scale")}
        spans: list[tuple[str, int, int]] = []
        try:
            start = 0
            order = sorted(self._index, key=lambda pid: self._index[pid][0])
            for i in range(0, len(order), _READ_CHUNK):
                for pid, c, sc in self._read(order[i : i + _READ_CHUNK]):
                    os.pwrite(fds["codes"], c.tobytes(), start * self.dim)
                    os.pwrite(fds["scale"], sc.tobytes(), start * 4)
                    spans.append((pid, start, len(c)))
                    start += len(c)
            for fd in fds.values():
                os.fsync(fd)
        finally:
            for fd in fds.values():
                os.close(fd)
        with self._txn():
            self._db.executemany("UPDATE pages SET start = ? WHERE id = ?", [(s, pid) for pid, s, _n in spans])
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'gen'", (gen,))
        old = self._gen
        self._close_files()
        self._gen = gen
        self._index = {pid: (s, n) for pid, s, n in spans}
        self._open_files()
        for k in ("codes", "scale"):
            self._file(k, old).unlink(missing_ok=True)
        logger.info("%s: rewrote %d pages (%d tokens) into generation %d", self.path.stem, len(spans), self._end, gen)

    # -- reads ------------------------------------------------------------------------------

    def attach(self, resident: ResidentColumn) -> None:
        """Keep ``resident`` in step with every later write and let it score once built."""
        self.resident = resident

    def token_count(self) -> int:
        with self._lock:
            return sum(n for _s, n in self._index.values())

    def iter_rows(self, batch: int) -> Iterator[list[Row]]:
        """Every stored page as ``(id, n, codes, scale)``, ``batch`` rows at a time (the pages
        stored when the iteration started)."""
        with self._lock:
            ids = list(self._index)
        for i in range(0, len(ids), batch):
            yield [(pid, len(c), c.tobytes(), s.tobytes()) for pid, c, s in self._read(ids[i : i + batch])]

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored multivectors of ``ids`` (absent ids are left out), dequantized to float32."""
        out = {}
        for i in range(0, len(ids), _READ_CHUNK):
            out.update({pid: c.astype(np.float32) * s[:, None] for pid, c, s in self._read(ids[i : i + _READ_CHUNK])})
        return out

    def maxsim(self, query: npt.ArrayLike, ids: Sequence[str]) -> dict[str, float]:
        """Exact MaxSim of ``query`` ``(nq, dim)`` against the stored pages of ``ids``
        (absent ids are left out): on the device copy when it is ready, else in numpy."""
        if self.resident is not None:
            scores = self.resident.maxsim(query, ids)
            if scores is not None:
                return scores
        out: dict[str, float] = {}
        for i in range(0, len(ids), _READ_CHUNK):  # bounded buffers, even for every page of a library
            pages = self._read(ids[i : i + _READ_CHUNK])
            if pages:
                scores = maxsim_int8(query, [(c, s) for _pid, c, s in pages])
                out.update({pid: float(x) for (pid, _c, _s), x in zip(pages, scores, strict=True)})
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_files()
            try:
                self._db.close()
            except sqlite3.Error:  # pragma: no cover - closing never fails on a sane file
                pass


class _Txn:
    """``with``: one immediate SQLite transaction, committed on success, rolled back on error."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
