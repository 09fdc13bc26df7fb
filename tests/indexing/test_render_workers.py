"""Thumbnails of a text-only ingest on worker processes.

PyMuPDF keeps the GIL while it renders, so the helper thread that made a text-only ingest's
thumbnails ran instead of, not beside, the parsing and BM25 weighing of the ingesting thread:
one core of two sat idle. On a machine of two cores or more the thumbnails now render on worker
processes (``RAGSPINE_RENDER_WORKERS=0``, the default), and a batch of files ingests two at a
time. What must not change: the thumbnails themselves (byte for byte), which pages are rendered
(the kept ones only: a RESTRICTED page never reaches a worker), and a short document's cost (no
process is started for it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pdfs
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.indexing import render
from ragspine.indexing.ocr import first_phase_jobs
from ragspine.indexing.render import POOL_MIN_PAGES, THUMBNAIL_WORKERS, PageRenderer, render_workers

TEN = [f"Page {i} of the annual report: revenue, margin and outlook number {i}." for i in range(1, 11)]


@pytest.mark.parametrize(
    ("setting", "page_model", "on_cuda", "cpus", "expected"),
    [
        (1, False, False, 16, 0),  # 1 is the helper thread, whatever the machine
        (1, True, True, 16, 0),
        (3, False, False, 1, 3),  # a number of processes is taken as given
        (3, True, False, 2, 3),
        (0, True, True, 16, 8),  # auto, a page model on a GPU: up to 8, a core left to the encoder
        (0, True, True, 4, 3),
        (0, True, True, 1, 0),
        (0, True, False, 16, 0),  # auto, a page model on the CPU: the encoder bounds it
        (0, False, False, 1, 0),  # auto, thumbnails alone: not on one core
        (0, False, False, 2, THUMBNAIL_WORKERS),
        (0, False, False, 64, THUMBNAIL_WORKERS),
    ],
)
def test_render_workers_by_setting_model_and_cores(setting: int, page_model: bool, on_cuda: bool, cpus: int,
                                                   expected: int) -> None:
    assert render_workers(setting, page_model=page_model, on_cuda=on_cuda, cpus=cpus) == expected


@pytest.mark.parametrize(("ocr", "apart", "files", "jobs"),
                         [("off", False, 9, 1), ("off", True, 9, 2), ("off", True, 1, 1), ("auto", False, 2, 2)])
def test_two_files_at_once_when_thumbnails_render_apart(ocr: str, apart: bool, files: int, jobs: int) -> None:
    assert first_phase_jobs(ocr, files, renders_apart=apart) == jobs


def test_the_engine_ingests_two_files_at_once_only_when_renders_run_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)
    for workers, jobs in ((0, 2), (1, 1)):
        eng = Engine(Settings(data_dir=tmp_path / str(workers), ocr="off", render_workers=workers))
        try:
            assert eng.ingest_jobs(5) == jobs
            eng.indexer.renders.broken = True  # a pool that could not start renders on the thread
            assert eng.ingest_jobs(5) == 1
        finally:
            eng.close()


def _ingest(data_dir: Path, pdf: bytes, workers: int) -> tuple[dict[int, bytes], Any, bool]:
    eng = Engine(Settings(data_dir=data_dir, ocr="off", render_workers=workers))
    try:
        eng.create_library("lib")
        res = eng.ingest("lib", pdf, {"doc_id": "d"})
        thumbs = {n: eng.thumbnail("lib", "d", n).read_bytes() for n in range(1, res.pages_total + 1)
                  if n not in res.pages_dropped}
        return thumbs, res, eng.indexer.renders.started
    finally:
        eng.close()


def test_thumbnails_from_worker_processes_equal_the_render_threads_and_skip_restricted_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)
    secret = "Merger codename BLUEHERON: the board approved the offer."
    pdf = pdfs.make_pdf([*TEN[:6], pdfs.Page([secret], header="RESTRICTED"), *TEN[6:]])
    sent: list[int] = []
    submit = PageRenderer.submit

    def spy(self: PageRenderer, numbers: Any) -> Any:
        if self.pool is not None:
            sent.extend(numbers)
        return submit(self, numbers)

    monkeypatch.setattr(PageRenderer, "submit", spy)
    thread, res_t, started_t = _ingest(tmp_path / "thread", pdf, 1)
    procs, res_p, started_p = _ingest(tmp_path / "procs", pdf, 0)
    assert (started_t, started_p) == (False, True)  # the thread, then the pool really ran
    assert res_t.pages_dropped == res_p.pages_dropped == [7]
    assert sorted(sent) == [n for n in range(1, 12) if n != 7]  # the RESTRICTED page never went out
    assert set(procs) == set(thread) == set(sent)
    assert procs == thread  # byte for byte
    assert res_p.chunks == res_t.chunks
    for d in ("thread", "procs"):  # ten thumbnails on disk: none of the RESTRICTED page
        assert len([p for p in (tmp_path / d / "thumbnails").rglob("*.png")]) == 10


def test_a_short_document_renders_on_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)
    short = pdfs.make_pdf(TEN[: POOL_MIN_PAGES - 1])
    thumbs, res, started = _ingest(tmp_path / "short", short, 0)
    assert res.pages_indexed == POOL_MIN_PAGES - 1 and len(thumbs) == POOL_MIN_PAGES - 1
    assert not started  # no process started for a few thumbnails
    long = pdfs.make_pdf(TEN[:POOL_MIN_PAGES])
    _thumbs, _res, started = _ingest(tmp_path / "long", long, 0)
    assert started


def test_thumbnails_alone_go_in_batches_the_ingest_can_overlap(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # One batch of 256 pages would leave nothing to weigh while the batch renders.
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)
    batches: list[list[int]] = []
    submit = PageRenderer.submit

    def spy(self: PageRenderer, numbers: Any) -> Any:
        batches.append(list(numbers))
        return submit(self, numbers)

    monkeypatch.setattr(PageRenderer, "submit", spy)
    monkeypatch.setattr(render, "THUMBNAIL_BATCH", 4)
    _ingest(tmp_path / "b", pdfs.make_pdf(TEN), 0)
    assert batches == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    batches.clear()
    _ingest(tmp_path / "t", pdfs.make_pdf(TEN), 1)
    assert batches == [list(range(1, 11))]  # on the thread: one batch of up to 256 pages, as before


SCRIPT = """
import sys
from ragspine.config import Settings
from ragspine.engine import Engine
eng = Engine(Settings(data_dir=sys.argv[1], ocr="off", render_workers=2))
eng.create_library("lib")
res = eng.ingest("lib", open(sys.argv[2], "rb").read(), {"doc_id": "d"})
print("RESULT", res.status, res.pages_indexed, sum(1 for n in range(1, 11) if eng.thumbnail("lib", "d", n).exists()))
eng.close()
"""


def test_a_script_without_a_main_guard_still_gets_its_thumbnails(tmp_path: Path) -> None:
    # Spawned workers re-run a script's top level; without `if __name__ == "__main__":` they
    # cannot start, and the pages render on the script's own thread instead.
    import os
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT)
    pdf = tmp_path / "ten.pdf"
    pdf.write_bytes(pdfs.make_pdf(TEN))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}, "RAGSPINE_DENSE_MODEL": "none"}
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), str(pdf)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RESULT indexed 10 10" in r.stdout
    assert "render processes failed" in r.stderr


def test_a_recreated_library_gets_the_new_pdfs_thumbnails_not_the_old_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers keep their last documents open by name; library/doc_id/version repeats when a
    # library is deleted and recreated, so each renderer names its document uniquely.
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)
    old = pdfs.make_pdf(TEN)
    new = pdfs.make_pdf([f"Another report entirely, page {i}: cash flow and capital expenditure." for i in range(12)])
    fresh, _res, _started = _ingest(tmp_path / "fresh", new, 0)
    eng = Engine(Settings(data_dir=tmp_path / "reused", ocr="off", render_workers=0))
    try:
        eng.create_library("lib")
        eng.ingest("lib", old, {"doc_id": "d"})
        eng.delete_library("lib")
        eng.create_library("lib")
        res = eng.ingest("lib", new, {"doc_id": "d"})
        assert res.version == 1 and eng.indexer.renders.started
        got = {n: eng.thumbnail("lib", "d", n).read_bytes() for n in range(1, 13)}
    finally:
        eng.close()
    assert got == fresh


def test_no_room_for_the_spool_renders_on_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "usable_cpus", lambda: 2)

    def full(*_a: Any, **_k: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render.tempfile, "mkstemp", full)
    thumbs, res, _started = _ingest(tmp_path / "full", pdfs.make_pdf(TEN), 0)
    reference, _res, _ = _ingest(tmp_path / "thread", pdfs.make_pdf(TEN), 1)
    assert res.pages_indexed == 10 and thumbs == reference


def test_spools_of_dead_processes_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)  # exited: no process has this pid now (barring reuse within the test)
    left = tmp_path / f"{render.SPOOL_PREFIX}{dead_pid}-abc.pdf"
    mine = tmp_path / f"{render.SPOOL_PREFIX}{os.getpid()}-def.pdf"
    other = tmp_path / "ragspine-render-notapid.pdf"
    for f in (left, mine, other):
        f.write_bytes(b"%PDF-1.7 spooled")
    assert render.sweep_spools(str(tmp_path)) == 1
    assert not left.exists() and mine.exists() and other.exists()


def test_a_use_that_needs_more_workers_gets_a_larger_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    # Text-only documents may start the pool at 2; a page model on a GPU then needs min(8, 4 - 1).
    from types import SimpleNamespace

    from ragspine.indexing.render import RenderProcesses

    monkeypatch.setattr(render, "usable_cpus", lambda: 4)
    procs = RenderProcesses(0)
    try:
        small = procs.get(None, want_image=False)
        assert small is not None and small._max_workers == THUMBNAIL_WORKERS  # noqa: SLF001
        assert procs.get(None, want_image=False) is small  # the same need: the same pool
        gpu = SimpleNamespace(device=SimpleNamespace(type="cuda"))
        large = procs.get(gpu, want_image=True)
        assert large is not small and large._max_workers == 3  # noqa: SLF001
        assert procs.get(None, want_image=False) is large  # a smaller need keeps the larger pool
    finally:
        procs.close()


def test_a_pool_that_breaks_in_the_middle_of_a_document_finishes_it_on_the_thread() -> None:
    # The first batch renders on the workers; then the workers die (killed as the OOM killer
    # would): the batch in flight and the rest render on the caller's thread, byte for byte what
    # the thread renders, and the pool is given up for the documents after.
    import os
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from ragspine.indexing.pdf import open_pdf

    parsed = open_pdf(pdfs.make_pdf(TEN + TEN), tables="off")
    procs = render.RenderProcesses(2)
    thread = ThreadPoolExecutor(max_workers=1)
    try:
        r = PageRenderer(parsed, thread=thread, procs=procs, encoder=None, want_image=False, key="d/v1",
                         thumb_dpi=72, thumb_max_px=800, image_dpi=72)
        assert r.pool is not None
        first = r.collect(r.submit([1, 2, 3]), [1, 2, 3])
        assert not r._fallback and not procs.broken  # noqa: SLF001  (rendered by the workers)
        for pid in list(r.pool._processes):  # noqa: SLF001
            os.kill(pid, signal.SIGKILL)
        nums = list(range(4, 21))
        rest = r.collect(r.submit(nums), nums)
        later = r.collect(r.submit([5, 6]), [5, 6])
        assert procs.broken and r._fallback  # noqa: SLF001
        expect = r.render(list(range(1, 21)))
        assert [png for png, _ in first + rest] == [png for png, _ in expect]
        assert [png for png, _ in later] == [png for png, _ in expect[4:6]]
        assert procs.get(None, False) is None  # the next document renders on the thread
    finally:
        procs.close()
        thread.shutdown()
        parsed.close()
