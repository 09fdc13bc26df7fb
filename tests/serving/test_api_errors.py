"""Bad input gets a clear 4xx problem (RFC 9457) naming the problem, never a stack trace, and
nothing already indexed is lost: after each refused request the server still answers
``/healthz`` and the same searches return exactly the same hits (docs/invariants.md, 7)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pdfs
import pymupdf
import pytest
from fastapi.testclient import TestClient
from ragspine.serving.app import create_app
from serving_kit import (
    assert_problem,
    baseline,
    clean_settings,
    compact_blank_pdf,
    raw_blank_pdf,
    search,
    upload,
    wait_job,
)

GOOD = pdfs.make_pdf(["a perfectly good page about revenue"])
#: A document of the seeded corpus; bad uploads reuse its doc_id to show it survives them.
EXISTING = "globex-2022"

Case = tuple[str, Callable[[TestClient, Path], Any], int, str | tuple[str, ...]]


def _up(data: bytes, **kw: Any) -> Callable[[TestClient, Path], Any]:
    return lambda c, _tmp: upload(c, "reports", data, wait=True, metadata={"doc_id": EXISTING}, **kw)


def _encrypted(c: TestClient, tmp: Path) -> Any:
    return upload(c, "reports", pdfs.encrypted_pdf(tmp), wait=True, metadata={"doc_id": EXISTING})


def _search_body(**kw: Any) -> Callable[[TestClient, Path], Any]:
    body = {"query": "revenue", "libraries": ["reports"], **kw}
    return lambda c, _tmp: c.post("/v1/search", json=body)


def _raw(method: str, url: str, content: bytes, ctype: str = "application/json") -> Callable[[TestClient, Path], Any]:
    return lambda c, _tmp: c.request(method, url, content=content, headers={"content-type": ctype})


UPLOAD_CASES: list[Case] = [
    ("not-a-pdf", _up(pdfs.NOT_A_PDF, filename="x.png", content_type="image/png"), 415, "not-a-pdf"),
    ("plain-text", _up(b"hello, this is text", filename="x.pdf"), 415, "not-a-pdf"),
    ("zero-bytes", _up(b""), 422, "empty-pdf"),
    ("blank-pages", _up(pdfs.blank_pdf(3)), 422, "empty-pdf"),
    ("blank-pages-raw", _up(raw_blank_pdf(2)), 422, "empty-pdf"),
    ("garbage-after-magic", _up(pdfs.GARBAGE_AFTER_MAGIC), 422, "corrupt-pdf"),
    ("truncated-30pc", _up(pdfs.truncated(pdfs.make_pdf(["one", "two", "three"]), 0.3)), 422, "corrupt-pdf"),
    ("truncated-header-only", _up(b"%PDF-1.7\n"), 422, "corrupt-pdf"),
    ("encrypted", _encrypted, 422, "encrypted-pdf"),
    ("page-20000pt-square", _up(raw_blank_pdf(1, (20000.0, 20000.0))), 413, "too-large"),
    ("page-20000pt-wide-with-text", _up(pdfs.oversize_page_pdf(20000.0)), 413, "too-large"),
    ("5000-pages", _up(raw_blank_pdf(5000)), 413, "too-large"),
    ("metadata-not-json", lambda c, _t: upload(c, "reports", GOOD, metadata="{bad", wait=True), 422,
     "invalid-request"),
    ("metadata-a-list", lambda c, _t: upload(c, "reports", GOOD, metadata="[1, 2]", wait=True), 422,
     "invalid-request"),
    ("metadata-nested-value", lambda c, _t: upload(c, "reports", GOOD, metadata={"x": {"y": 1}}, wait=True),
     422, "invalid-request"),
    ("metadata-bad-doc-id", lambda c, _t: upload(c, "reports", GOOD, metadata={"doc_id": "../etc"}, wait=True),
     422, "invalid-request"),
    ("metadata-page-zero", lambda c, _t: upload(c, "reports", GOOD, wait=True,
                                                metadata={"page_sensitivity": {"0": "RESTRICTED"}}),
     422, "invalid-request"),
    ("metadata-sensitivity-number", lambda c, _t: upload(c, "reports", GOOD, metadata={"sensitivity": 5},
                                                         wait=True), 422, "invalid-request"),
    ("upload-unknown-library", lambda c, _t: upload(c, "nolib", GOOD, wait=True), 404, "unknown-library"),
    ("upload-bad-library-name", lambda c, _t: upload(c, "No Such", GOOD, wait=True), 422, "invalid-request"),
    ("upload-without-file", lambda c, _t: c.post("/v1/libraries/reports/documents", data={"metadata": "{}"}),
     422, "invalid-request"),
    ("upload-json-instead-of-multipart", _raw("POST", "/v1/libraries/reports/documents", b'{"file": 1}'),
     422, "invalid-request"),
    ("upload-bad-wait", lambda c, _t: c.post("/v1/libraries/reports/documents?wait=maybe",
                                             files={"file": ("a.pdf", GOOD, "application/pdf")}),
     422, "invalid-request"),
]

SEARCH_CASES: list[Case] = [
    ("top_k-0", _search_body(top_k=0), 422, "invalid-request"),
    ("top_k-negative", _search_body(top_k=-3), 422, "invalid-request"),
    ("top_k-million", _search_body(top_k=10**6), 422, "invalid-request"),
    ("top_k-10e30", _search_body(top_k=10**30), 422, "invalid-request"),
    ("top_k-string", _search_body(top_k="ten"), 422, "invalid-request"),
    ("query-100kB", _search_body(query="revenue " * 12_800), 422, "invalid-request"),
    ("query-nul", _search_body(query="reve\x00nue"), 422, "invalid-request"),
    ("query-bell", _search_body(query="revenue\x07"), 422, "invalid-request"),
    ("query-ansi-escape", _search_body(query="\x1b[31mrevenue"), 422, "invalid-request"),
    ("query-del", _search_body(query="revenue\x7f"), 422, "invalid-request"),
    ("query-replacement-char", _search_body(query="revenue \ufffd"), 422, "invalid-request"),
    ("query-empty", _search_body(query=""), 422, "invalid-request"),
    ("query-blank", _search_body(query=" \t\n "), 422, "invalid-request"),
    ("query-missing", lambda c, _t: c.post("/v1/search", json={"libraries": ["reports"]}), 422,
     "invalid-request"),
    ("query-not-a-string", _search_body(query=["revenue"]), 422, "invalid-request"),
    ("invalid-utf8-body", _raw("POST", "/v1/search", b'{"query": "rev\xff\xfenue", "libraries": ["reports"]}'),
     400, "bad-request"),
    ("latin1-body", _raw("POST", "/v1/search", '{"query": "café", "libraries": ["reports"]}'.encode("latin-1")),
     400, "bad-request"),
    ("malformed-json", _raw("POST", "/v1/search", b'{"query": "revenue", '), 422, "invalid-request"),
    ("json-array-body", _raw("POST", "/v1/search", b"[1, 2]"), 422, "invalid-request"),
    ("text-plain-body", _raw("POST", "/v1/search", b"revenue", "text/plain"), 422, "invalid-request"),
    ("unknown-field", _search_body(colour="blue"), 422, "invalid-request"),
    ("mode-unknown", _search_body(mode="telepathy"), 422, "invalid-request"),
    ("mode-vector-without-model", _search_body(mode="vector"), 422, "invalid-request"),
    ("libraries-empty", _search_body(libraries=[]), 422, "invalid-request"),
    ("libraries-duplicate", _search_body(libraries=["reports", "reports"]), 422, "invalid-request"),
    ("libraries-unknown", _search_body(libraries=["reports", "nolib"]), 404, "unknown-library"),
    ("libraries-bad-name", _search_body(libraries=["../reports"]), 422, "invalid-request"),
    ("filters-not-a-list", _search_body(filters={"field": "period"}), 422, "invalid-request"),
    ("filter-unknown-field", _search_body(filters=[{"field": "colour", "op": "eq", "value": "x"}]), 422,
     "invalid-filter"),
    ("filter-unknown-op", _search_body(filters=[{"field": "period", "op": "like", "value": 2022}]), 422,
     "invalid-filter"),
    ("filter-without-value", _search_body(filters=[{"field": "period", "op": "eq"}]), 422, "invalid-filter"),
    ("filter-extra-key", _search_body(filters=[{"field": "period", "op": "eq", "value": 1, "x": 2}]), 422,
     "invalid-filter"),
    ("filter-type-mismatch", _search_body(filters=[{"field": "period", "op": "eq", "value": "2022"}]), 422,
     "invalid-filter"),
    ("filter-range-on-string", _search_body(filters=[{"field": "entity", "op": "gt", "value": 3}]), 422,
     "invalid-filter"),
    ("filter-nan", _raw("POST", "/v1/search", b'{"query": "revenue", "libraries": ["reports"], '
                        b'"filters": [{"field": "period", "op": "gt", "value": NaN}]}'), 422, "invalid-filter"),
    ("filter-object-value", _search_body(filters=[{"field": "entity", "op": "eq", "value": {"a": 1}}]), 422,
     "invalid-filter"),
    ("filter-not-an-object", _search_body(filters=["period eq 2022"]), 422, ("invalid-filter", "invalid-request")),
]

OTHER_CASES: list[Case] = [
    ("unknown-document", lambda c, _t: c.get("/v1/libraries/reports/documents/nope"), 404, "unknown-document"),
    ("delete-unknown-document", lambda c, _t: c.delete("/v1/libraries/reports/documents/nope"), 404,
     "unknown-document"),
    ("bad-doc-id", lambda c, _t: c.get("/v1/libraries/reports/documents/..%2F..%2Fetc"), 404, "not-found"),
    ("unknown-library-documents", lambda c, _t: c.get("/v1/libraries/nolib/documents"), 404, "unknown-library"),
    ("delete-unknown-library", lambda c, _t: c.delete("/v1/libraries/nolib"), 404, "unknown-library"),
    ("invalid-utf8-library-name", lambda c, _t: c.get("/v1/libraries/%FF%FE/documents"), 422, "invalid-request"),
    ("create-existing-library", lambda c, _t: c.post("/v1/libraries", json={"name": "reports"}), 409, "conflict"),
    ("create-bad-library-name", lambda c, _t: c.post("/v1/libraries", json={"name": "Reports 2023"}), 422,
     "invalid-request"),
    ("create-library-extra-field", lambda c, _t: c.post("/v1/libraries", json={"name": "x", "y": 1}), 422,
     "invalid-request"),
    ("create-library-invalid-utf8", _raw("POST", "/v1/libraries", b'{"name": "\xff"}'), 400, "bad-request"),
    ("unknown-job", lambda c, _t: c.get("/v1/jobs/0123456789abcdef"), 404, "not-found"),
    ("thumbnail-page-not-int", lambda c, _t: c.get(f"/v1/libraries/reports/documents/{EXISTING}/pages/x/thumbnail"),
     422, "invalid-request"),
    ("thumbnail-page-huge", lambda c, _t: c.get(
        f"/v1/libraries/reports/documents/{EXISTING}/pages/{10**25}/thumbnail"), 404, "not-found"),
    ("thumbnail-page-negative", lambda c, _t: c.get(
        f"/v1/libraries/reports/documents/{EXISTING}/pages/-1/thumbnail"), 404, "not-found"),
    ("unknown-route", lambda c, _t: c.get("/v2/everything"), 404, "not-found"),
    ("wrong-method", lambda c, _t: c.put("/v1/search", json={}), 405, "method-not-allowed"),
]


def _ids(cases: list[Case]) -> list[str]:
    return [c[0] for c in cases]


def _check_refused(client: TestClient, tmp_path: Path, case: Case) -> dict[str, Any]:
    _name, call, status, type_ = case
    before = baseline(client)
    docs_before = client.get("/v1/libraries/reports/documents").json()
    body = assert_problem(call(client, tmp_path), status, type_)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert baseline(client) == before
    assert client.get("/v1/libraries/reports/documents").json() == docs_before
    return body


@pytest.mark.parametrize("case", UPLOAD_CASES, ids=_ids(UPLOAD_CASES))
def test_bad_upload_is_refused_and_nothing_is_lost(seeded: TestClient, tmp_path: Path, case: Case) -> None:
    _check_refused(seeded, tmp_path, case)


@pytest.mark.parametrize("case", SEARCH_CASES, ids=_ids(SEARCH_CASES))
def test_bad_search_is_refused_and_nothing_changes(seeded: TestClient, tmp_path: Path, case: Case) -> None:
    _check_refused(seeded, tmp_path, case)


@pytest.mark.parametrize("case", OTHER_CASES, ids=_ids(OTHER_CASES))
def test_bad_request_is_refused_and_nothing_changes(seeded: TestClient, tmp_path: Path, case: Case) -> None:
    _check_refused(seeded, tmp_path, case)


def test_problem_details_name_the_problem(seeded: TestClient, tmp_path: Path) -> None:
    """The detail says what was received and what is allowed."""
    d = assert_problem(upload(seeded, "reports", b"", wait=True), 422, "empty-pdf")["detail"]
    assert "empty" in d and "0 bytes" in d
    d = assert_problem(upload(seeded, "reports", pdfs.GARBAGE_AFTER_MAGIC, wait=True), 422)["detail"]
    assert "corrupt" in d
    d = assert_problem(upload(seeded, "reports", pdfs.encrypted_pdf(tmp_path), wait=True), 422)["detail"]
    assert "encrypted" in d and "password" in d
    d = assert_problem(upload(seeded, "reports", raw_blank_pdf(5000), wait=True), 413)["detail"]
    assert "5000 pages" in d and "3000" in d
    d = assert_problem(upload(seeded, "reports", raw_blank_pdf(1, (20000.0, 20000.0)), wait=True), 413)["detail"]
    assert "20000" in d and "14400" in d
    d = assert_problem(search(seeded, "x", ["reports"], top_k=0), 422)["detail"]
    assert "top_k" in d and "1000" in d and "0" in d
    d = assert_problem(search(seeded, "x" * 100_000, ["reports"]), 422)["detail"]
    assert "100000" in d and "4096" in d
    assert len(d) < 300  # the query is not echoed back
    d = assert_problem(search(seeded, "x", ["reports"], mode="nope"), 422)["detail"]
    assert "mode" in d and "bm25" in d
    d = assert_problem(search(seeded, "x", ["nolib"]), 404)["detail"]
    assert "nolib" in d
    d = assert_problem(search(seeded, "x", ["reports"], filters=[{"field": "colour", "op": "eq", "value": 1}]),
                       422)["detail"]
    assert "colour" in d and "period" in d  # names the unknown field and the known ones
    d = assert_problem(seeded.get("/v1/libraries/reports/documents/nope"), 404)["detail"]
    assert "nope" in d and "reports" in d


@pytest.mark.parametrize(
    ("name", "data", "type_"),
    [
        ("corrupt", pdfs.GARBAGE_AFTER_MAGIC, "corrupt-pdf"),
        ("blank", pdfs.blank_pdf(2), "empty-pdf"),
        ("too-many-pages", raw_blank_pdf(4000), "too-large"),
    ],
)
def test_failed_ingest_without_wait_is_a_failed_job(
    seeded: TestClient, name: str, data: bytes, type_: str
) -> None:
    """Without ``wait``, a PDF that passes the sniff is accepted (202) and its job fails with
    the same problem the ``wait=true`` answer carries."""
    before = baseline(seeded)
    r = upload(seeded, "reports", data, filename=f"{name}.pdf", metadata={"doc_id": EXISTING})
    assert r.status_code == 202, r.text
    job = wait_job(seeded, r.json()["id"])
    assert job["state"] == "failed" and job["result"] is None
    err = job["error"]
    assert err["type"].rsplit("/", 1)[-1] == type_
    assert err["status"] in (413, 422) and err["detail"] and err["title"]
    waited = upload(seeded, "reports", data, filename=f"{name}.pdf", wait=True, metadata={"doc_id": EXISTING})
    body = assert_problem(waited, err["status"], type_)
    assert body["detail"] == err["detail"]
    assert baseline(seeded) == before


def test_not_a_pdf_and_empty_are_refused_before_a_job_exists(seeded: TestClient) -> None:
    """Refused at upload time, with or without ``wait``: no job is created."""
    for data, status, type_ in ((pdfs.NOT_A_PDF, 415, "not-a-pdf"), (b"", 422, "empty-pdf")):
        r = upload(seeded, "reports", data)
        assert_problem(r, status, type_)
        assert "location" not in r.headers


# -- limits that need their own settings --------------------------------------------------------

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app with a 64 KiB upload limit and at most 20 pages per PDF, holding one document."""
    settings = clean_settings(data_dir=tmp_path_factory.mktemp("limited"), max_upload_bytes=LIMIT, max_pages=20)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.post("/v1/libraries", json={"name": "reports"}).status_code == 201
        r = upload(c, "reports", pdfs.make_pdf(["small revenue report", "page two margin"]),
                   filename="small.pdf", wait=True)
        assert r.status_code == 201, r.text
        yield c


