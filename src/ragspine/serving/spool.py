"""Uploads copied to disk before anything reads them: a PDF before its ingest, a backup file
before its restore. Each replica has its own folder under the data dir's ``uploads/``; what a
crash left there is removed at the next start."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ragspine.errors import OversizeError, RagspineError

#: Uploads are read and written in pieces of this size.
CHUNK = 1 << 20
#: A spool folder (or a loose ``.part`` file) untouched this long belongs to a replica that is
#: gone: an upload is written in seconds and waits in its replica's queue, never a day.
STALE_SPOOL_SECONDS = 24 * 3600


def too_big(size: int, limit: int, setting: str = "RAGSPINE_MAX_UPLOAD_BYTES", what: str = "the upload") -> str:
    return f"{what} is {size} bytes; the limit is {limit} bytes ({setting})"


def spool_dir(root: Path, replica: str, *, stale_after: float = STALE_SPOOL_SECONDS) -> Path:
    """This replica's own upload folder under ``root`` (the data dir is shared by every
    replica). Uploads another replica is writing or has queued are never touched: only its
    own folder's leftovers go (a crash of this process), and other folders (or loose files of
    older versions) once nothing in them has changed for ``stale_after`` seconds."""
    root.mkdir(parents=True, exist_ok=True)
    mine = root / replica
    now = time.time()

    def newest(path: Path) -> float:
        try:
            times = [path.stat().st_mtime]
            if path.is_dir():
                times += [f.stat().st_mtime for f in path.iterdir()]
        except FileNotFoundError:  # being removed or renamed right now: someone else's
            return now
        return max(times)

    for entry in root.iterdir():
        if entry == mine or now - newest(entry) < stale_after:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.endswith(".part"):
            entry.unlink(missing_ok=True)
    mine.mkdir(exist_ok=True)
    for stale in mine.glob("*.part"):  # this replica's own uploads and backups, left by a crash
        stale.unlink(missing_ok=True)
    return mine


async def spool(chunks: AsyncIterator[bytes], folder: Path, limit: int, *, suffix: str,
                too_large: Callable[[int, int], str], empty: RagspineError) -> Path:
    """Copy ``chunks`` to a private temp file in ``folder``, refusing them as soon as they pass
    ``limit`` bytes (413, ``too_large(size, limit)``) or when there are none (``empty``)."""
    folder.mkdir(parents=True, exist_ok=True)  # another replica may have taken an idle one for dead
    fd, name = tempfile.mkstemp(dir=folder, suffix=suffix)
    path = Path(name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise OversizeError(too_large(size, limit) + " (stopped reading)")
                out.write(chunk)
        if size == 0:
            raise empty
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise
