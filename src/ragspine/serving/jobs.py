"""Background ingest jobs: a bounded thread pool and their observable state.

A job's state is also kept where every replica reads it (:class:`JobRecords`: a ``kind=job``
point in the store's ``_jobs`` collection; the id stays opaque, naming no library), so ``GET /v1/jobs/{id}``
answers on any replica, and after a restart. The replica that runs a job rewrites its record
on every state change, at most once a second with progress, and every ``heartbeat`` seconds
while it is queued or running; a record whose heartbeat is older than ``stale_after`` belongs
to a replica that died, and reads as ``failed`` with that reason.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

from ragspine.catalog import point_id
from ragspine.errors import LibraryNotFoundError, RagspineError, ServerStoppingError, StoreError
from ragspine.store.base import CollectionSpec, PointData, Store, Where

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
    #: The document's OCR: ``none``; ``pending`` after a first phase that left pages to read
    #: (the job has succeeded: those pages follow); ``done`` or ``failed`` when the second
    #: phase ended, with its result (the new version) or error.
    ocr: str = "none"
    ocr_result: dict[str, Any] | None = None
    ocr_error: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    #: Set when nothing more will happen to the document: the job ended with no OCR owed, or
    #: its second phase ended.
    settled: threading.Event = field(default_factory=threading.Event, repr=False)

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
            "ocr": self.ocr,
            "ocr_result": self.ocr_result,
            "ocr_error": self.ocr_error,
            "pages_dropped": r.get("pages_dropped", []),
            "result": self.result,
            "error": self.error,
            "created_at": self.created_at,
            "finished_at": finished_at,
        }


KIND_JOB = "job"
#: Seconds between heartbeats of a replica's unfinished jobs, and after which an unfinished
#: job's record without one belongs to a replica that is gone.
JOB_STALE_SECONDS = 30.0
JOB_HEARTBEAT_SECONDS = JOB_STALE_SECONDS / 6
#: How long a job's record is kept after it ended (RAGSPINE_JOB_RETENTION_DAYS), and how often
#: a replica prunes older ones.
JOB_RETENTION_SECONDS = 7 * 86400.0
PRUNE_EVERY_SECONDS = 3600.0


#: The collection of job records: a name no library may take (see check_library_name).
JOBS_COLLECTION = "_jobs"


def _job_point(job_id: str) -> str | None:
    """The record's point id of a job id (32 hex digits); None for anything else."""
    if len(job_id) != 32 or any(c not in "0123456789abcdef" for c in job_id):
        return None
    return point_id("job", job_id)


class JobRecords:
    """Job state in the store, readable by every replica (see the module docstring)."""

    def __init__(self, store: Store, replica: str, *, heartbeat: float = JOB_HEARTBEAT_SECONDS,
                 stale_after: float = JOB_STALE_SECONDS, retention: float = JOB_RETENTION_SECONDS,
                 prune_every: float = PRUNE_EVERY_SECONDS) -> None:
        self.store = store
        self.replica = replica
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.retention = retention
        self.prune_every = prune_every
        self._ready = False

    def _ensure(self) -> None:
        if self._ready:
            return
        if not self.store.has_collection(JOBS_COLLECTION):
            try:
                self.store.create_collection(JOBS_COLLECTION, CollectionSpec(sparse_idf=()))
            except StoreError:
                if not self.store.has_collection(JOBS_COLLECTION):  # not another replica's create
                    raise
        self._ready = True

    def write(self, job: "Job") -> None:
        payload = {**job.to_json(), "kind": KIND_JOB, "replica": self.replica, "heartbeat_at": time.time()}
        point = _job_point(job.id)
        assert point is not None
        try:
            self._ensure()
            self.store.upsert(JOBS_COLLECTION, [PointData(point, payload)])
        except Exception:  # the ingest goes on; its record catches up at the next write
            self._ready = False
            logger.exception("could not record the state of job %s", job.id)

    @staticmethod
    def ended_at(payload: dict[str, Any]) -> float:
        """When a record's job ended: its finish time, or, for one never finished (its replica
        went away), its last heartbeat."""
        return float(payload.get("finished_at") or payload.get("heartbeat_at") or 0.0)

    def prune(self, now: float | None = None) -> int:
        """Delete the records of jobs that ended more than ``retention`` seconds ago; returns
        how many. Every replica may run it: deleting a record twice is harmless."""
        cutoff = (time.time() if now is None else now) - self.retention
        try:
            recs = self.store.scroll(JOBS_COLLECTION, Where(kind=KIND_JOB), fields=["finished_at", "heartbeat_at"])
        except LibraryNotFoundError:  # no job was ever recorded
            return 0
        old = [r.id for r in recs if self.ended_at(r.payload) < cutoff]
        if old:
            self.store.delete_ids(JOBS_COLLECTION, old)
            logger.info("pruned %d job records older than %.1f days", len(old), self.retention / 86400)
        return len(old)

    def read(self, job_id: str) -> dict[str, Any] | None:
        point = _job_point(job_id)
        if point is None:
            return None
        try:
            recs = self.store.retrieve(JOBS_COLLECTION, [point])
        except LibraryNotFoundError:  # no job was ever recorded
            return None
        if not recs:
            return None
        p = dict(recs[0].payload)
        if self.ended_at(p) < time.time() - self.retention:
            return None  # past retention, not yet pruned: as gone as a pruned one
        replica, beat = p.get("replica"), float(p.pop("heartbeat_at", 0.0))
        p.pop("kind", None)
        age = time.time() - beat
        was = p.get("state")
        if was in ("queued", "running") and age > self.stale_after:
            p["state"] = "failed"
            p["finished_at"] = beat
            p["error"] = {"type": "/problems/replica-lost", "title": "The replica running the job stopped",
                          "status": 503,
                          "detail": f"replica {replica!r} stopped while the job was {was}: "
                                    f"last heard of {age:.0f} s ago. Nothing of this upload was committed; "
                                    "upload the document again"}
        return p