def _limited_search(c: TestClient) -> dict[str, Any]:
    r = search(c, "revenue margin", ["reports"])
    assert r.status_code == 200
    return {k: v for k, v in r.json().items() if k != "timings_ms"}


def _padded_pdf(size: int) -> bytes:
    """A well-formed PDF of exactly ``size`` bytes: the padding is its (uncompressed) subject."""
    def build(pad: int) -> bytes:
        doc = pymupdf.open(stream=pdfs.make_pdf(["padded document"]), filetype="pdf")
        doc.set_metadata({"subject": "x" * pad})
        data = doc.tobytes()
        doc.close()
        return data

    pad = 0
    for _ in range(5):  # the xref offsets grow a digit now and then: converge
        data = build(pad)
        if len(data) == size:
            return data
        pad += size - len(data)
    raise AssertionError(f"could not build a PDF of exactly {size} bytes")


def _multipart_stream(data: bytes, chunk: int = 16 * 1024) -> Iterator[bytes]:
    yield (b'--bnd\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n'
           b"Content-Type: application/pdf\r\n\r\n")
    for i in range(0, len(data), chunk):
        yield data[i : i + chunk]
    yield b"\r\n--bnd--\r\n"


def _check_limited(c: TestClient, resp: Any, status: int, type_: str) -> dict[str, Any]:
    before = _limited_search(c)
    body = assert_problem(resp, status, type_)
    assert c.get("/healthz").status_code == 200
    assert _limited_search(c) == before
    assert [d["doc_id"] for d in c.get("/v1/libraries/reports/documents").json()["documents"]] == ["small"]
    return body


