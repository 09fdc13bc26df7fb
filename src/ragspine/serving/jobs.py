"""Background ingest jobs: a bounded thread pool and their observable state."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from ragspine.errors import RagspineError

logger = logging.getLogger(__name__)

State = Literal["queued", "running", "succeeded", "failed"]
#: Finished jobs kept for ``GET /v1/jobs/{id}``.
MAX_FINISHED_JOBS = 10_000


@dataclass
class Job:
    id: str
    library: str
    filename: str | None
    state: State = "queued"
    pages_done: int = 0
    pages_total: int = 0
    #: Pages OCR has read / will read before the policy runs (0 / 0 when none need it).
    ocr_pages_done: int = 0
    ocr_pages_total: int = 0
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_json(self) -> dict[str, Any]:
        # The worker writes the outcome, then finished_at, then the state: read in the opposite
        # order, so that a terminal state is never seen without its result and finish time.
        state = self.state
        finished_at = self.finished_at
        r = self.result or {}
        return {
            "id": self.id,
            "state": state,
            "library": self.library,
            "filename": self.filename,
            "doc_id": r.get("doc_id"),
            "status": r.get("status"),
            "pages_done": self.pages_done,
            "pages_total": self.pages_total,
            "ocr_pages_done": self.ocr_pages_done,
            "ocr_pages_total": self.ocr_pages_total,
            "pages_dropped": r.get("pages_dropped", []),
            "result": self.result,
            "error": self.error,
            "created_at": self.created_at,
            "finished_at": finished_at,
        }


class JobRunner:
    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragspine-ingest")
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, library: str, filename: str | None, work: Callable[[Job], dict[str, Any]],
               cleanup: Callable[[], None]) -> Job:
        job = Job(id=uuid.uuid4().hex, library=library, filename=filename)
        with self._lock:
            self._jobs[job.id] = job
            self._trim()

        def run() -> None:
            job.state = "running"
            outcome: State = "failed"
            try:
                job.result = work(job)
                outcome = "succeeded"
            except RagspineError as exc:
                job.error = {"type": f"/problems/{exc.type}", "title": exc.title, "status": exc.status, "detail": exc.detail}
            except Exception:
                logger.exception("ingest job %s failed unexpectedly", job.id)
                job.error = {"type": "/problems/internal-error", "title": "Internal error", "status": 500,
                             "detail": "the ingest failed on an unexpected error; see the server log"}
            finally:
                try:
                    cleanup()
                finally:
                    # The terminal state last: a poller that sees it sees the outcome complete.
                    job.finished_at = time.time()
                    job.state = outcome
                    job.done.set()

        fut: Future[None] = self._pool.submit(run)
        del fut
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def _trim(self) -> None:
        finished = [j for j in self._jobs.values() if j.finished_at is not None]
        if len(finished) > MAX_FINISHED_JOBS:
            for j in sorted(finished, key=lambda j: j.finished_at or 0)[: len(finished) - MAX_FINISHED_JOBS]:
                del self._jobs[j.id]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
