"""Scans through the REST API and the CLI: job progress counts the pages OCR reads, hits say
where their text came from, a document with nothing to index is a 422 that says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import scans
from scans import Line, ScanPage
from serving_kit import assert_problem, upload

from ragspine.cli import main

SCAN = [ScanPage([Line("Container volumes doubled", y=240)]), ScanPage([Line("Dredging finished early", y=240)])]


def test_a_scan_through_the_api(make_client: Any) -> None:
    c = make_client()
    assert c.post("/v1/libraries", json={"name": "lib"}).status_code == 201
    r = upload(c, "lib", scans.scan_pdf(SCAN), metadata={"doc_id": "scan"}, wait=True)
    assert r.status_code == 201, r.text
    job = c.get(f"/v1/jobs/{r.json()['id']}").json()
    assert (job["ocr_pages_done"], job["ocr_pages_total"]) == (2, 2)
    assert (job["pages_done"], job["pages_total"]) == (2, 2)
    assert job["result"]["pages_ocr"] == 2
    hits = c.post("/v1/search", json={"query": "dredging", "libraries": ["lib"], "mode": "bm25"}).json()["hits"]
    assert hits[0]["page"] == 2 and hits[0]["text_source"] == "ocr"


def test_nothing_to_index_is_a_422_naming_the_reason(make_client: Any) -> None:
    c = make_client(ocr="off")
    c.post("/v1/libraries", json={"name": "lib"})
    r = upload(c, "lib", scans.scan_pdf(SCAN), metadata={"doc_id": "scan"}, wait=True)
    body = assert_problem(r, 422, "no-text")
    assert "RAGSPINE_OCR" in body["detail"]
    assert c.get("/v1/libraries/lib/documents").json()["documents"] == []


def test_the_cli_says_how_many_pages_ocr_read(tmp_path: Path, capsys: Any) -> None:
    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(scans.scan_pdf(SCAN))
    assert main(["--data-dir", str(tmp_path / "data"), "ingest", str(pdf), "--library", "lib", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "indexed scan v1: 2 pages, 2 read by OCR" in out