def test_oversize_announced_by_content_length_is_refused_early(limited: TestClient) -> None:
    r = upload(limited, "reports", _padded_pdf(LIMIT * 4), metadata={"doc_id": "small"})
    body = _check_limited(limited, r, 413, "too-large")
    assert str(LIMIT) in body["detail"] and "stopped reading" not in body["detail"]


def test_oversize_just_over_the_limit_is_refused_while_reading(limited: TestClient) -> None:
    r = upload(limited, "reports", _padded_pdf(LIMIT + 10), metadata={"doc_id": "small"}, wait=True)
    body = _check_limited(limited, r, 413, "too-large")
    assert "stopped reading" in body["detail"]


def test_oversize_without_content_length_is_refused(limited: TestClient) -> None:
    """A chunked upload announces no size: the server counts while reading."""
    r = limited.post(
        "/v1/libraries/reports/documents",
        content=_multipart_stream(_padded_pdf(LIMIT * 3)),
        headers={"content-type": "multipart/form-data; boundary=bnd"},
    )
    assert "content-length" not in {k.lower() for k in r.request.headers}
    body = _check_limited(limited, r, 413, "too-large")
    assert str(LIMIT) in body["detail"]


def test_upload_at_the_limit_is_accepted(limited: TestClient) -> None:
    data = _padded_pdf(LIMIT)
    assert len(data) == LIMIT
    r = upload(limited, "reports", data, filename="exact.pdf", wait=True)
    assert r.status_code == 201, r.text
    assert limited.delete("/v1/libraries/reports/documents/exact").status_code == 204


