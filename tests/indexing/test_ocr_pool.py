"""The OCR worker pool (ragspine.indexing.ocr_pool): pages of one PDF read on worker processes,
a worker killed mid-page, a worker that dies on every page, niceness, and the backlog."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pymupdf
import pytest

import ocr_engines
import scans
from scans import Line, ScanPage
from ragspine.config import Settings
from ragspine.indexing.ocr import OcrOptions
from ragspine.indexing import ocr_pool, ocr_worker
from ragspine.indexing.ocr_pool import OcrProcesses, auto_workers
from ragspine.ocr import OcrError

OPTS = OcrOptions(mode="auto", dpi=72, min_text_chars=10, min_image_fraction=0.1, band=0.12)


def _scan(n: int, first: int = 500) -> bytes:
    # Page k is (first + 10 k) points wide: its 72-dpi render, and so the stand-in's text, says which.
    doc = pymupdf.open()
    for k in range(n):
        page = doc.new_page(width=first + 10 * k, height=700)
        page.insert_image(page.rect, pixmap=scans.picture([Line("x", y=100)], (first + 10 * k, 700), 36))
    return doc.tobytes()


def _reading_order(drive: Path) -> list[int]:
    """Widths of the images one worker read, in the order it started them."""
    marks = [p.name.split("-") for p in drive.glob("started-*")]  # started-<pid>-<n>-<w>
    return [int(w) for _, _, _, w in sorted(marks, key=lambda m: int(m[2]))]


def _wait_for(pred, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "drive"
    folder.mkdir()
    monkeypatch.setenv("OCR_TEST_DIR", str(folder))
    return folder


def test_auto_is_one_worker_per_core() -> None:
    assert auto_workers(0) == (os.cpu_count() or 1)
    assert auto_workers(3) == 3
    assert Settings().ocr_workers == 1  # tests/conftest.py: no pool unless a test asks
    with pytest.raises(ValueError, match="at least one worker"):
        OcrProcesses(0)


def test_pages_of_one_pdf_come_back_from_the_workers_each_with_its_own_text(drive: Path) -> None:
    pool = OcrProcesses(2, nice=0, factory=ocr_engines.file_driven)
    seen: list[tuple[int, int]] = []
    got: dict = {}
    (drive / "hold").touch()  # each worker waits inside its first page until both have one
    reader = threading.Thread(target=lambda: got.update(
        pool.read(_scan(5), [1, 2, 3, 4, 5], OPTS, progress=lambda d, t: seen.append((d, t)))))
    try:
        reader.start()
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 2)
        (drive / "hold").unlink()
        reader.join(60)
        # 72 dpi: a page (500 + 10 k) points wide renders (500 + 10 k) pixels wide.
        assert {n: [ln.text for ln in r.lines] for n, r in got.items()} == {
            k + 1: [f"harbour {500 + 10 * k}x700"] for k in range(5)}
        assert seen == [(i, 5) for i in range(1, 6)]
        assert len({p.name.split("-")[1] for p in drive.glob("started-*")}) == 2  # both workers read
        assert pool.backlog == 0 and pool.restarts == 0
    finally:
        pool.close()


def test_a_worker_killed_mid_page_is_replaced_and_its_pages_read_again(drive: Path) -> None:
    pool = OcrProcesses(2, nice=0, factory=ocr_engines.file_driven)
    (drive / "hold").touch()
    out: dict = {}
    reader = threading.Thread(target=lambda: out.update(pool.read(_scan(4), [1, 2, 3, 4], OPTS)))
    try:
        reader.start()
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 2)  # both workers are mid-page
        assert pool.backlog == 2  # one page per worker in the pool at a time
        victim = int(next(drive.glob("started-*")).name.split("-")[1])
        os.kill(victim, signal.SIGKILL)
        _wait_for(lambda: pool.restarts == 1)
        (drive / "hold").unlink()
        reader.join(60)
        assert not reader.is_alive()
        assert sorted(out) == [1, 2, 3, 4]
        assert [ln.text for ln in out[3].lines] == ["harbour 520x700"]
        assert victim not in pool.pids() and pool.backlog == 0
    finally:
        (drive / "hold").unlink(missing_ok=True)
        pool.close()


class _Reader(threading.Thread):
    """``pool.read`` on a thread of its own: ``out`` gets what it read, or ``error``."""

    def __init__(self, pool: OcrProcesses, scan: bytes, numbers: list[int]) -> None:
        super().__init__()
        self.out: dict = {}
        self._args = (pool, scan, numbers)

    def run(self) -> None:
        pool, scan, numbers = self._args
        try:
            self.out["read"] = pool.read(scan, numbers, OPTS)
        except OcrError as exc:
            self.out["error"] = exc


def _reader(pool: OcrProcesses, scan: bytes, numbers: list[int]) -> _Reader:
    reader = _Reader(pool, scan, numbers)
    reader.start()
    return reader


def _close_while_reading(pool: OcrProcesses, reader: _Reader) -> None:
    """Close ``pool`` on another thread: the close and the reader both end well before a held
    page's 60 s, the reader with an OcrError that says the workers were stopped."""
    closer = threading.Thread(target=pool.close)
    closer.start()
    closer.join(30)
    reader.join(30)
    assert not closer.is_alive() and not reader.is_alive()
    assert "read" not in reader.out and "stopped" in str(reader.out["error"])


