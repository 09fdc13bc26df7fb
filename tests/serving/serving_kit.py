"""Helpers for the REST API tests: problem checks, uploads, job polling, a seeded corpus, and a
real ``ragspine serve`` process.

Plain functions (no fixtures) so that the bench script could reuse them too; the fixtures that
wrap them live in ``conftest.py`` next to this file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ragspine.config import Settings

PROBLEM = "application/problem+json"
#: Where ../shared/data lies relative to the repository root (tests/serving/ -> parents[2]).
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = (REPO_ROOT / ".." / "shared" / "data").resolve()
MMLB = SHARED_DATA / "mmlongbench_dev"

#: Text that must never reach a client: Python tracebacks and internal frames.
_TRACE_MARKERS = (b"Traceback (most recent call last)", b'File "/', b"site-packages", b".py\", line")


def clean_settings(**kw: Any) -> Settings:
    """Settings built with every ``RAGSPINE_*`` variable out of the way (module-scoped fixtures
    run before the per-test environment cleanup in ``tests/conftest.py``)."""
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith("RAGSPINE_"):
                mp.delenv(k, raising=False)
        kw.setdefault("dense_model", "none")  # as tests/conftest.py pins it: no dense channel unless asked
        return Settings(**kw)


# -- responses ---------------------------------------------------------------------------------


def assert_no_trace(body: bytes) -> None:
    for marker in _TRACE_MARKERS:
        assert marker not in body, f"response leaks internals ({marker!r}): {body[:400]!r}"


def assert_problem(resp: Any, status: int, type_: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """``resp`` is an RFC 9457 problem with ``status`` and a stable ``type``; returns the body."""
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text[:500]}"
    ctype = resp.headers.get("content-type", "")
    assert ctype.startswith(PROBLEM), f"content-type {ctype!r}, body {resp.text[:300]}"
    assert_no_trace(resp.content)
    body = resp.json()
    assert set(body) >= {"type", "title", "status", "detail"}, body
    assert body["status"] == status
    assert isinstance(body["type"], str) and body["type"].startswith("/problems/"), body
    assert isinstance(body["title"], str) and body["title"], body
    assert isinstance(body["detail"], str) and body["detail"].strip(), body
    if type_ is not None:
        allowed = (type_,) if isinstance(type_, str) else type_
        assert body["type"] in {f"/problems/{t}" for t in allowed}, body
    return body


def upload(
    client: Any,
    library: str,
    data: bytes,
    *,
    filename: str = "doc.pdf",
    metadata: Mapping[str, Any] | str | None = None,
    wait: bool = False,
    headers: Mapping[str, str] | None = None,
    content_type: str = "application/pdf",
) -> Any:
    """POST a PDF as multipart (field ``file``, field ``metadata`` as a JSON string)."""
    form: dict[str, str] = {}
    if metadata is not None:
        form["metadata"] = metadata if isinstance(metadata, str) else json.dumps(metadata, ensure_ascii=False)
    return client.post(
        f"/v1/libraries/{library}/documents",
        params={"wait": "true"} if wait else None,
        files={"file": (filename, data, content_type)},
        data=form or None,
        headers=dict(headers or {}),
    )


def wait_job(client: Any, job_id: str, *, timeout: float = 60.0, headers: Mapping[str, str] | None = None
             ) -> dict[str, Any]:
    """Poll ``GET /v1/jobs/{id}`` until the job finished; returns its last state."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/v1/jobs/{job_id}", headers=dict(headers or {}))
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['state']} after {timeout}s"
        time.sleep(0.02)


def ingest(client: Any, library: str, data: bytes, *, headers: Mapping[str, str] | None = None,
           **kw: Any) -> dict[str, Any]:
    """Upload with ``wait=true`` and require success; returns the job."""
    r = upload(client, library, data, wait=True, headers=headers, **kw)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "succeeded", job
    return job


def search(client: Any, query: str, libraries: list[str], headers: Mapping[str, str] | None = None,
           **kw: Any) -> Any:
    return client.post("/v1/search", json={"query": query, "libraries": libraries, **kw},
                       headers=dict(headers or {}))


def comparable(answer: Mapping[str, Any]) -> dict[str, Any]:
    """A search answer without what may differ between two identical searches (timings)."""
    return {k: v for k, v in answer.items() if k != "timings_ms"}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0.0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(4))
    return 0.0


# -- a small seeded corpus ---------------------------------------------------------------------


