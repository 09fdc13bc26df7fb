"""A SIGTERM while an upload is being indexed, on the real server process: within the drain time
the job finishes and is live after the restart; past it, the ingest stops at its next batch, the
job reads failed (server-stopping), and nothing of the document is live. An OCR second phase
still reading past the drain time stops at its next page: its first version stays live; on
Ctrl-C (SIGINT) it stops at once, whatever drain time is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pdfs
import pytest
from serving_kit import free_port, ragspine_command

pytestmark = pytest.mark.integration

#: Pages of the upload: its ingest takes several batches of 256 pages.
PAGES = 2500


def _start(data: Path, drain: float, log: Path, ocr: str = "off") -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update({"RAGSPINE_DATA_DIR": str(data), "RAGSPINE_DENSE_MODEL": "none", "RAGSPINE_OCR": ocr,
                "RAGSPINE_OCR_WORKERS": "1", "RAGSPINE_DRAIN_SECONDS": str(drain), "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen([*ragspine_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)


def _upload(url: str, doc_id: str, pdf: bytes) -> str:
    """Create library ``lib`` and upload ``pdf`` as ``doc_id`` into it; returns the job id."""
    assert httpx.post(f"{url}/v1/libraries", json={"name": "lib"}).status_code == 201
    r = httpx.post(f"{url}/v1/libraries/lib/documents", files={"file": (f"{doc_id}.pdf", pdf, "application/pdf")},
                   data={"metadata": json.dumps({"doc_id": doc_id})}, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _stop_mid_ingest(tmp_path: Path, drain: float) -> tuple[str, Path, Path]:
    """Upload, wait until its first batch is written, SIGTERM; returns the job id."""
    data, log = tmp_path / "data", tmp_path / "serve.log"
    proc, url = _start(data, drain, log)
    try:
        pdf = pdfs.make_pdf([f"Page {i}: revenue of region {i % 7} rose." for i in range(PAGES)])
        job_id = _upload(url, "big", pdf)
        while True:
            job = httpx.get(f"{url}/v1/jobs/{job_id}").json()
            assert job["state"] in ("queued", "running"), job  # SIGTERM must land mid-ingest
            if job["pages_done"] > 0:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        # uvicorn ends by re-raising the signal it handled: killed by SIGTERM, after a clean shutdown.
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM), log.read_text(errors="replace")[-3000:]
        assert "Application shutdown complete" in log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return job_id, data, log


def test_past_the_drain_time_the_ingest_stops_uncommitted(tmp_path: Path) -> None:
    job_id, data, log = _stop_mid_ingest(tmp_path, drain=0)
    assert "did not finish within 0 s; they stop uncommitted" in log.read_text(errors="replace")
    proc, url = _start(data, 90, log)
    try:
        job = httpx.get(f"{url}/v1/jobs/{job_id}").json()
        assert job["state"] == "failed" and job["error"]["type"] == "/problems/server-stopping", job
        assert 0 < job["pages_done"] < PAGES
        assert httpx.get(f"{url}/v1/libraries/lib/documents/big").status_code == 404
        hits = httpx.post(f"{url}/v1/search", json={"query": "revenue region", "libraries": ["lib"]}).json()["hits"]
        assert hits == []  # nothing half-live
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_within_the_drain_time_the_job_finishes(tmp_path: Path) -> None:
    job_id, data, log = _stop_mid_ingest(tmp_path, drain=90)
    proc, url = _start(data, 90, log)
    try:
        job = httpx.get(f"{url}/v1/jobs/{job_id}").json()
        assert job["state"] == "succeeded", job
        doc = httpx.get(f"{url}/v1/libraries/lib/documents/big").json()
        assert doc["pages_indexed"] == PAGES
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _mixed(scanned: int) -> bytes:
    """A born-digital page, then ``scanned`` scanned ones."""
    import pymupdf
    import scans

    doc = pymupdf.open(stream=pdfs.make_pdf(["Harbour report: revenue of the port rose."]), filetype="pdf")
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([scans.ScanPage([scans.Line(f"Scanned page {i} of the annex")])
                                                       for i in range(scanned)], dpi=100), filetype="pdf"))
    return doc.tobytes(deflate=True, garbage=3)


def _upload_until_ocr_reads(url: str, pdf: bytes) -> None:
    """Upload ``pdf`` as ``mixed``; return once its first phase is live and its OCR read a page."""
    job_id = _upload(url, "mixed", pdf)
    while True:
        job = httpx.get(f"{url}/v1/jobs/{job_id}").json()
        assert job["state"] in ("queued", "running", "succeeded") and job["ocr"] != "done", job
        if job["state"] == "succeeded" and job["ocr_pages_done"] >= 1:
            return
        time.sleep(0.1)


def _stop_during_ocr(tmp_path: Path, drain: float, scanned: int, sig: signal.Signals) -> tuple[Path, Path]:
    """A server with ``drain`` s of drain time, sent ``sig`` while the OCR of a document with
    ``scanned`` scanned pages runs; returns its data dir and log once it has exited."""
    data, log = tmp_path / "data", tmp_path / "serve.log"
    proc, url = _start(data, drain, log, ocr="auto")
    try:
        _upload_until_ocr_reads(url, _mixed(scanned))
        proc.send_signal(sig)
        assert proc.wait(timeout=120) in (0, -sig), log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return data, log


def test_past_the_drain_time_the_ocr_second_phase_stops_and_the_first_version_stays(tmp_path: Path) -> None:
    from ragspine.config import Settings
    from ragspine.engine import Engine

    data, log = _stop_during_ocr(tmp_path, 1, 60, signal.SIGTERM)
    text = log.read_text(errors="replace")
    assert "did not finish within the drain time; it stops at its next page" in text
    eng = Engine(Settings(data_dir=data, dense_model="none"))
    try:
        entry = eng.libraries.doc_entry("lib", "mixed")
        assert entry["ocr"] == "failed" and entry["pages_indexed"] == 1  # stopped, the first version live
        hits = eng.search({"query": "harbour revenue", "libraries": ["lib"], "mode": "bm25"}).hits
        assert [h.doc_id for h in hits] == ["mixed"]
        assert eng.indexer.deferred.owed("lib") == ["mixed"]  # the next start (or ocr --resume) finishes it
    finally:
        eng.close()


def test_ctrl_c_stops_the_ocr_second_phase_at_once_with_drain_time_left(tmp_path: Path) -> None:
    # The OCR workers are out of the terminal's reach (a session of their own): the server
    # itself must stop them. 20 scanned pages take well under the 90 s drain, which a SIGTERM
    # would wait for (the OCR would end "done").
    from ragspine.config import Settings
    from ragspine.engine import Engine

    data, _ = _stop_during_ocr(tmp_path, 90, 20, signal.SIGINT)
    eng = Engine(Settings(data_dir=data, dense_model="none"))
    try:
        entry = eng.libraries.doc_entry("lib", "mixed")
        assert entry["ocr"] == "failed" and entry["pages_indexed"] == 1, entry  # stopped, the first version live
    finally:
        eng.close()