class JobRunner:
    def __init__(self, workers: int, records: JobRecords | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragspine-ingest")
        #: Set when the drain time of a shutdown has passed: running ingests stop at their next
        #: batch (see :meth:`check_stopping`), queued ones never start.
        self.stopping = threading.Event()
        self._futures: set[Future[None]] = set()
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.records = records
        self._stop = threading.Event()
        self._written: dict[str, float] = {}
        self._write_lock = threading.Lock()
        self._beat: threading.Thread | None = None
        if records is not None:
            self._beat = threading.Thread(target=self._heartbeat, name="ragspine-jobs", daemon=True)
            self._beat.start()

    def _record(self, job: Job, *, throttle: bool = False, beat: bool = False) -> None:
        if self.records is None:
            return
        # One writer at a time: a heartbeat built before the terminal state must not land after
        # it (the job would read "running", then "replica-lost").
        with self._write_lock:
            if beat and job.finished_at is not None:
                return
            now = time.monotonic()
            if throttle and now - self._written.get(job.id, 0.0) < 1.0:
                return
            self._written[job.id] = now
            self.records.write(job)

    def progress(self, job: Job) -> None:
        """The job's progress changed: its record follows, at most once a second."""
        self._record(job, throttle=True)

    def changed(self, job: Job) -> None:
        """A finished job's second phase ended (its OCR): its record follows now."""
        self._record(job)
        if job.ocr != "pending":
            job.settled.set()

    def _heartbeat(self) -> None:
        assert self.records is not None
        next_prune = time.monotonic()  # at start, then every prune_every seconds
        while True:
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.records.prune_every
                self._prune()
            if self._stop.wait(self.records.heartbeat):
                return
            with self._lock:
                live = [j for j in self._jobs.values() if j.finished_at is None]
            for j in live:
                self._record(j, beat=True)

    def _prune(self) -> None:
        assert self.records is not None
        try:
            self.records.prune()
        except Exception:  # the store is down: the next round tries again
            logger.warning("could not prune old job records", exc_info=True)
        with self._lock:
            self._trim()

    def submit(self, library: str, filename: str | None, work: Callable[[Job], dict[str, Any]],
               cleanup: Callable[[], None]) -> Job:
        job = Job(id=uuid.uuid4().hex, library=library, filename=filename)
        with self._lock:
            self._jobs[job.id] = job
            self._trim()
        self._record(job)

        def run() -> None:
            job.state = "running"
            self._record(job)
            outcome: State = "failed"
            try:
                self.check_stopping()
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
                    self._record(job)
                    self._written.pop(job.id, None)
                    job.done.set()
                    if job.ocr not in ("pending",):
                        job.settled.set()

        fut: Future[None] = self._pool.submit(run)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(lambda f: self._futures.discard(f))
        return job

    def check_stopping(self) -> None:
        """Raise :class:`ServerStoppingError` once the drain time has passed (an ingest's
        progress callback calls it between batches: the version is aborted, never half-live)."""
        if self.stopping.is_set():
            raise ServerStoppingError(
                "the server stopped before this upload was indexed; nothing of it was committed: "
                "upload it again")

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def lookup(self, job_id: str) -> dict[str, Any] | None:
        """A job's state as ``GET /v1/jobs/{id}`` shows it: this replica's own job from memory,
        else any replica's from the store."""
        job = self._jobs.get(job_id)
        if job is not None:
            return {**job.to_json(), "replica": self.records.replica if self.records is not None else None}
        return self.records.read(job_id) if self.records is not None else None

    def _trim(self) -> None:
        if self.records is not None:  # past retention: gone from memory as from the store
            cutoff = time.time() - self.records.retention
            for j in [j for j in self._jobs.values() if j.finished_at is not None and j.finished_at < cutoff]:
                del self._jobs[j.id]
        finished = [j for j in self._jobs.values() if j.finished_at is not None]
        if len(finished) > MAX_FINISHED_JOBS:
            for j in sorted(finished, key=lambda j: j.finished_at or 0)[: len(finished) - MAX_FINISHED_JOBS]:
                del self._jobs[j.id]

    def shutdown(self, drain: float | None = None) -> None:
        """Finish the jobs: all of them (``drain=None``), or those done within ``drain``
        seconds; then the rest stop at their next batch and fail cleanly (``server-stopping``)."""
        if drain is not None:
            with self._lock:
                futures = set(self._futures)
            _, late = wait(futures, timeout=drain)
            if late:
                logger.warning("stopping: %d ingest jobs did not finish within %.0f s; they stop uncommitted",
                               len(late), drain)
                self.stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
