"""Job records on the embedded store: a job is found by the next server on the same data dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pdfs
from fastapi.testclient import TestClient
from serving_kit import clean_settings, ingest

from ragspine.serving.app import create_app


def test_a_job_outlives_the_server_that_ran_it(tmp_path: Path) -> None:
    settings = clean_settings(data_dir=tmp_path / "data")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.post("/v1/libraries", json={"name": "lib"}).status_code == 201
        job = ingest(c, "lib", pdfs.make_pdf(["kept job record"]), metadata={"doc_id": "kept"})
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.get(f"/v1/jobs/{job['id']}")
        assert r.status_code == 200, r.text
        assert (r.json()["state"], r.json()["doc_id"], r.json()["library"]) == ("succeeded", "kept", "lib")


def _record(records: Any, job_id: str, **payload: Any) -> None:
    from ragspine.serving.jobs import JOBS_COLLECTION, KIND_JOB, _job_point
    from ragspine.store.base import PointData

    records._ensure()
    records.store.upsert(JOBS_COLLECTION, [PointData(_job_point(job_id), {"kind": KIND_JOB, "id": job_id,
                                                                          "state": "succeeded", **payload})])


def test_job_records_past_retention_are_pruned(tmp_path: Path) -> None:
    from ragspine.engine import Engine
    from ragspine.serving.jobs import JobRecords

    day = 86400.0
    now = 1_800_000_000.0
    eng = Engine(clean_settings(data_dir=tmp_path / "data"))
    try:
        records = JobRecords(eng.store, "r1", retention=7 * day)
        assert records.prune(now) == 0  # nothing recorded yet: nothing to do
        _record(records, "a" * 32, finished_at=now - 8 * day, heartbeat_at=now - 8 * day)  # ended 8 days ago
        _record(records, "b" * 32, finished_at=now - 6 * day, heartbeat_at=now - 6 * day)  # 6 days ago: kept
        _record(records, "c" * 32, state="running", finished_at=None, heartbeat_at=now - 9 * day)  # replica gone
        _record(records, "d" * 32, state="running", finished_at=None, heartbeat_at=now - 60)  # running now
        assert records.prune(now) == 2
        from ragspine.serving.jobs import JOBS_COLLECTION
        from ragspine.store.base import Where

        left = sorted(r.payload["id"][0] for r in eng.store.scroll(JOBS_COLLECTION, Where(kind="job"), fields=["id"]))
        assert left == ["b", "d"]
        assert records.prune(now) == 0  # a second pass deletes nothing more
    finally:
        eng.close()


def test_a_job_past_retention_answers_404(tmp_path: Path) -> None:
    import time as _time

    settings = clean_settings(data_dir=tmp_path / "data")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        records = c.app.state.jobs.records  # type: ignore[attr-defined]
        old = _time.time() - 8 * 86400
        _record(records, "e" * 32, library="lib", created_at=old, finished_at=old, heartbeat_at=old)
        _record(records, "f" * 32, library="lib", created_at=old, finished_at=_time.time(),
                heartbeat_at=_time.time())
        assert c.get(f"/v1/jobs/{'e' * 32}").status_code == 404  # past retention, pruned or not
        assert c.get(f"/v1/jobs/{'f' * 32}").status_code == 200


def test_the_heartbeat_thread_prunes(tmp_path: Path) -> None:
    import time as _time

    from ragspine.engine import Engine
    from ragspine.serving.jobs import JOBS_COLLECTION, JobRecords, JobRunner
    from ragspine.store.base import Where

    eng = Engine(clean_settings(data_dir=tmp_path / "data"))
    try:
        records = JobRecords(eng.store, "r1", heartbeat=0.05, retention=3600.0, prune_every=0.05)
        _record(records, "a" * 32, finished_at=_time.time() - 7200, heartbeat_at=_time.time() - 7200)
        runner = JobRunner(1, records)
        deadline = _time.monotonic() + 10
        while eng.store.count(JOBS_COLLECTION, Where(kind="job")) and _time.monotonic() < deadline:
            _time.sleep(0.05)
        runner.shutdown()
        assert eng.store.count(JOBS_COLLECTION, Where(kind="job")) == 0
    finally:
        eng.close()
