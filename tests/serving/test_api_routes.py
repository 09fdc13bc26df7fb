"""Every route of the REST API, in process (TestClient): what a client sees on success."""

from __future__ import annotations

import json
import time

import pdfs
import pymupdf
from fastapi.testclient import TestClient
from serving_kit import (
    SeedDoc,
    assert_problem,
    comparable,
    ingest,
    metric,
    search,
    upload,
    wait_job,
)

HIT_KEYS = {"library_id", "doc_id", "title", "page", "bbox", "chunk_id", "text", "scores", "thumbnail_url"}
SCORE_KEYS = {"bm25", "dense", "visual", "fused", "rerank"}


# -- health, docs ----------------------------------------------------------------------------


def test_healthz_readyz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready" and body["checks"]["store"] == "ok"


def test_docs_and_openapi(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for p, methods in {
        "/v1/libraries": {"get", "post"},
        "/v1/libraries/{lib}": {"delete"},
        "/v1/libraries/{lib}/documents": {"get", "post"},
        "/v1/libraries/{lib}/documents/{doc_id}": {"get", "delete"},
        "/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/thumbnail": {"get"},
        "/v1/jobs/{job_id}": {"get"},
        "/v1/search": {"post"},
        "/healthz": {"get"},
        "/readyz": {"get"},
    }.items():
        assert p in paths, p
        assert methods <= set(paths[p]), (p, paths[p].keys())
    # The upload is documented as multipart with a file field and a metadata field.
    body = paths["/v1/libraries/{lib}/documents"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in body
    assert spec["info"]["title"] == "ragspine"


# -- libraries -------------------------------------------------------------------------------


def test_library_lifecycle(client: TestClient) -> None:
    assert client.get("/v1/libraries").json() == {"libraries": []}
    r = client.post("/v1/libraries", json={"name": "liba"})
    assert r.status_code == 201
    body = r.json()
    assert body["name"] == "liba" and isinstance(body["created_at"], float) and body["encoders"]
    assert client.post("/v1/libraries", json={"name": "libb"}).status_code == 201
    listed = client.get("/v1/libraries").json()["libraries"]
    assert listed == [{"name": "liba", "documents": 0, "pages": 0},
                      {"name": "libb", "documents": 0, "pages": 0}]
    r = client.delete("/v1/libraries/liba")
    assert r.status_code == 204 and r.content == b""
    assert [x["name"] for x in client.get("/v1/libraries").json()["libraries"]] == ["libb"]
    assert_problem(client.delete("/v1/libraries/liba"), 404, "unknown-library")


def test_creating_an_existing_library_is_a_conflict_that_keeps_its_documents(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    ingest(client, "liba", pdfs.make_pdf(["revenue grows"]), filename="a.pdf")
    body = assert_problem(client.post("/v1/libraries", json={"name": "liba"}), 409, "conflict")
    assert "liba" in body["detail"] and "/" not in body["detail"].replace("'", "")  # no file paths
    assert client.get("/v1/libraries").json()["libraries"] == [{"name": "liba", "documents": 1, "pages": 1}]
    assert search(client, "revenue", ["liba"]).json()["hits"]


def test_library_with_documents_listed_with_counts(seeded: TestClient, seed_list: list[SeedDoc]) -> None:
    listed = {x["name"]: x for x in seeded.get("/v1/libraries").json()["libraries"]}
    for lib in ("reports", "archive"):
        docs = [d for d in seed_list if d.library == lib]
        assert listed[lib]["documents"] == len(docs)
        assert listed[lib]["pages"] == sum(len(d.pages) for d in docs)


# -- upload, jobs ----------------------------------------------------------------------------


def test_upload_202_then_poll_job_until_succeeded(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    data = pdfs.make_pdf(["first page about revenue", "second page about margins", "third page about costs"])
    r = upload(client, "liba", data, filename="quarterly.pdf",
               metadata={"title": "Quarterly", "entity": "acme", "period": 2023})
    assert r.status_code == 202
    job = r.json()
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] in ("queued", "running", "succeeded")
    assert job["library"] == "liba" and job["filename"] == "quarterly.pdf"
    deadline = time.monotonic() + 30
    while True:
        j = client.get(f"/v1/jobs/{job['id']}").json()
        assert 0 <= j["pages_done"] <= j["pages_total"], j
        if j["state"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert j["state"] == "succeeded", j
    assert j["pages_done"] == j["pages_total"] == 3
    assert j["pages_dropped"] == [] and j["error"] is None
    assert j["doc_id"] == "quarterly" and j["status"] == "indexed"
    assert j["result"]["pages_indexed"] == 3 and j["result"]["version"] == 1
    assert j["finished_at"] >= j["created_at"]


def test_upload_wait_true_answers_201_with_the_finished_job(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    r = upload(client, "liba", pdfs.make_pdf(["alpha page text", "beta page text"]), filename="x.pdf", wait=True)
    assert r.status_code == 201
    job = r.json()
    assert job["state"] == "succeeded" and job["pages_done"] == job["pages_total"] == 2
    # The finished job stays available.
    assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded"


def test_same_upload_twice_is_unchanged_and_new_content_is_a_new_version(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    meta = {"doc_id": "report"}
    data = pdfs.make_pdf(["version one text about apples"])
    assert ingest(client, "liba", data, metadata=meta)["status"] == "indexed"
    assert ingest(client, "liba", data, metadata=meta)["status"] == "unchanged"
    j = ingest(client, "liba", pdfs.make_pdf(["version two text about pears"]), metadata=meta)
    assert j["status"] == "indexed" and j["result"]["version"] == 2
    assert search(client, "apples", ["liba"]).json()["hits"] == []
    hits = search(client, "pears", ["liba"]).json()["hits"]
    assert [h["doc_id"] for h in hits] == ["report"]
    docs = client.get("/v1/libraries/liba/documents").json()["documents"]
    assert len(docs) == 1 and docs[0]["version"] == 2


def test_pages_dropped_by_policy_are_reported_by_the_job(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    data = pdfs.make_pdf([
        "an open page",
        pdfs.Page(["a marked page"], header="RESTRICTED"),
        "another open page",
        "a page restricted by override",
    ])
    r = upload(client, "liba", data, metadata={"page_sensitivity": {"4": "Restricted"}})
    job = wait_job(client, r.json()["id"])
    assert job["state"] == "succeeded"
    assert job["pages_dropped"] == [2, 4]
    # Progress counts the pages being indexed; the result counts the PDF's physical pages.
    assert job["pages_done"] == job["pages_total"] == job["result"]["pages_indexed"] == 2
    assert job["result"]["pages_total"] == 4
    doc = client.get(f"/v1/libraries/liba/documents/{job['doc_id']}").json()
    assert doc["pages_total"] == 4 and doc["pages_dropped"] == [2, 4] and doc["page_numbers"] == [1, 3]


def test_restricted_document_is_dropped_and_the_job_says_so(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    j = ingest(client, "liba", pdfs.make_pdf(["secret merger plans"]),
               metadata={"sensitivity": " restricted "})
    assert j["status"] == "dropped_by_policy" and j["doc_id"] is None
    assert client.get("/v1/libraries/liba/documents").json() == {"documents": []}


# -- documents -------------------------------------------------------------------------------


def test_list_get_delete_documents(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    ingest(client, "liba", pdfs.make_pdf(["keep this page zebra"]), filename="keep.pdf",
           metadata={"title": "Keep", "entity": "acme", "period": 2023})
    ingest(client, "liba", pdfs.make_pdf(["delete this page giraffe", "p2"]), filename="gone.pdf")
    docs = client.get("/v1/libraries/liba/documents").json()["documents"]
    assert sorted(d["doc_id"] for d in docs) == ["gone", "keep"]
    keep = client.get("/v1/libraries/liba/documents/keep").json()
    assert keep["title"] == "Keep" and keep["filename"] == "keep.pdf"
    assert keep["metadata"]["entity"] == "acme" and keep["metadata"]["period"] == 2023
    assert keep["pages_total"] == keep["pages_indexed"] == 1 and keep["page_numbers"] == [1]
    assert keep["version"] == 1 and keep["chunks"] >= 1
    gone = client.get("/v1/libraries/liba/documents/gone").json()
    assert gone["title"] == "gone" and gone["page_numbers"] == [1, 2]

    r = client.delete("/v1/libraries/liba/documents/gone")
    assert r.status_code == 204 and r.content == b""
    assert_problem(client.get("/v1/libraries/liba/documents/gone"), 404, "unknown-document")
    assert_problem(client.delete("/v1/libraries/liba/documents/gone"), 404, "unknown-document")
    assert_problem(client.get("/v1/libraries/liba/documents/gone/pages/1/thumbnail"), 404)
    assert search(client, "giraffe", ["liba"]).json()["hits"] == []
    assert [h["doc_id"] for h in search(client, "zebra", ["liba"]).json()["hits"]] == ["keep"]
    assert [d["doc_id"] for d in client.get("/v1/libraries/liba/documents").json()["documents"]] == ["keep"]


def test_delete_library_removes_its_documents_from_search(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    ingest(client, "liba", pdfs.make_pdf(["ocelot"]), filename="a.pdf")
    assert client.delete("/v1/libraries/liba").status_code == 204
    assert_problem(search(client, "ocelot", ["liba"]), 404, "unknown-library")
    # A new library of the same name starts empty.
    client.post("/v1/libraries", json={"name": "liba"})
    assert search(client, "ocelot", ["liba"]).json()["hits"] == []


# -- thumbnails ------------------------------------------------------------------------------


def test_thumbnail_png_and_404_for_dropped_and_missing_pages(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    data = pdfs.make_pdf(["page one", pdfs.Page(["page two"], header="RESTRICTED"), "page three"])
    ingest(client, "liba", data, filename="t.pdf")
    for n in (1, 3):
        r = client.get(f"/v1/libraries/liba/documents/t/pages/{n}/thumbnail")
        assert r.status_code == 200
        assert r.headers["content-type"] == "image/png"
        assert r.content.startswith(b"\x89PNG\r\n\x1a\n")
        pix = pymupdf.Pixmap(r.content)
        assert pix.width > 0 and pix.height > pix.width  # an A4 page, portrait
    dropped = assert_problem(client.get("/v1/libraries/liba/documents/t/pages/2/thumbnail"), 404)
    never = assert_problem(client.get("/v1/libraries/liba/documents/t/pages/4/thumbnail"), 404)
    zero = assert_problem(client.get("/v1/libraries/liba/documents/t/pages/0/thumbnail"), 404)
    # A page dropped by policy is exactly as absent as one that never existed.
    assert dropped["type"] == never["type"] == zero["type"]
    assert dropped["title"] == never["title"]
    assert dropped["detail"].replace("2", "N") == never["detail"].replace("4", "N")
    assert set(dropped) == set(never)
    assert_problem(client.get("/v1/libraries/liba/documents/nope/pages/1/thumbnail"), 404, "unknown-document")
    assert_problem(client.get("/v1/libraries/nolib/documents/t/pages/1/thumbnail"), 404, "unknown-library")


# -- search ----------------------------------------------------------------------------------


def test_search_hit_shape_and_citations(seeded: TestClient, seed_list: list[SeedDoc]) -> None:
    r = search(seeded, "revenue cloud", ["reports"], top_k=5)
    assert r.status_code == 200
    body = r.json()
    assert set(body) >= {"hits", "mode", "degraded", "degraded_reasons", "filters_relaxed"}
    assert body["degraded"] is False and body["degraded_reasons"] == []
    hits = body["hits"]
    assert 1 <= len(hits) <= 5
    fused = [h["scores"]["fused"] for h in hits]
    assert fused == sorted(fused, reverse=True)
    for h in hits:
        assert HIT_KEYS <= set(h), h.keys()
        assert SCORE_KEYS <= set(h["scores"])
        assert h["library_id"] == "reports"
        assert isinstance(h["page"], int) and h["page"] >= 1
        x0, y0, x1, y1 = h["bbox"]
        assert 0 <= x0 <= x1 <= 595 and 0 <= y0 <= y1 <= 842  # PDF points on an A4 page
        assert h["chunk_id"] and h["text"]
        assert h["thumbnail_url"] == (f"/v1/libraries/reports/documents/{h['doc_id']}"
                                      f"/pages/{h['page']}/thumbnail")
        # The thumbnail URL of a hit works.
        t = seeded.get(h["thumbnail_url"])
        assert t.status_code == 200 and t.content.startswith(b"\x89PNG")
        # The hit's text is from the page it cites (whitespace aside).
        doc = next(d for d in seed_list if d.doc_id == h["doc_id"])
        page = doc.pages[h["page"] - 1]
        assert pdfs.squash(h["text"]) in pdfs.squash(page if isinstance(page, str) else " ".join(page.paragraphs))
    top = hits[0]
    assert top["doc_id"] == "acme-q3-2023" and top["page"] == 1
    assert top["title"] == "Acme Q3 2023 revenue report"
    assert top["scores"]["bm25"] > 0 and top["scores"]["fused"] > 0
    assert top["scores"]["dense"] is None and top["scores"]["visual"] is None and top["scores"]["rerank"] is None


def test_search_each_document_by_its_unique_word(seeded: TestClient, seed_list: list[SeedDoc]) -> None:
    for d in seed_list:
        hits = search(seeded, d.unique, ["reports", "archive"]).json()["hits"]
        assert [(h["library_id"], h["doc_id"], h["page"]) for h in hits] == [(d.library, d.doc_id, d.unique_page)]


def test_search_chinese_query(seeded: TestClient) -> None:
    r = search(seeded, "营业收入增长", ["reports"])
    assert r.status_code == 200
    hits = r.json()["hits"]
    assert hits and hits[0]["doc_id"] == "energy-zh-2022" and hits[0]["page"] == 1
    assert "营业收入" in hits[0]["text"]
    # Non-ASCII round-trips in titles.
    assert hits[0]["title"] == "阿克米能源 2022 统计公报"


def test_search_several_libraries(seeded: TestClient) -> None:
    both = search(seeded, "revenue", ["reports", "archive"], top_k=20).json()["hits"]
    libs = {h["library_id"] for h in both}
    assert libs == {"reports", "archive"}
    only = search(seeded, "revenue", ["archive"], top_k=20).json()["hits"]
    assert {h["doc_id"] for h in only} == {"archive-2019"}
    assert {(h["library_id"], h["doc_id"]) for h in both} >= {("archive", "archive-2019")}


def test_search_filters(seeded: TestClient) -> None:
    def ids(**kw: object) -> set[str]:
        r = search(seeded, "revenue", ["reports", "archive"], top_k=50, **kw)
        assert r.status_code == 200, r.text
        return {h["doc_id"] for h in r.json()["hits"]}

    everything = ids()
    assert everything == {"acme-q3-2023", "energy-zh-2022", "globex-2022", "archive-2019"}
    assert ids(filters=[{"field": "period", "op": "eq", "value": 2022}]) == {"energy-zh-2022", "globex-2022"}
    assert ids(filters=[{"field": "period", "op": "between", "value": [2020, 2023]}]) == {
        "acme-q3-2023", "energy-zh-2022", "globex-2022"}
    assert ids(filters=[{"field": "entity", "op": "in", "value": ["acme", "globex"]}]) == {
        "acme-q3-2023", "globex-2022", "archive-2019"}
    assert ids(filters=[{"field": "entity", "op": "eq", "value": "acme"},
                        {"field": "period", "op": "gte", "value": 2020}]) == {"acme-q3-2023"}
    assert ids(filters=[{"field": "language", "op": "ne", "value": "en"}]) == {"energy-zh-2022"}
    assert ids(filters=[{"field": "region", "op": "eq", "value": "south"}]) == {"acme-q3-2023"}
    assert ids(filters=[{"field": "doc_id", "op": "eq", "value": "globex-2022"}]) == {"globex-2022"}
    # A filter that matches nothing gives nothing, unless the request allows the fallback.
    r = search(seeded, "revenue", ["reports"], filters=[{"field": "period", "op": "eq", "value": 1990}])
    assert r.json()["hits"] == [] and r.json()["filters_relaxed"] is False
    r = search(seeded, "revenue", ["reports"], allow_unfiltered_fallback=True,
               filters=[{"field": "period", "op": "eq", "value": 1990}]).json()
    assert r["hits"] and r["filters_relaxed"] is True and r["degraded"] is True
    assert any(x.startswith("filters_relaxed") for x in r["degraded_reasons"])


def test_search_degraded_flags(seeded: TestClient) -> None:
    r = search(seeded, "revenue", ["reports"], mode="hybrid", rerank=True).json()
    assert r["degraded"] is True
    reasons = [x.split(":", 1)[0] for x in r["degraded_reasons"]]
    assert reasons == ["visual_unavailable", "rerank_unavailable"]
    assert r["hits"]  # degraded, still answered from the CPU path
    for mode in ("auto", "bm25", "lexical", "economy"):
        r = search(seeded, "revenue", ["reports"], mode=mode).json()
        assert r["degraded"] is False, (mode, r["degraded_reasons"])
        assert r["hits"]


def test_search_is_deterministic(seeded: TestClient) -> None:
    a = comparable(search(seeded, "revenue margin 2022", ["reports", "archive"], top_k=20).json())
    b = comparable(search(seeded, "revenue margin 2022", ["reports", "archive"], top_k=20).json())
    assert a == b


def test_search_top_k_bounds(seeded: TestClient) -> None:
    one = search(seeded, "revenue", ["reports", "archive"], top_k=1).json()["hits"]
    assert len(one) == 1
    most = search(seeded, "revenue", ["reports", "archive"], top_k=1000)
    assert most.status_code == 200 and len(most.json()["hits"]) >= 4


def test_search_query_without_tokens_has_no_hits(seeded: TestClient) -> None:
    r = search(seeded, "!!! ???", ["reports"])
    assert r.status_code == 200 and r.json()["hits"] == []


# -- metrics ---------------------------------------------------------------------------------


def test_metrics_count_requests_pages_and_degraded_answers(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    data = pdfs.make_pdf(["open one", pdfs.Page(["marked"], header="RESTRICTED"), "open two"])
    ingest(client, "liba", data, filename="m.pdf")
    ingest(client, "liba", pdfs.make_pdf(["solo"]), filename="solo.pdf")
    search(client, "open", ["liba"])
    search(client, "open", ["liba"], mode="hybrid")
    search(client, "open", ["liba"], mode="hybrid", rerank=True)
    client.get("/v1/libraries/liba/documents/nope")
    client.get("/v1/libraries/liba/documents/m/pages/2/thumbnail")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert "# TYPE ragspine_requests_total counter" in text
    assert metric(text, "ragspine_requests_total", route="/v1/search", method="POST", status="200") == 3
    assert metric(text, "ragspine_requests_total", route="/v1/libraries", method="POST", status="201") == 1
    assert metric(text, "ragspine_requests_total", route="/v1/libraries/{lib}/documents",
                  method="POST", status="201") == 2
    assert metric(text, "ragspine_requests_total", route="/v1/libraries/{lib}/documents/{doc_id}",
                  method="GET", status="404") == 1
    assert metric(text, "ragspine_requests_total",
                  route="/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/thumbnail",
                  method="GET", status="404") == 1
    assert metric(text, "ragspine_pages_ingested_total") == 3
    assert metric(text, "ragspine_pages_dropped_total") == 1
    assert metric(text, "ragspine_degraded_answers_total", reason="visual_unavailable") == 2
    assert metric(text, "ragspine_degraded_answers_total", reason="rerank_unavailable") == 1
    assert metric(text, "ragspine_request_seconds_count", route="/v1/search", method="POST") == 3
    # Route templates, never raw paths: label cardinality stays bounded.
    assert "/v1/libraries/liba" not in text and "nope" not in text


def test_metrics_unmatched_paths_share_one_label(client: TestClient) -> None:
    for i in range(5):
        assert_problem(client.get(f"/no/such/path/{i}"), 404, "not-found")
    text = client.get("/metrics").text
    assert metric(text, "ragspine_requests_total", route="unmatched", method="GET", status="404") == 5
    assert "/no/such/path" not in text


def test_job_json_is_plain_json(client: TestClient) -> None:
    client.post("/v1/libraries", json={"name": "liba"})
    job = ingest(client, "liba", pdfs.make_pdf(["x marks"]), filename="j.pdf")
    assert json.loads(json.dumps(job)) == job
    assert set(job) >= {"id", "state", "library", "filename", "doc_id", "status", "pages_done",
                        "pages_total", "pages_dropped", "result", "error", "created_at", "finished_at"}


def test_a_finished_job_is_complete_whenever_it_is_seen(client: TestClient) -> None:
    """A poller never sees a terminal state with its result, doc_id or finished_at missing."""
    client.post("/v1/libraries", json={"name": "liba"})
    torn = []
    for k in range(4):
        r = upload(client, "liba", pdfs.make_pdf([f"polling page {k}", "second page"]), filename=f"p{k}.pdf")
        job_id = r.json()["id"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            j = client.get(f"/v1/jobs/{job_id}").json()
            if j["state"] in ("succeeded", "failed"):
                if j["finished_at"] is None or (j["state"] == "succeeded" and (
                        j["result"] is None or j["doc_id"] is None or j["pages_done"] != j["pages_total"])):
                    torn.append(j)
                if j["finished_at"] is not None and j["result"] is not None:
                    break
            assert j["pages_done"] <= j["pages_total"], j
    assert torn == []
