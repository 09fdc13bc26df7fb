"""The evaluation's ingest of a PDF set (ragspine.evaluation.corpus._ingest_pdfs): first phases side
by side, counts in file order, and a Ctrl-C that stops it. The engine is a stand-in that records
what it is asked to ingest."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ragspine.evaluation.corpus import _ingest_pdfs
from ragspine.evaluation.datasets import Dataset
from ragspine.indexing.ocr import first_phase_jobs


def _pdf_set(tmp_path: Path, names: list[str]) -> Dataset:
    docs = tmp_path / "documents"
    docs.mkdir()
    for name in names:
        (docs / name).write_bytes(b"%PDF-")
    return Dataset(name="t", layout="pdf", root=tmp_path, split="dev", queries={}, qrels={})


def test_first_phases_run_side_by_side_and_are_counted_in_file_order(tmp_path: Path) -> None:
    """Two first phases at once: the first file's waits (for its stamps, here for an event) until
    the second file's has started, which one at a time could never happen; the counts come out
    in file order whatever finished first."""
    ds = _pdf_set(tmp_path, ["a.pdf", "b.pdf"])
    second_started = threading.Event()
    calls: list[str] = []

    class Eng:
        settings = SimpleNamespace(ocr="auto")
        dense_queue = SimpleNamespace(join=lambda timeout=None: True)  # no dense phase owed

        def ingest_jobs(self, files: int) -> int:  # as Engine.ingest_jobs with OCR on
            return first_phase_jobs("auto", files)

        def ingest(self, library: str, path: Path, meta: dict[str, Any], defer_ocr: bool) -> Any:
            calls.append(meta["doc_id"])
            if meta["doc_id"] == "a":
                assert second_started.wait(10), "the second document's first phase never started"
            else:
                second_started.set()
            pending = meta["doc_id"] == "a"
            return SimpleNamespace(pages_total=3 if pending else 2, pages_indexed=2, pages_ocr=0,
                                   ocr="pending" if pending else "none", ocr_pages_read=1, ocr_seconds=0.5)

        def finish_ocr_later(self, library: str, doc_id: str) -> Any:
            fut: Future[Any] = Future()
            fut.set_result(SimpleNamespace(pages_indexed=3, pages_ocr=1))
            return fut

    names, counts = _ingest_pdfs(Eng(), "lib", ds, progress=False)
    assert sorted(calls) == ["a", "b"]
    assert names == {"a": "a.pdf", "b": "b.pdf"}
    # a: 3 pages, its first phase read 1 stamp page (0.5 s), all 3 indexed after its OCR (1 by
    # OCR); b: 2 pages, no OCR owed.
    assert (counts["pages"], counts["pages_indexed"], counts["pages_ocr"]) == (5, 5, 1)
    assert (counts["first_phase_pages"], counts["first_phase_stamp_pages"]) == (4, 1)
    assert counts["first_phase_stamp_s"] == 0.5 and counts["documents_ocr_deferred"] == 1


@pytest.mark.parametrize(("ocr", "files", "jobs"), [("off", 9, 1), ("auto", 1, 1), ("auto", 2, 2), ("full", 9, 2)])
def test_first_phase_jobs_by_context(ocr: str, files: int, jobs: int) -> None:
    assert first_phase_jobs(ocr, files) == jobs


def test_a_ctrl_c_stops_the_ingest_after_the_files_being_read_not_after_every_file(tmp_path: Path) -> None:
    # The executor's own exit waited for every queued file: a Ctrl-C during MMLongBench's first
    # phases went unheeded for minutes. Now the files not started are dropped.
    ds = _pdf_set(tmp_path, [f"{c}.pdf" for c in "abcdef"])
    calls: list[str] = []
    never = threading.Event()

    class Eng:
        settings = SimpleNamespace(ocr="off")  # one first phase at a time
        dense_queue = SimpleNamespace(join=lambda timeout=None: True)

        def ingest_jobs(self, files: int) -> int:  # as Engine.ingest_jobs with OCR off, renders on a thread
            return first_phase_jobs("off", files)

        def ingest(self, library: str, path: Path, meta: dict[str, Any], defer_ocr: bool) -> Any:
            calls.append(meta["doc_id"])
            if meta["doc_id"] == "b":
                raise KeyboardInterrupt  # as if Ctrl-C landed while b was read
            if meta["doc_id"] != "a":
                never.wait(1.0)  # a file takes a while: the one started after b is still being read
            return SimpleNamespace(pages_total=1, pages_indexed=1, pages_ocr=0, ocr="none",
                                   ocr_pages_read=0, ocr_seconds=0.0)

    with pytest.raises(KeyboardInterrupt):
        _ingest_pdfs(Eng(), "lib", ds, progress=False)
    # The one thread may have taken c before the Ctrl-C reached the loop; d to f never start.
    assert calls in (["a", "b"], ["a", "b", "c"])
