"""A real ``ragspine serve`` process on 127.0.0.1, driven over HTTP with httpx: ingest a
generated PDF and (when ../shared/data is present) a real report, search with and without
filters, concurrent clients, restart on the same data dir, API keys from the environment.

The server is always terminated in the fixture's teardown.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pdfs
import pytest
from serving_kit import MMLB, assert_problem, metric, ragspine_command, serve_process

pytestmark = pytest.mark.integration

needs_mmlb = pytest.mark.skipif(
    not (MMLB / "documents").is_dir(),
    reason=f"the shared dataset is not here: {MMLB} (../shared/data relative to the repository root)",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("served") / "data"
    with serve_process(data, timeout=60) as base:
        yield base, data


@pytest.fixture
def http(server: tuple[str, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server[0], timeout=120) as c:
        yield c


def _upload(c: httpx.Client, lib: str, data: bytes, name: str, meta: dict[str, Any] | None = None,
            wait: bool = True) -> httpx.Response:
    return c.post(f"/v1/libraries/{lib}/documents", params={"wait": "true"} if wait else None,
                  files={"file": (name, data, "application/pdf")},
                  data={"metadata": json.dumps(meta)} if meta else None)


def _ensure_library(c: httpx.Client, name: str) -> None:
    r = c.post("/v1/libraries", json={"name": name})
    assert r.status_code in (201, 409), r.text


def test_generated_pdf_through_a_real_server(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    _ensure_library(http, "gen")
    data = pdfs.make_pdf(["Acme revenue grew 12 percent in 2023 on cloud demand.",
                          pdfs.Page(["Restricted acquisition target list."], header="RESTRICTED"),
                          "Operating margin by segment."], title="Acme 2023")
    r = _upload(http, "gen", data, "acme-2023.pdf", {"entity": "acme", "period": 2023}, wait=False)
    assert r.status_code == 202
    job_url = r.headers["location"]
    for _ in range(600):
        job = http.get(job_url).json()
        if job["state"] in ("succeeded", "failed"):
            break
        threading.Event().wait(0.05)
    assert job["state"] == "succeeded" and job["pages_dropped"] == [2], job
    r = _upload(http, "gen", pdfs.make_pdf(["Globex revenue fell in 2022."]), "globex.pdf",
                {"entity": "globex", "period": 2022})
    assert r.status_code == 201 and r.json()["state"] == "succeeded"

    hits = http.post("/v1/search", json={"query": "revenue", "libraries": ["gen"]}).json()["hits"]
    assert {h["doc_id"] for h in hits} == {"acme-2023", "globex"}
    hits = http.post("/v1/search", json={"query": "revenue", "libraries": ["gen"],
                                         "filters": [{"field": "period", "op": "eq", "value": 2023}]}).json()["hits"]
    assert [(h["doc_id"], h["page"]) for h in hits] == [("acme-2023", 1)]
    t = http.get(hits[0]["thumbnail_url"])
    assert t.status_code == 200 and t.headers["content-type"] == "image/png" and t.content[:4] == b"\x89PNG"
    assert http.post("/v1/search", json={"query": "acquisition target", "libraries": ["gen"]}).json()["hits"] == []
    assert_problem(http.get("/v1/libraries/gen/documents/acme-2023/pages/2/thumbnail"), 404)
    assert_problem(http.post("/v1/search", json={"query": "x", "libraries": ["gen"], "top_k": 0}), 422,
                   "invalid-request")
    assert_problem(http.post("/v1/search", content=b'{"query": "\xff"}',
                             headers={"content-type": "application/json"}), 400)
    assert_problem(_upload(http, "gen", b"not a pdf at all", "x.pdf"), 415, "not-a-pdf")
    text = http.get("/metrics").text
    assert metric(text, "ragspine_requests_total", route="/v1/search", method="POST", status="200") >= 3
    assert metric(text, "ragspine_pages_dropped_total") >= 1
    assert http.get("/openapi.json").json()["info"]["title"] == "ragspine"


@needs_mmlb
def test_real_report_through_a_real_server(http: httpx.Client) -> None:
    name = "f86d073b0d735ac873a65d906ba82758.pdf"  # a 20-page financial report, 270 kB
    path = MMLB / "documents" / name
    if not path.is_file():
        pytest.skip(f"{path} is not in the shared dataset")
    queries = [json.loads(line) for line in (MMLB / "queries.jsonl").read_text().splitlines() if line.strip()]
    mine = [q for q in queries if q["metadata"]["doc_id"] == name and q["metadata"]["evidence_pages"]]
    assert mine, "the dataset has no question on this report"
    _ensure_library(http, "mmlb")
    r = _upload(http, "mmlb", path.read_bytes(), name, {"doc_type": "Financial report", "split": "dev"})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "succeeded" and job["result"]["pages_total"] == 20
    doc_id = job["doc_id"]
    r = _upload(http, "mmlb", pdfs.make_pdf(["An unrelated generated note about penguins."]), "note.pdf",
                {"doc_type": "Note", "split": "dev"})
    assert r.status_code == 201

    found = 0
    for q in mine:
        body = {"query": q["text"], "libraries": ["mmlb"], "top_k": 20}
        r = http.post("/v1/search", json=body)
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert all(1 <= h["page"] <= 20 for h in hits if h["doc_id"] == doc_id)
        found += any(h["page"] in q["metadata"]["evidence_pages"] for h in hits)
        # Filtered to the report: only its pages; filtered to the note: only the note.
        f = http.post("/v1/search", json={**body, "filters": [{"field": "doc_type", "op": "eq",
                                                                  "value": "Financial report"}]}).json()["hits"]
        assert {h["doc_id"] for h in f} <= {doc_id}
        f = http.post("/v1/search", json={**body, "filters": [{"field": "doc_type", "op": "eq",
                                                                  "value": "Note"}]}).json()["hits"]
        assert {h["doc_id"] for h in f} <= {"note"}
    assert found >= 1, "BM25 found no evidence page of this report in the top 20 for any of its questions"
    listed = {d["doc_id"]: d for d in http.get("/v1/libraries/mmlb/documents").json()["documents"]}
    assert listed[doc_id]["pages_total"] == 20 and listed[doc_id]["metadata"]["doc_type"] == "Financial report"


def test_concurrent_clients_on_a_real_server(http: httpx.Client, server: tuple[str, Path]) -> None:
    base = server[0]
    _ensure_library(http, "conc")
    statuses: Counter[int] = Counter()
    errors: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        try:
            with httpx.Client(base_url=base, timeout=120) as c:
                for i in range(3):
                    r = _upload(c, "conc", pdfs.make_pdf([f"concurrent doc word{k}x{i} revenue"]),
                                f"c-{k}-{i}.pdf", wait=bool(i % 2))
                    with lock:
                        statuses[r.status_code] += 1
                    for q in ("revenue", f"word{k}x{i}", "concurrent"):
                        r = c.post("/v1/search", json={"query": q, "libraries": ["conc"]})
                        with lock:
                            statuses[r.status_code] += 1
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=180)
    assert errors == [] and not any(th.is_alive() for th in threads)
    assert set(statuses) <= {200, 201, 202}, statuses
    deadline = 120
    for _ in range(deadline * 10):
        docs = http.get("/v1/libraries/conc/documents").json()["documents"]
        if len(docs) == 12:
            break
        threading.Event().wait(0.1)
    assert len(docs) == 12
    for k in range(4):
        for i in range(3):
            hits = http.post("/v1/search", json={"query": f"word{k}x{i}", "libraries": ["conc"]}).json()["hits"]
            assert [h["doc_id"] for h in hits] == [f"c-{k}-{i}"]


def test_cli_on_a_data_dir_in_use_fails_with_one_line(server: tuple[str, Path], http: httpx.Client) -> None:
    """The embedded store is single-process: the CLI on a served data dir is refused clearly."""
    _ensure_library(http, "gen")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}, "RAGSPINE_DENSE_MODEL": "none",
           "RAGSPINE_DATA_DIR": str(server[1])}
    r = subprocess.run([*ragspine_command(), "search", "revenue", "--library", "gen"],
                       capture_output=True, text=True, timeout=120, env=env)
    if r.returncode == 0:
        return  # a store that allows it is fine too
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("ragspine: error:") and "Traceback" not in r.stderr


def test_restart_keeps_the_data_and_api_keys_from_the_environment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_process(data) as base, httpx.Client(base_url=base, timeout=120) as c:
        _ensure_library(c, "keep")
        r = _upload(c, "keep", pdfs.make_pdf(["persistent narwhal revenue"]), "narwhal.pdf", {"period": 2021})
        assert r.status_code == 201
    env = {"RAGSPINE_API_KEYS": "key-aaaaaaaa=keep"}
    with serve_process(data, env=env) as base, httpx.Client(base_url=base, timeout=120) as c:
        r = c.post("/v1/search", json={"query": "narwhal", "libraries": ["keep"]})
        assert_problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        h = {"Authorization": "Bearer key-aaaaaaaa"}
        hits = c.post("/v1/search", json={"query": "narwhal", "libraries": ["keep"],
                                          "filters": [{"field": "period", "op": "eq", "value": 2021}]},
                      headers=h).json()["hits"]
        assert [h_["doc_id"] for h_ in hits] == ["narwhal"]
        assert c.get("/v1/libraries", headers={"X-API-Key": "key-aaaaaaaa"}).json()["libraries"][0]["name"] == "keep"