def test_chunked_upload_within_the_limit_is_accepted(limited: TestClient) -> None:
    r = limited.post(
        "/v1/libraries/reports/documents?wait=true",
        content=_multipart_stream(pdfs.make_pdf(["streamed upload walrus"])),
        headers={"content-type": "multipart/form-data; boundary=bnd"},
    )
    assert r.status_code == 201, r.text
    assert [h["doc_id"] for h in search(limited, "walrus", ["reports"]).json()["hits"]] == ["big"]
    assert limited.delete("/v1/libraries/reports/documents/big").status_code == 204


def test_page_count_bomb_is_refused_by_max_pages(limited: TestClient) -> None:
    for n in (21, 2000):
        data = compact_blank_pdf(n)
        assert len(data) < LIMIT
        r = upload(limited, "reports", data, wait=True, metadata={"doc_id": "small"})
        body = _check_limited(limited, r, 413, "too-large")
        assert f"{n} pages" in body["detail"] and "limit is 20" in body["detail"]


def test_no_upload_is_left_behind_after_refusals(limited: TestClient) -> None:
    engine = limited.app.state.engine  # type: ignore[attr-defined]
    spool = Path(engine.settings.data_dir) / "uploads" / engine.replica  # this replica's own folder
    deadline = time.monotonic() + 10
    while list(spool.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(spool.iterdir()) == []


@pytest.mark.slow
def test_real_5000_page_pdf_made_by_pymupdf_is_refused(seeded: TestClient) -> None:
    """A genuine 5,000-blank-page PDF from PyMuPDF's ``new_page`` loop (about 5 s to build
    here) against the default 3,000-page limit; the refusal itself must be quick."""
    t0 = time.perf_counter()
    doc = pymupdf.open()
    for _ in range(5000):
        doc.new_page()
    data = doc.tobytes()
    doc.close()
    built = time.perf_counter() - t0
    before = baseline(seeded)
    t1 = time.perf_counter()
    body = assert_problem(upload(seeded, "reports", data, wait=True, metadata={"doc_id": EXISTING}), 413,
                          "too-large")
    refused = time.perf_counter() - t1
    assert "5000 pages" in body["detail"]
    assert refused < 5.0, f"refusing a 5000-page PDF took {refused:.1f}s (building it took {built:.1f}s)"
    assert baseline(seeded) == before
