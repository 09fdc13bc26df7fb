"""``--watch``: the debouncer and the loop on a fake clock with injected watchdog events, files
still being written, and one real watchdog observer (slow)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pdfs
import pytest
from sync_kit import A_ID, B_ID, LIB, TOP_ID, doc_ids, outcomes, sync, write_pdf, write_sidecar
from watchdog.events import (
    DirDeletedEvent,
    DirModifiedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)
from watchdog.observers.api import BaseObserver

from ragspine.catalog.sync_record import SyncRecords
from ragspine.engine import Engine
from ragspine.sync import doc_id_for
from ragspine.sync.watch import ChangeHandler, Debouncer, WatchLoop, watch


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_debouncer_waits_for_quiet_after_the_last_change() -> None:
    d = Debouncer(2.0)
    assert d.wait_s(0.0) is None and not d.take(50.0)
    for t in (0.0, 0.5, 1.0):
        d.notice(t)
    assert d.wait_s(1.5) == 1.5
    assert not d.take(2.9)  # 1.9 s after the last change
    assert d.take(3.0)
    assert not d.take(3.1) and d.wait_s(3.1) is None  # taken once


def test_handler_counts_pdfs_and_sidecars_only() -> None:
    clock, d, wake = Clock(), Debouncer(2.0), threading.Event()
    h = ChangeHandler(d, clock, wake)
    for ev in (FileModifiedEvent("/r/notes.txt"), FileCreatedEvent("/r/.~lock.x.pdf"), FileOpenedEvent("/r/x.pdf"),
               DirModifiedEvent("/r/sub")):
        h.dispatch(ev)
    assert d.wait_s(clock()) is None and not wake.is_set()
    for t, ev in ((101.0, FileModifiedEvent("/r/a/x.pdf")), (102.0, FileModifiedEvent("/r/x.pdf.json")),
                  (103.0, FileMovedEvent("/r/x.part", "/r/Y.PDF")), (104.0, DirDeletedEvent("/r/old")),
                  (105.0, FileClosedEvent("/r/x.pdf"))):
        clock.t = t
        wake.clear()
        h.dispatch(ev)
        assert wake.is_set() and d.wait_s(t) == 2.0, ev


def test_a_burst_is_one_round_and_deferred_files_bring_another() -> None:
    clock, d = Clock(), Debouncer(2.0)
    h = ChangeHandler(d, clock, threading.Event())
    deferring = [True]
    rounds: list[float] = []

    def run_once() -> bool:
        rounds.append(clock.t)
        return deferring.pop(0) if deferring else False

    loop = WatchLoop(run_once, d, clock)
    for i in range(50):  # fifty files copied in 0.49 s
        clock.t = 100.0 + i * 0.01
        h.dispatch(FileCreatedEvent(f"/r/f{i}.pdf"))
    for t in (100.5, 101.0, 102.48):
        clock.t = t
        assert not loop.step()
    clock.t = 102.49
    assert loop.step() and rounds == [102.49]
    # That round deferred a file still being written: one more round after the quiet time.
    clock.t = 103.0
    assert not loop.step() and loop.sleep_s() == 0.5
    clock.t = 104.49
    assert loop.step() and rounds == [102.49, 104.49]
    clock.t = 200.0
    assert not loop.step() and loop.rounds == 2


def test_a_file_still_being_written_waits_and_a_half_written_one_is_retried(engine: Engine, folder: Path) -> None:
    # The fake clock runs 10 s ahead of the real one, so that the files' ctimes (set now, and
    # not settable) look settled and only the mtimes set below decide.
    now = [time.time_ns() + 10_000_000_000]
    young = write_pdf(folder / "young.pdf", "Still arriving.", mtime_ns=now[0] - 500_000_000)
    full = pdfs.make_pdf(["The finished report about penguins."])
    half = folder / "half.pdf"
    half.write_bytes(pdfs.truncated(full, 0.5))

    def run(at_ns: int) -> dict[str, str]:
        now[0] = at_ns
        return outcomes(sync(engine, folder, settle_s=2.0, now_ns=lambda: now[0]))

    t = now[0]
    os.utime(half, ns=(t - 3_000_000_000, t - 3_000_000_000))  # looks settled, but cut short
    got = run(t)
    assert got["young.pdf"] == "deferred" and got["half.pdf"] == "failed"
    assert "young.pdf" not in doc_ids(engine) and "half.pdf" not in doc_ids(engine)
    states = {e.path: e.state for e in SyncRecords(engine.libraries).all(LIB).values()}
    assert "young.pdf" not in states and states["half.pdf"] == "failed"  # never "indexed"
    # The writer finishes; the next rounds read both.
    half.write_bytes(full)
    os.utime(half, ns=(t + 1_000_000_000, t + 1_000_000_000))
    got = run(t + 2_000_000_000)
    assert got["young.pdf"] == "added" and got["half.pdf"] == "deferred"
    got = run(t + 3_100_000_000)
    assert got["half.pdf"] == "added" and doc_ids(engine) >= {"young.pdf", "half.pdf"}
    assert young.exists()


def test_a_copy_that_keeps_old_mtimes_still_waits_for_its_sidecar(engine: Engine, folder: Path) -> None:
    """``cp -p`` and ``rsync -t`` keep the mtime of the source: the arrival shows in the ctime
    (of the PDF, or of a sidecar that lands after it), and the file waits for the settle time."""
    old = time.time_ns() - 86_400_000_000_000  # a day-old mtime
    pdf = write_pdf(folder / "copied.pdf", "Board minutes about the merger.", mtime_ns=old)
    write_sidecar(pdf, {"sensitivity": "RESTRICTED"})
    os.utime(pdf.with_name("copied.pdf.json"), ns=(old, old))
    got = outcomes(sync(engine, folder, settle_s=2.0))
    assert got["copied.pdf"] == "deferred"
    assert "copied.pdf" not in doc_ids(engine)


def test_ctrl_c_stops_the_observer(folder: Path) -> None:
    def interrupted() -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        watch(folder, interrupted, quiet_s=0.1)
    assert [t for t in threading.enumerate() if isinstance(t, BaseObserver)] == []


def wait_for(pred: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_real_watchdog_syncs_changes_until_stopped(engine: Engine, folder: Path) -> None:
    stop, ready = threading.Event(), threading.Event()
    rounds: list[str] = []
    deferred: list[int] = []

    def run_once() -> bool:
        r = sync(engine, folder, delete=True, settle_s=0.5)
        deferred.append(r.count("deferred"))
        rounds.append(r.summary())
        return deferred[-1] > 0

    th = threading.Thread(target=watch, args=(folder, run_once), kwargs={"quiet_s": 0.5, "stop": stop,
                                                                         "on_ready": ready.set})
    th.start()
    try:
        assert ready.wait(30)
        # The fixture's files were written a moment ago: deferred by the first round (unless it came
        # late), read by the next.
        assert wait_for(lambda: bool(rounds) and deferred[-1] == 0 and doc_ids(engine) == {A_ID, B_ID, TOP_ID})
        assert rounds[-1] == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
        assert rounds[:-1] in ([], ["added 0, updated 0, unchanged 0, deleted 0, failed 0"])
        before = len(rounds)
        for i in range(5):
            write_pdf(folder / "burst" / f"n{i}.pdf", f"Burst file {i} about walruses.")
        (folder / "top.pdf").unlink()
        burst = {doc_id_for(f"burst/n{i}.pdf") for i in range(5)}
        # One round for the burst (two if the first caught a file young, which the next one reads).
        assert wait_for(lambda: len(rounds) > before and deferred[-1] == 0
                        and doc_ids(engine) == {A_ID, B_ID} | burst)
        time.sleep(1.5)  # no further round comes without a change
        assert len(rounds) - before in (1, 2)
        if len(rounds) - before == 1:
            assert rounds[-1] == "added 5, updated 0, unchanged 2, deleted 1, failed 0"
    finally:
        stop.set()
        th.join(10)
    assert not th.is_alive()
    assert [t for t in threading.enumerate() if isinstance(t, BaseObserver)] == []
