"""Job records on the embedded store: a job is found by the next server on the same data dir."""

from __future__ import annotations

from pathlib import Path

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