def test_closing_stops_a_worker_mid_page_and_its_caller_gets_an_ocr_error(drive: Path) -> None:
    # A Ctrl-C reaches only the ingesting process (the workers have sessions of their own): its
    # close must not wait for the page being read, here one held for up to 60 s.
    pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven)
    (drive / "hold").touch()
    try:
        reader = _reader(pool, _scan(2), [1, 2])
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 1)  # the worker is mid-page
        (pid,) = pool.pids()
        _close_while_reading(pool, reader)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: gone
        with pytest.raises(OcrError, match="stopped"):
            pool.read(_scan(1), [1], OPTS)  # no fresh pool after a close
        assert list(drive.glob("started-*"))[0].name.split("-")[2] == "1"  # page 2 never started
        assert len(list(drive.glob("started-*"))) == 1
    finally:
        (drive / "hold").unlink(missing_ok=True)
        pool.close()


def test_closing_also_stops_a_page_still_read_by_a_replaced_pool(drive: Path) -> None:
    # A pool is replaced by a fresh one once its workers have read their share; its workers
    # finish the pages they hold. A close must stop those too: a shut-down executor no longer
    # lists its processes, so they have to be kept from before.
    pool = OcrProcesses(2, nice=0, factory=ocr_engines.file_driven, pages_per_worker=1)
    (drive / "hold-500").touch()  # the 500 pt page (500 px at 72 dpi) is held, no other
    try:
        reader = _reader(pool, _scan(1, first=500), [1])
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 1)
        held = int(next(drive.glob("started-*")).name.split("-")[1])  # started-<pid>-<n>-<w>
        pool.read(_scan(1, first=600), [1], OPTS)  # the first pool's second page: its share read
        pool.read(_scan(1, first=700), [1], OPTS)  # on a fresh pool
        assert pool.recycled == 1 and held not in pool.pids() and reader.is_alive()
        _close_while_reading(pool, reader)
        with pytest.raises(ProcessLookupError):
            os.kill(held, 0)  # stopped and reaped
    finally:
        (drive / "hold-500").unlink(missing_ok=True)
        pool.close()


def test_a_waiting_caller_s_page_goes_to_the_workers_before_a_background_document_s(drive: Path) -> None:
    from ragspine.indexing.ocr_pool import BACKGROUND, URGENT

    pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven)
    (drive / "hold").touch()
    out: dict = {}
    background = threading.Thread(target=lambda: out.update(
        background=pool.read(_scan(4), [1, 2, 3, 4], OPTS, priority=BACKGROUND)))
    urgent = threading.Thread(target=lambda: out.update(
        urgent=pool.read(_scan(1, first=700), [1], OPTS, priority=URGENT)))
    try:
        background.start()
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 1)  # page 1 is being read
        urgent.start()
        _wait_for(lambda: len(pool._slots._waiting) == 2)  # background page 2 and the urgent page wait
        (drive / "hold").unlink()
        background.join(60)
        urgent.join(60)
        # The background document's page 1 was already on the worker; the urgent page is next,
        # then the rest of the background document, in its own order.
        assert _reading_order(drive) == [500, 700, 510, 520, 530]
        assert [ln.text for ln in out["urgent"][1].lines] == ["harbour 700x700"]
        assert sorted(out["background"]) == [1, 2, 3, 4]
        assert pool.backlog == 0 and pool._slots.free == 1
    finally:
        (drive / "hold").unlink(missing_ok=True)
        pool.close()


