"""Ingest jobs any replica can answer: two apps (replicas) over one Qdrant. A job submitted to
one is polled on the other; a job whose replica died reads ``failed`` with the reason; a job
id that names no job, or a library the key may not see, is a 404."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient

from cluster.replica_kit import LIB, close, replica, report
from ragspine.serving.app import create_app
from ragspine.serving.jobs import JOBS_COLLECTION, JobRecords, JobRunner
from serving.serving_kit import upload, wait_job

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]


@pytest.fixture
def two_apps(data_dir: Path) -> Iterator[tuple[TestClient, TestClient, Any, Any]]:
    client = QdrantClient(":memory:")
    a, b = replica(client, data_dir), replica(client, data_dir)
    a.create_library(LIB)
    with TestClient(create_app(a.settings, engine=a)) as ca, TestClient(create_app(b.settings, engine=b)) as cb:
        yield ca, cb, a, b
    close(a, b, client=client)


def test_a_job_submitted_to_one_replica_is_polled_on_the_other(two_apps: tuple[TestClient, TestClient, Any, Any]) -> None:
    ca, cb, a, b = two_apps
    r = upload(ca, LIB, report(4, "alpha"), metadata={"doc_id": "q3"})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert LIB not in job_id and len(job_id) == 32  # opaque: names no library
    job = wait_job(cb, job_id)  # every poll answered by replica B
    assert job["state"] == "succeeded" and job["doc_id"] == "q3" and job["pages_total"] == 4
    assert job["result"]["pages_indexed"] == 4 and job["library"] == LIB
    assert cb.get(f"/v1/libraries/{LIB}/documents/q3").status_code == 200
    assert JOBS_COLLECTION not in [x["name"] for x in cb.get("/v1/libraries").json()["libraries"]]
    # and a failed one, with its problem, as the replica that ran it would say
    bad = upload(ca, LIB, b"%PDF-1.7\nnot really a pdf", metadata={"doc_id": "broken"})
    failed = wait_job(cb, bad.json()["id"])
    assert failed["state"] == "failed" and failed["error"]["status"] == 422, failed


def test_unknown_job_ids_are_404_on_every_replica(two_apps: tuple[TestClient, TestClient, Any, Any]) -> None:
    ca, cb, _, _ = two_apps
    for job_id in ("nope", "0" * 32, "f" * 31, "z" * 32, "0" * 33, "..%2Fx"):
        for c in (ca, cb):
            r = c.get(f"/v1/jobs/{job_id}")
            assert r.status_code == 404, (job_id, r.text)


def test_a_job_of_a_replica_that_died_reads_failed_with_the_reason(data_dir: Path) -> None:
    client = QdrantClient(":memory:")
    a, b = replica(client, data_dir), replica(client, data_dir)
    a.create_library(LIB)
    try:
        gone = threading.Event()
        runner = JobRunner(1, JobRecords(a.store, a.replica, heartbeat=0.1, stale_after=1.0))
        job = runner.submit(LIB, "x.pdf", lambda j: (gone.wait(10), {})[1], cleanup=lambda: None)
        reader = JobRecords(b.store, b.replica, stale_after=1.0)
        time.sleep(1.3)  # longer than stale_after: only the heartbeats keep the job alive
        assert reader.read(job.id)["state"] == "running"  # A is alive: its heartbeat is fresh
        runner._stop.set()  # A dies: no more heartbeats
        deadline = time.monotonic() + 15
        while reader.read(job.id)["state"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        state = reader.read(job.id)
        assert state["state"] == "failed" and state["error"]["type"] == "/problems/replica-lost"
        assert a.replica in state["error"]["detail"] and "upload the document again" in state["error"]["detail"]
        gone.set()
        runner.shutdown()
        # a replica started later reads the finished job
        later = JobRunner(1, JobRecords(b.store, "pod-new"))
        try:
            assert later.lookup(job.id)["state"] == "succeeded"
        finally:
            later.shutdown()
    finally:
        close(a, b, client=client)


def test_a_late_heartbeat_never_turns_a_finished_job_back(data_dir: Path) -> None:
    """A heartbeat that comes after the job finished does not write: the record keeps the
    terminal state (else it would read "running", then "replica-lost")."""
    client = QdrantClient(":memory:")
    a = replica(client, data_dir)
    a.create_library(LIB)
    try:
        runner = JobRunner(1, JobRecords(a.store, a.replica, heartbeat=60))
        job = runner.submit(LIB, "x.pdf", lambda j: {"doc_id": "x"}, cleanup=lambda: None)
        assert job.done.wait(10) and job.state == "succeeded"
        job.state = "running"  # what a heartbeat built before the end would carry
        runner._record(job, beat=True)
        assert JobRecords(a.store, "other").read(job.id)["state"] == "succeeded"
        runner.shutdown()
    finally:
        close(a, client=client)
