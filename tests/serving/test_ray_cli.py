"""``ragspine serve --engine ray`` as a user runs it: a real process that starts a local Ray,
serves the API, answers like ``--engine local`` on the same data, and shuts Ray down on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="needs ragspine[serve]")

import httpx  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import ray_kit  # noqa: E402
from pdfs import make_pdf  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

RAGSPINE = [sys.executable, "-m", "ragspine.cli"]


def _env(data_dir: Path) -> dict[str, str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}, "RAGSPINE_DENSE_MODEL": "none"}
    env.update({"RAGSPINE_DATA_DIR": str(data_dir), "RAGSPINE_RERANKER": "none",
                "OMP_NUM_THREADS": "1"})
    return env


def test_serve_engine_ray_answers_like_local_and_stops_cleanly(tmp_path: Path) -> None:
    data, pdf_dir = tmp_path / "data", tmp_path / "pdfs"
    pdf_dir.mkdir()
    (pdf_dir / "growth.pdf").write_bytes(make_pdf(["Revenue grew in Asia.", "Costs fell in Europe."]))
    (pdf_dir / "share.pdf").write_bytes(make_pdf(["Market share of operators in Asia rose."]))
    env = _env(data)
    subprocess.run([*RAGSPINE, "ingest", str(pdf_dir), "--library", "lib", "-q"], env=env,
                   check=True, capture_output=True, timeout=120)
    local = json.loads(subprocess.run(
        [*RAGSPINE, "search", "revenue Asia", "--library", "lib", "--json"], env=env, check=True,
        capture_output=True, text=True, timeout=120).stdout)

    port = ray_kit.free_port()
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([*RAGSPINE, "serve", "--engine", "ray", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            ray_kit.wait_until(lambda: proc.poll() is None and c.get("/readyz").status_code == 200,
                               timeout=120, what="ragspine serve --engine ray to be ready")
            body = c.post("/v1/search", json={"query": "revenue Asia", "libraries": ["lib"]}).json()
        assert [(h["doc_id"], h["page"], h["chunk_id"]) for h in body["hits"]] == [
            (h["doc_id"], h["page"], h["chunk_id"]) for h in local["hits"]]
        assert [h["scores"]["fused"] for h in body["hits"]] == pytest.approx(
            [h["scores"]["fused"] for h in local["hits"]])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:  # only our own process group: the CLI and the Ray it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.seek(0)
        out = log.read()
        log.close()
    assert "with Ray Serve" in out, out[-2000:]
    # The store was closed on the way out: the local engine opens it again at once.
    t0 = time.monotonic()
    subprocess.run([*RAGSPINE, "libraries"], env=env, check=True, capture_output=True, timeout=60)
    assert time.monotonic() - t0 < 60