def test_background_work_waits_while_an_urgent_read_is_in_progress_and_never_for_a_background_one(
        drive: Path) -> None:
    from ragspine.indexing.ocr_pool import BACKGROUND, URGENT

    pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven)
    try:
        assert pool.wait_urgent(0) and pool.urgent == 0  # nothing read yet: no wait
        (drive / "hold").touch()
        background = threading.Thread(target=lambda: pool.read(_scan(1), [1], OPTS, priority=BACKGROUND))
        background.start()
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 1)
        assert pool.wait_urgent(0)  # a background page held mid-read is not waited for
        (drive / "hold").unlink()
        background.join(60)

        (drive / "hold").touch()
        urgent = threading.Thread(target=lambda: pool.read(_scan(1, first=700), [1], OPTS, priority=URGENT))
        urgent.start()
        _wait_for(lambda: len(list(drive.glob("started-*"))) == 2)
        assert pool.urgent == 1 and not pool.wait_urgent(0.2)  # held mid-page: waited for, up to the timeout
        got: dict = {}
        waiter = threading.Thread(target=lambda: got.update(ok=pool.wait_urgent(60)))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive()
        (drive / "hold").unlink()  # the urgent page is read: the waiter goes on
        waiter.join(30)
        urgent.join(30)
        assert got == {"ok": True} and pool.urgent == 0
    finally:
        (drive / "hold").unlink(missing_ok=True)
        pool.close()
    with pytest.raises(OcrError, match="stopped"):
        pool.read(_scan(1), [1], OPTS, priority=URGENT)  # an urgent read that fails is over too
    assert pool.urgent == 0 and pool.wait_urgent(0)


def test_ocr_on_cuda_is_checked_when_the_engine_starts_not_at_the_first_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import onnxruntime
    import torch

    from ragspine.engine import Engine
    from ragspine.ocr import OcrUnavailableError

    # A machine with no GPU (and onnxruntime's CPU wheel), as CI's, made so on any machine: the
    # error names both ways to one.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(OcrUnavailableError, match=r"RAGSPINE_OCR_DEVICE=cuda\) needs torch with a CUDA device .*"
                                                   r"or onnxruntime-gpu: .*sees no CUDA device"):
        Engine(Settings(data_dir=tmp_path, ocr_device="cuda", ocr_workers=2))
    # OCR off needs no GPU, whatever the device says; on the CPU there is a pool of workers.
    Engine(Settings(data_dir=tmp_path, ocr="off", ocr_device="cuda")).close()
    eng = Engine(Settings(data_dir=tmp_path, ocr_device="auto", ocr_workers=2))
    try:
        assert eng.indexer.ocr_pool is not None and eng.indexer.ocr_pool.workers == 2
    finally:
        eng.close()


def test_workers_that_die_on_every_page_fail_the_call_with_the_pages_named(drive: Path) -> None:
    pool = OcrProcesses(2, nice=0, factory=ocr_engines.dying)
    try:
        with pytest.raises(OcrError, match=r"died 2 times while reading pages \[1, 2\]"):
            pool.read(_scan(2), [1, 2], OPTS)
        assert pool.restarts == 2 and pool.backlog == 0
    finally:
        pool.close()


def test_workers_run_at_the_configured_niceness(drive: Path) -> None:
    pool = OcrProcesses(1, nice=7, factory=ocr_engines.file_driven)
    try:
        pool.read(_scan(1), [1], OPTS)
        (pid,) = pool.pids()
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) + 7
        # Against the whole machine: a session (an autogroup) of its own, whose nice is the worker's.
        assert os.getsid(pid) == pid != os.getsid(0)
        if Path(ocr_worker.AUTOGROUP).exists():  # Linux with CONFIG_SCHED_AUTOGROUP, as on CI
            assert Path(f"/proc/{pid}/autogroup").read_text().split()[-2:] == ["nice", "7"]
    finally:
        pool.close()


def test_a_worker_at_nice_0_stays_in_its_parent_s_session(drive: Path) -> None:
    # Its own autogroup at nice 0 would weigh as much as the whole server: more CPU than before.
    pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven)
    try:
        pool.read(_scan(1), [1], OPTS)
        (pid,) = pool.pids()
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        pool.close()


