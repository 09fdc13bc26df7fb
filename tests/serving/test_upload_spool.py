"""Each replica spools uploads in its own folder of the shared data dir, and at start removes
only its own leftovers and folders nobody has touched for a day: never another replica's
upload in flight or in its queue."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ragspine.serving.spool import STALE_SPOOL_SECONDS, spool_dir


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_starting_replica_leaves_other_replicas_uploads_alone(tmp_path: Path) -> None:
    root = tmp_path / "uploads"
    other = root / "pod-b-1234"
    other.mkdir(parents=True)
    queued = other / "tmp1.pdf.part"
    queued.write_bytes(b"%PDF-1.7 queued on pod b")
    _age(queued, 3600)  # an hour in pod b's queue
    dead = root / "pod-c-99"
    dead.mkdir()
    gone = dead / "tmp2.pdf.part"
    gone.write_bytes(b"%PDF-1.7 pod c died")
    _age(gone, STALE_SPOOL_SECONDS + 60)
    _age(dead, STALE_SPOOL_SECONDS + 60)
    loose_old = root / "tmp3.pdf.part"  # the layout before per-replica folders
    loose_old.write_bytes(b"x")
    _age(loose_old, STALE_SPOOL_SECONDS + 60)
    loose_new = root / "tmp4.pdf.part"
    loose_new.write_bytes(b"x")

    mine = spool_dir(root, "pod-a-1")
    assert mine == root / "pod-a-1" and mine.is_dir()
    assert queued.read_bytes() == b"%PDF-1.7 queued on pod b"  # another replica's: kept
    assert loose_new.exists()  # recent: may be an older replica's upload in flight
    assert not dead.exists() and not loose_old.exists()  # untouched for a day: a dead replica's


def test_a_restarted_replica_removes_its_own_leftovers(tmp_path: Path) -> None:
    root = tmp_path / "uploads"
    mine = spool_dir(root, "pod-a")
    (mine / "crash.pdf.part").write_bytes(b"half an upload")
    (mine / "keep.txt").write_text("not an upload")
    assert spool_dir(root, "pod-a") == mine
    assert sorted(p.name for p in mine.iterdir()) == ["keep.txt"]


def test_an_upload_goes_through_after_its_idle_folder_was_taken_for_dead(tmp_path: Path) -> None:
    """Another replica may remove an idle replica's (empty, day-old) folder: the next upload
    makes it again instead of failing."""
    import asyncio
    from collections.abc import AsyncIterator

    from ragspine.errors import EmptyPDFError
    from ragspine.serving.spool import spool, too_big

    async def body() -> AsyncIterator[bytes]:
        yield b"%PDF-1.7 hello"

    root = tmp_path / "uploads"
    mine = spool_dir(root, "pod-idle")
    mine.rmdir()  # taken for a dead replica's by another one
    path = asyncio.run(spool(body(), mine, 1 << 20, suffix=".pdf.part", too_large=too_big, empty=EmptyPDFError("")))
    assert path.parent == mine and path.read_bytes() == b"%PDF-1.7 hello"


def test_hostile_replica_names_stay_one_folder_inside_the_spool(tmp_path: Path) -> None:
    from ragspine.catalog.leases import replica_id

    root = tmp_path / "uploads"
    for name in ("../../etc", "/abs/path", "..", ".", "a\x00b\nc", "x" * 5000, "名前 pod", ""):
        rid = replica_id(name)
        assert "/" not in rid and rid not in (".", "..") and len(rid) <= 90, rid
        folder = spool_dir(root, rid)
        assert folder.parent == root and folder.is_dir()
    assert replica_id("pod-7") != replica_id("pod-7")  # a new name each process start