@dataclass
class SeedDoc:
    library: str
    doc_id: str
    pages: list[Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    #: A word found only in this document, on page ``unique_page``.
    unique: str = ""
    unique_page: int = 1


def seed_docs() -> list[SeedDoc]:
    """Four documents in two libraries: English and Chinese, with filterable metadata."""
    return [
        SeedDoc("reports", "acme-q3-2023", [
            "Acme quarterly revenue grew 12 percent, driven by cloud services. Operating margin "
            "improved to 18 percent. Keyword alphaunique appears only here.",
            "Headcount rose in the northern region; hiring plans for 2024 are unchanged.",
        ], {"doc_id": "acme-q3-2023", "title": "Acme Q3 2023 revenue report", "entity": "acme",
            "period": 2023, "topic": "finance", "language": "en", "region": ["north", "south"]},
            "alphaunique", 1),
        SeedDoc("reports", "energy-zh-2022", [
            "阿克米能源 2022年 营业收入 同比增长 百分之八，发电量 创新高。",
            "Grid capacity and energy revenue outlook. Keyword betaunique appears only here.",
        ], {"doc_id": "energy-zh-2022", "title": "阿克米能源 2022 统计公报", "entity": "acme-energy",
            "period": 2022, "topic": "energy", "language": "zh"},
            "betaunique", 2),
        SeedDoc("reports", "globex-2022", [
            "Globex revenue declined in 2022 as margins narrowed in retail. Keyword gammaunique.",
        ], {"doc_id": "globex-2022", "title": "Globex 2022 annual report", "entity": "globex",
            "period": 2022, "topic": "finance", "language": "en"},
            "gammaunique", 1),
        SeedDoc("archive", "archive-2019", [
            "Archived revenue tables from 2019: cloud revenue and margin by quarter. deltaunique.",
        ], {"doc_id": "archive-2019", "title": "Archive 2019", "entity": "acme", "period": 2019,
            "topic": "finance", "language": "en"},
            "deltaunique", 1),
    ]


def seed(client: Any, headers: Mapping[str, str] | None = None) -> list[SeedDoc]:
    """Create the libraries and ingest :func:`seed_docs`; returns them."""
    import pdfs

    docs = seed_docs()
    for lib in sorted({d.library for d in docs}):
        r = client.post("/v1/libraries", json={"name": lib}, headers=dict(headers or {}))
        assert r.status_code == 201, r.text
    for d in docs:
        ingest(client, d.library, pdfs.make_pdf(d.pages), filename=f"{d.doc_id}.pdf",
               metadata=d.metadata, headers=headers)
    return docs


#: Searches whose answers must not change when a bad request is refused.
BASELINE_SEARCHES: tuple[dict[str, Any], ...] = (
    {"query": "revenue cloud margin", "libraries": ["reports"], "top_k": 10},
    {"query": "营业收入 增长", "libraries": ["reports"], "top_k": 10},
    {"query": "revenue", "libraries": ["reports", "archive"], "top_k": 10,
     "filters": [{"field": "period", "op": "gte", "value": 2019}]},
    {"query": "revenue", "libraries": ["reports"], "mode": "bm25",
     "filters": [{"field": "entity", "op": "eq", "value": "acme"}]},
)


def baseline(client: Any, headers: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    out = []
    for body in BASELINE_SEARCHES:
        r = client.post("/v1/search", json=body, headers=dict(headers or {}))
        assert r.status_code == 200, r.text
        out.append(comparable(r.json()))
    return out


# -- PDFs the shared builders do not make --------------------------------------------------------


def raw_blank_pdf(n_pages: int, size: tuple[float, float] = (595.0, 842.0)) -> bytes:
    """A valid PDF with ``n_pages`` blank pages, written by hand (milliseconds for thousands of
    pages, where PyMuPDF's ``new_page`` loop takes about 1 ms per page)."""
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + i} 0 R" for i in range(n_pages)).encode()
    objs.append(b"<< /Type /Pages /Kids [" + kids + b"] /Count " + str(n_pages).encode() + b" >>")
    page = f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]:g} {size[1]:g}] >>".encode()
    objs.extend(page for _ in range(n_pages))
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def compact_blank_pdf(n_pages: int) -> bytes:
    """:func:`raw_blank_pdf` rewritten by PyMuPDF with compressed object streams: 2,000 pages
    in about 20 kB, so a page-count bomb passes any byte limit."""
    import pymupdf

    doc = pymupdf.open(stream=raw_blank_pdf(n_pages), filetype="pdf")
    try:
        return doc.tobytes(garbage=1, deflate=True, use_objstms=1)
    finally:
        doc.close()


# -- a real server process -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ragspine_command() -> list[str]:
    """The installed ``ragspine`` script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("ragspine")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ragspine.cli"]


@contextlib.contextmanager
def serve_process(data_dir: Path, *, env: Mapping[str, str] | None = None, timeout: float = 60.0,
                  log_path: Path | None = None) -> Iterator[str]:
    """Run ``ragspine serve`` on a free 127.0.0.1 port; yields its base URL once ``/healthz``
    answers. The process is terminated (then killed) on exit, whatever happened."""
    import httpx

    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    full_env.update({"RAGSPINE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", "RAGSPINE_DENSE_MODEL": "none"})
    full_env.update(env or {})
    log_path = log_path or Path(data_dir).parent / f"serve-{port}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [*ragspine_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=full_env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ragspine serve exited with {proc.returncode}:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            try:
                if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ragspine serve did not answer /healthz within {timeout}s:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        log.close()
