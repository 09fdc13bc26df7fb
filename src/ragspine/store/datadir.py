"""One process per embedded data dir.

Qdrant Edge shards take no lock of their own, and two processes writing one shard corrupt it:
the embedded store takes the data dir with an exclusive ``flock`` for as long as it is open.
"""

from __future__ import annotations

import errno
import logging
import threading
from pathlib import Path
from typing import Any

from ragspine.errors import DataDirInUseError

logger = logging.getLogger(__name__)


#: The lock file of an embedded data dir (see lock_data_dir).
LOCK_FILE = ".lock"


def lock_data_dir(root: Path) -> DirLock | None:
    """Take the data dir for this store: an exclusive, non-blocking ``flock`` on a file in it,
    held until :meth:`ragspine.store.edge.EdgeStore.close` (or the process's end: the kernel drops it). Qdrant Edge
    shards take no lock of their own, and two processes writing one shard corrupt it, so a
    second store on the same data dir (a CLI command beside ``ragspine serve``) is refused at
    once with what to do instead. Several replicas share a Qdrant server, never a data dir."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (the README says one process per data dir)
        return None
    key = str(root.resolve())
    with _HELD_GUARD:
        if key in _HELD:  # flock would say the same, but not that it is this very process
            raise DataDirInUseError(
                f"the data dir {root.parent} is already open in this process; close the other store "
                "(Engine.close()) first")
        fh = open(root / LOCK_FILE, "a+b")  # noqa: SIM115 - held open for the store's life
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fh.close()
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirInUseError(
                    f"the data dir {root.parent} is in use by another ragspine process (a running 'ragspine "
                    "serve'?); stop it, or go through that server's REST API") from None
            # A filesystem without flock (some network and FUSE mounts): run, unguarded, and say so.
            logger.warning("cannot lock the data dir %s (%s): nothing stops a second process from opening it",
                           root.parent, exc)
            return None
        _HELD.add(key)
    return DirLock(fh, key)


#: Data dirs this process holds (see lock_data_dir).
_HELD: set[str] = set()
_HELD_GUARD = threading.Lock()


class DirLock:
    """The held lock; released by :meth:`close`, or when the store is garbage-collected
    unclosed (as the file's own lock would be)."""

    def __init__(self, fh: Any, key: str) -> None:
        self.fh = fh
        self.key = key

    def close(self) -> None:
        with _HELD_GUARD:
            if not self.fh.closed:
                _HELD.discard(self.key)
                self.fh.close()  # closing the file releases its lock

    def __del__(self) -> None:
        self.close()
