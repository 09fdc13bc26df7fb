"""The OCR second phases at a stop: within the drain time a running one finishes; past it, it
stops at its next page with ``server-stopping`` (uncommitted), and queued ones never start."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ragspine.errors import ServerStoppingError
from ragspine.indexing.ocr_phase import OcrQueue


class SlowPhase:
    """A phase 2 reading ``pages`` pages, ``seconds`` each, reporting each page."""

    def __init__(self, pages: int, seconds: float) -> None:
        self.pages, self.seconds = pages, seconds
        self.started: list[str] = []
        self.pages_read: dict[str, int] = {}
        self.committed: list[str] = []
        self.first_page = threading.Event()

    def __call__(self, library: str, doc_id: str, progress: Any) -> str:
        self.started.append(doc_id)
        for n in range(1, self.pages + 1):
            time.sleep(self.seconds)
            self.pages_read[doc_id] = n
            self.first_page.set()
            progress(n, self.pages)
        self.committed.append(doc_id)
        return doc_id


def test_past_the_drain_time_a_running_phase_stops_at_its_next_page() -> None:
    phase = SlowPhase(pages=400, seconds=0.01)  # ~4 s if left to run
    q = OcrQueue(phase, threads=1)
    running = q.submit("lib", "a")
    queued = q.submit("lib", "b")
    assert phase.first_page.wait(10)
    q.close(drain=0.05)
    with pytest.raises(ServerStoppingError, match="stopped before its new version went live"):
        running.result()
    assert queued.cancelled() and phase.started == ["a"] and phase.committed == []
    assert phase.pages_read["a"] < phase.pages


def test_within_the_drain_time_the_running_phase_finishes() -> None:
    phase = SlowPhase(pages=5, seconds=0.01)
    q = OcrQueue(phase, threads=1)
    fut = q.submit("lib", "a")
    assert phase.first_page.wait(10)
    q.close(drain=60)
    assert fut.result() == "a" and phase.committed == ["a"] and not q.stopping.is_set()


def test_without_a_drain_time_close_waits_for_the_running_phase() -> None:
    phase = SlowPhase(pages=20, seconds=0.01)
    q = OcrQueue(phase, threads=1)
    fut = q.submit("lib", "a")
    assert phase.first_page.wait(10)
    q.close()
    assert fut.result() == "a" and phase.committed == ["a"]