def _forked(fn: Callable[[], object]) -> object:
    """``fn()`` in a forked child (which sees this process's monkeypatches); its JSON result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return json.loads(out)


def test_where_the_kernel_has_no_autogroups_a_worker_is_only_niced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ocr_worker, "AUTOGROUP", "/proc/self/no-such-file")

    def lowered() -> object:
        ocr_worker._lower_priority(5)
        return [os.getsid(0), os.getpriority(os.PRIO_PROCESS, 0)]

    assert _forked(lowered) == [os.getsid(0), os.getpriority(os.PRIO_PROCESS, 0) + 5]


def test_a_worker_whose_group_cannot_be_given_its_nice_is_still_niced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A read-only /proc or a sandbox: writing the group's nice fails; the worker goes on, niced.
    monkeypatch.setattr(ocr_worker, "AUTOGROUP", str(tmp_path))  # exists, but a folder: open() fails

    def lowered() -> object:
        ocr_worker._lower_priority(5)
        return os.getpriority(os.PRIO_PROCESS, 0)

    assert _forked(lowered) == os.getpriority(os.PRIO_PROCESS, 0) + 5


@pytest.mark.parametrize(("operator", "expected"), [(None, "0"), ("64", "64")])
def test_workers_load_their_engine_with_onednn_s_primitive_cache_off_unless_the_operator_set_it(
        drive: Path, monkeypatch: pytest.MonkeyPatch, operator: str | None, expected: str) -> None:
    if operator is None:
        monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", operator)
    pool = OcrProcesses(1, factory=ocr_engines.env_recording)
    try:
        pool.read(_scan(1), [1], OPTS)
        (pid,) = pool.pids()
        assert (drive / f"env-{pid}").read_text() == expected
    finally:
        pool.close()
    assert os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == operator  # the ingesting process is untouched


def test_workers_that_cannot_start_fall_back_to_the_ingesting_thread(drive: Path) -> None:
    from ragspine.indexing.ocr import OcrStage
    from ragspine.indexing.ocr_pool import PoolUnavailable
    from ragspine.indexing.pdf import open_pdf

    pool = OcrProcesses(2, nice=0, factory=ocr_engines.unloadable)
    try:
        with pytest.raises(PoolUnavailable):
            pool.read(_scan(1), [1], OPTS)
        assert pool.unavailable and not pool.started
        # OcrStage reads on its own thread instead (the real engine here) and gets the text.
        stage = OcrStage(Settings(ocr_workers=2), pool)
        parsed = open_pdf(scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])]),
                          max_pages=10, max_page_side_pt=14400)
        try:
            read = stage.read(parsed)
        finally:
            parsed.close()
        assert "container volumes doubled" in " ".join(t for t, _ in read[1]).lower()
    finally:
        pool.close()


SCRIPT = """
import sys
from ragspine.config import Settings
from ragspine.engine import Engine
eng = Engine(Settings(data_dir=sys.argv[1], ocr_workers=2))
eng.create_library("lib")
res = eng.ingest("lib", open(sys.argv[2], "rb").read(), {"doc_id": "scan"})
print("RESULT", res.status, res.pages_ocr, eng.search({"query": "container", "libraries": ["lib"]}).hits[0].page)
eng.close()
"""


def test_a_script_without_a_main_guard_still_ingests_a_scan(tmp_path: Path) -> None:
    # Spawned workers re-run a script's top level; without `if __name__ == "__main__":` they
    # cannot start. The probe finds it before any page is sent, and OCR runs in the script.
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT)
    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])]))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}, "RAGSPINE_DENSE_MODEL": "none"}
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), str(pdf)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RESULT indexed 1 1" in r.stdout
    assert "OCR worker processes could not start" in r.stderr and "__main__" in r.stderr


def test_new_pages_go_to_a_fresh_pool_once_the_workers_have_read_their_share(drive: Path) -> None:
    # The memory bound: one worker, a fresh pool every 2 pages; every page is still read once.
    pool = OcrProcesses(1, nice=0, factory=ocr_engines.file_driven, pages_per_worker=2)
    try:
        got = pool.read(_scan(5), [1, 2, 3, 4, 5], OPTS)
        assert {n: [ln.text for ln in r.lines] for n, r in got.items()} == {
            k + 1: [f"harbour {500 + 10 * k}x700"] for k in range(5)}
        assert (pool.recycled, pool.restarts, pool.backlog) == (2, 0, 0)
        pids = {p.name.split("-")[1] for p in drive.glob("started-*")}
        assert len(pids) == 3  # pages 1-2 | 3-4 | 5: three worker processes in turn
        with pytest.raises(ValueError, match="pages_per_worker must be at least 1"):
            OcrProcesses(1, pages_per_worker=0)
    finally:
        pool.close()


ORPHAN_SCRIPT = """
import sys, time
import ocr_engines
from ragspine.indexing.ocr import OcrOptions
from ragspine.indexing.ocr_pool import OcrProcesses

if __name__ == "__main__":
    pool = OcrProcesses(2, nice=0, factory=ocr_engines.file_driven)
    opts = OcrOptions(mode="auto", dpi=72, min_text_chars=10, min_image_fraction=0.1, band=0.12)
    pool.read(open(sys.argv[1], "rb").read(), [1, 2], opts)
    deadline = time.monotonic() + 60
    while len(pool.pids()) < 2 and time.monotonic() < deadline:  # the second may still be starting
        time.sleep(0.05)
    print("PIDS", *pool.pids(), flush=True)
    time.sleep(600)  # killed by the test, the pool never closed
"""


def test_workers_end_when_their_ingesting_process_is_killed_without_closing_the_pool(
        drive: Path, tmp_path: Path) -> None:
    # A server killed by SIGKILL, or by a SIGTERM that uvicorn re-raises past the code that
    # closes the pool, must not leave its OCR workers behind (each holds ~0.6 GB).
    import subprocess
    import sys

    script = tmp_path / "orphans.py"
    script.write_text(ORPHAN_SCRIPT)
    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(_scan(2))
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(pdf)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("PIDS"), line
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    _wait_for(lambda: not any(_alive(p) for p in pids), seconds=30)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan is reaped by init once it exits)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
