"""The OCR claims through the server (serving.app's lifespan, which the Ray ingress runs too): a
replica that starts resumes what a stopped replica owed, and an upload whose OCR another replica
is reading says so instead of claiming it was done. Same kit as test_ocr_claims."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cluster.ocr_claims_kit import (
    DOC,
    WAIT,
    WORD,
    ScriptedOcr,
    Serialised,
    close_replicas,
    in_flight,
    ocr,
    ocr_replica,
    phase_one,
    report,
    shared,
    stored_claim,
    until,
)
from cluster.replica_kit import LIB
from ragspine.serving.app import create_app
from serving.serving_kit import upload

__all__ = ["ocr", "shared"]  # fixtures

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]


def test_a_starting_replica_resumes_what_a_stopped_replica_owed(data_dir: Path, ocr: ScriptedOcr,
                                                               shared: Serialised) -> None:
    a = ocr_replica(shared, data_dir)
    a.create_library(LIB)
    phase_one(a)  # A stops before its phase 2 ran: pending, never claimed
    close_replicas(a)
    b = ocr_replica(shared, data_dir)  # RAGSPINE_OCR_SWEEP_SECONDS at its default: a sweep at start
    try:
        with TestClient(create_app(b.settings, engine=b)) as cb:
            doc = until(lambda: (d := cb.get(f"/v1/libraries/{LIB}/documents/{DOC}").json())["ocr"] == "done"
                        and d)
            assert (doc["version"], doc["page_numbers"]) == (2, [1, 2])
            hits = cb.post("/v1/search", json={"query": WORD, "libraries": [LIB], "mode": "bm25"}).json()["hits"]
            assert [(h["doc_id"], h["page"], h["text_source"]) for h in hits] == [(DOC, 2, "ocr")]
        assert b.ocr_sweep is not None and b.ocr_sweep._stop.is_set()  # the lifespan's stop ended it
        assert (stored_claim(b)["holder"], stored_claim(b)["attempts"]) == (b.replica, 1)
    finally:
        close_replicas(b)


def test_an_upload_whose_ocr_another_replica_reads_settles_as_pending(data_dir: Path, ocr: ScriptedOcr,
                                                                      shared: Serialised) -> None:
    a = ocr_replica(shared, data_dir)
    b = ocr_replica(shared, data_dir, ocr_sweep_seconds=0)  # no sweep: only the upload's own phase 2
    a.create_library(LIB)
    try:
        running = in_flight(a, ocr)
        with TestClient(create_app(b.settings, engine=b)) as cb:
            # The same bytes again, on B: phase 1 is unchanged and its OCR is still owed, but A holds
            # the claim: B does not read it too, and its job does not say "done" either.
            r = upload(cb, LIB, report(), metadata={"doc_id": DOC}, wait=True)
            assert r.status_code == 201, r.text
            job = r.json()
            assert (job["state"], job["ocr"], job["ocr_result"]) == ("succeeded", "pending", None)
            assert ocr.calls == 1
            ocr.release.set()
            res = running.result(timeout=WAIT)
            assert res is not None and res.ocr == "done"
            assert cb.get(f"/v1/libraries/{LIB}/documents/{DOC}").json()["ocr"] == "done"
    finally:
        ocr.release.set()
        close_replicas(a, b)
