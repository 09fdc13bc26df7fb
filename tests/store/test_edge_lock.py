"""One process at a time on an embedded data dir: Qdrant Edge shards take no lock, and two
writers corrupt a shard, so a second store on a held data dir is refused at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragspine.errors import DataDirInUseError
from ragspine.store.edge import EdgeStore


def test_a_second_store_on_a_held_data_dir_is_refused(tmp_path: Path) -> None:
    first = EdgeStore(tmp_path)
    with pytest.raises(DataDirInUseError) as err:
        EdgeStore(tmp_path)
    assert err.value.status == 503
    assert str(tmp_path) in err.value.detail and "already open in this process" in err.value.detail
    first.close()
    EdgeStore(tmp_path).close()  # released by close


def test_an_engine_that_fails_to_start_gives_the_data_dir_back(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.config import Settings
    from ragspine.engine import Engine

    def broken(*a: object, **k: object) -> None:
        raise RuntimeError("a part of the engine failed to start")

    monkeypatch.setattr("ragspine.engine.GraphService", broken)
    with pytest.raises(RuntimeError):
        Engine(Settings(data_dir=tmp_path))
    monkeypatch.undo()
    Engine(Settings(data_dir=tmp_path)).close()  # not refused: the failed one let go


def test_a_filesystem_without_flock_runs_unguarded_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    store = EdgeStore(tmp_path)
    try:
        assert "cannot lock the data dir" in caplog.text and "No locks available" in caplog.text
    finally:
        store.close()


def test_another_process_is_refused_while_the_store_is_open(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        from ragspine.errors import DataDirInUseError
        from ragspine.store.edge import EdgeStore
        try:
            EdgeStore({str(tmp_path)!r}).close()
            print("opened")
        except DataDirInUseError:
            print("refused")
    """)

    def other() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()

    store = EdgeStore(tmp_path)
    try:
        assert other() == "refused"
    finally:
        store.close()
    assert other() == "opened"


def test_a_store_dropped_unclosed_gives_the_data_dir_back(tmp_path: Path) -> None:
    import gc

    EdgeStore(tmp_path)  # never closed: garbage once this line ends
    gc.collect()
    EdgeStore(tmp_path).close()
