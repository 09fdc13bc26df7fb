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
    # Every page needs OCR: the job's first phase indexes nothing and answers at once; the OCR
    # that follows indexes the document (wait=true waited for it).
    assert (job["result"]["status"], job["result"]["ocr_pending_pages"]) == ("ocr_pending", [1, 2])
    assert (job["ocr"], job["ocr_result"]["status"], job["ocr_result"]["pages_ocr"]) == ("done", "indexed", 2)
    assert (job["ocr_pages_done"], job["ocr_pages_total"]) == (2, 2)
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
    assert "scan: every page needs OCR; all 2 follow" in out
    assert "OCR done: scan v1: 2 pages, 2 read by OCR" in out


def _mixed_pdf() -> bytes:
    """Page 1 born-digital, page 2 a scan."""
    import pymupdf

    doc = pymupdf.open()
    doc.new_page().insert_text((72, 100), "Harbour traffic grew strongly at every terminal.", fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])])))
    return doc.tobytes()


def test_a_job_succeeds_when_its_text_layer_is_live_and_reports_the_ocr_that_follows(make_client: Any) -> None:
    import time

    c = make_client()
    c.post("/v1/libraries", json={"name": "lib"})
    r = upload(c, "lib", _mixed_pdf(), metadata={"doc_id": "mixed"})
    assert r.status_code == 202
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + 120
    while True:
        job = c.get(f"/v1/jobs/{r.json()['id']}").json()
        seen.append((job["state"], job["ocr"]))
        if job["state"] == "succeeded" and job["ocr"] != "pending":
            break
        assert job["state"] != "failed", job
        assert time.monotonic() < deadline, seen
        time.sleep(0.02)
    # The job succeeded on the first phase (page 1 live, page 2 owed), then its OCR ended.
    assert job["result"]["version"] == 1 and job["result"]["pages_indexed"] == 1
    assert job["result"]["ocr"] == "pending" and job["result"]["ocr_pending_pages"] == [2]
    assert job["ocr"] == "done" and job["ocr_result"]["version"] == 2 and job["ocr_result"]["pages_indexed"] == 2
    assert (job["ocr_pages_done"], job["ocr_pages_total"]) == (1, 1)
    assert job["ocr_error"] is None
    doc = c.get("/v1/libraries/lib/documents/mixed").json()
    assert (doc["ocr"], doc["version"], doc["page_numbers"]) == ("done", 2, [1, 2])
    hits = c.post("/v1/search", json={"query": "container volumes", "libraries": ["lib"], "mode": "bm25"}).json()
    assert hits["hits"][0]["page"] == 2
    metrics = c.get("/metrics").text
    assert "ragspine_ocr_backlog_documents 0.0" in metrics
    assert 'ragspine_ocr_documents_total{outcome="done"} 1.0' in metrics


def test_wait_true_answers_when_the_ocr_is_done_too(make_client: Any) -> None:
    c = make_client()
    c.post("/v1/libraries", json={"name": "lib"})
    r = upload(c, "lib", _mixed_pdf(), metadata={"doc_id": "mixed"}, wait=True)
    assert r.status_code == 201
    job = r.json()
    assert (job["state"], job["ocr"], job["ocr_result"]["version"]) == ("succeeded", "done", 2)


def test_the_cli_indexes_the_text_layer_first_and_reports_the_ocr_that_follows(tmp_path: Path, capsys: Any) -> None:
    pdf = tmp_path / "mixed.pdf"
    pdf.write_bytes(_mixed_pdf())
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "ingest", str(pdf), "--library", "lib", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "indexed mixed v1: 1 pages, " in out and "OCR of pages [2] follows" in out
    assert "OCR done: mixed v2: 2 pages, 1 read by OCR" in out
    assert main(["--data-dir", data, "ocr", "--resume"]) == 0
    assert "no OCR owed" in capsys.readouterr().out


def test_ragspine_ocr_resume_finishes_what_a_stopped_process_owed(tmp_path: Path, capsys: Any) -> None:
    from ragspine.config import Settings
    from ragspine.engine import Engine

    data = tmp_path / "data"
    eng = Engine(Settings(data_dir=data))
    eng.create_library("lib")
    eng.ingest("lib", _mixed_pdf(), {"doc_id": "mixed"}, defer_ocr=True)
    eng.close()  # stopped before its second phase
    assert main(["--data-dir", str(data), "libraries"]) == 0
    assert "lib\t1 documents\t1 pages\tOCR failed: 1 documents" in capsys.readouterr().out
    assert main(["--data-dir", str(data), "ocr", "--resume", "--library", "lib", "--quiet"]) == 0
    assert "lib/mixed: OCR done: mixed v2: 2 pages, 1 read by OCR" in capsys.readouterr().out
    assert main(["--data-dir", str(data), "libraries"]) == 0
    assert capsys.readouterr().out.strip() == "lib\t1 documents\t2 pages"
    import pytest

    with pytest.raises(SystemExit) as info:  # --resume is what it does: one line says so
        main(["--data-dir", str(data), "ocr"])
    assert info.value.code == 2 and "required: --resume" in capsys.readouterr().err


def test_ctrl_c_stops_the_ocr_that_follows_at_its_next_page_and_resume_finishes_it(
        tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    import ragspine.cli.ingest as cli_ingest

    def interrupted(owed: Any, bar: Any) -> Any:  # Ctrl-C while the command waits for the OCR
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_ingest, "_wait_for_ocr", interrupted)
    pdf = tmp_path / "mixed.pdf"
    pdf.write_bytes(_mixed_pdf())
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "ingest", str(pdf), "--library", "lib", "--quiet"]) == 130
    capsys.readouterr()
    # The command did not wait for the OCR to end: the text-layer version stays, the OCR is owed.
    assert main(["--data-dir", data, "libraries"]) == 0
    assert "lib\t1 documents\t1 pages\tOCR failed: 1 documents" in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["--data-dir", data, "ocr", "--resume", "--library", "lib", "--quiet"]) == 0
    assert "lib/mixed: OCR done: mixed v2: 2 pages, 1 read by OCR" in capsys.readouterr().out
