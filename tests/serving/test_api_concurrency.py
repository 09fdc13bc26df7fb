"""Several clients ingesting different PDFs and searching at the same time: no 5xx, every job
succeeds, every document is searchable afterwards, and the counts agree everywhere."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pdfs
import pytest
from serving_kit import metric, search, upload, wait_job

PAGES_EACH = 2


def _doc(t: int, i: int) -> tuple[str, bytes]:
    word = f"uniqword{t}x{i}"
    data = pdfs.make_pdf([f"Common revenue page of document {t}-{i}. {word} appears here.",
                          f"Second page, common margin table {t}-{i}."])
    return word, data


@pytest.mark.parametrize(
    ("uploaders", "docs_each", "searchers", "workers"),
    [
        pytest.param(2, 2, 2, 2, id="small"),
        pytest.param(4, 4, 3, 3, id="large", marks=pytest.mark.slow),
    ],
)
def test_concurrent_ingest_and_search(make_client: Any, uploaders: int, docs_each: int, searchers: int,
                                      workers: int) -> None:
    c = make_client(ingest_workers=workers)
    assert c.post("/v1/libraries", json={"name": "conc"}).status_code == 201
    assert c.post("/v1/libraries", json={"name": "side"}).status_code == 201
    upload(c, "side", pdfs.make_pdf(["side library revenue"]), filename="side.pdf", wait=True)

    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[str] = []
    jobs: dict[str, str] = {}  # word -> job id
    done = threading.Event()

    def note(r: Any) -> None:
        with lock:
            statuses[r.status_code] += 1
            if r.status_code >= 500:
                errors.append(f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:200]}")

    def uploader(t: int) -> None:
        try:
            for i in range(docs_each):
                word, data = _doc(t, i)
                # Alternate between polling and waiting clients.
                r = upload(c, "conc", data, filename=f"doc-{t}-{i}.pdf", wait=bool(i % 2),
                           metadata={"doc_id": f"doc-{t}-{i}", "uploader": t})
                note(r)
                if r.status_code in (201, 202):
                    with lock:
                        jobs[word] = r.json()["id"]
        except Exception as exc:  # surfaced below
            errors.append(f"uploader {t}: {exc!r}")

    def searcher(k: int) -> None:
        try:
            n = 0
            while not done.is_set() or n < 5:
                q = ["common revenue", "margin table", f"uniqword{n % uploaders}x{n % docs_each}"][n % 3]
                note(search(c, q, ["conc", "side"] if k else ["conc"], top_k=50))
                if n % 4 == 0:
                    note(c.get("/v1/libraries"))
                    note(c.get("/v1/libraries/conc/documents"))
                n += 1
        except Exception as exc:
            errors.append(f"searcher {k}: {exc!r}")

    threads = [threading.Thread(target=uploader, args=(t,)) for t in range(uploaders)]
    threads += [threading.Thread(target=searcher, args=(k,)) for k in range(searchers)]
    for th in threads:
        th.start()
    for th in threads[:uploaders]:
        th.join(timeout=120)
    finished = {w: wait_job(c, j, timeout=120) for w, j in jobs.items()}
    done.set()
    for th in threads[uploaders:]:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads), "a client thread hung"
    assert errors == []
    assert not [s for s in statuses if s >= 500], statuses

    n_docs = uploaders * docs_each
    assert len(finished) == n_docs
    assert all(j["state"] == "succeeded" and j["status"] == "indexed" for j in finished.values()), finished
    for word, job in finished.items():
        hits = search(c, word, ["conc"]).json()["hits"]
        assert [(h["doc_id"], h["page"]) for h in hits] == [(job["doc_id"], 1)], word
    docs = c.get("/v1/libraries/conc/documents").json()["documents"]
    assert sorted(d["doc_id"] for d in docs) == sorted(f"doc-{t}-{i}" for t in range(uploaders)
                                                       for i in range(docs_each))
    assert all(d["pages_indexed"] == PAGES_EACH and d["version"] == 1 for d in docs)
    listed = {x["name"]: x for x in c.get("/v1/libraries").json()["libraries"]}
    assert listed["conc"] == {"name": "conc", "documents": n_docs, "pages": n_docs * PAGES_EACH}
    assert listed["side"]["documents"] == 1
    common = search(c, "common", ["conc"], top_k=1000).json()["hits"]
    assert len(common) == n_docs * PAGES_EACH
    text = c.get("/metrics").text
    assert metric(text, "ragspine_pages_ingested_total") == n_docs * PAGES_EACH + 1
    assert metric(text, "ragspine_pages_dropped_total") == 0
    assert "status=\"5" not in text


def test_concurrent_replacements_of_one_document_leave_one_version(make_client: Any) -> None:
    """Several clients replace the same doc_id at once: each ingest succeeds, and exactly one
    version is active and searchable afterwards."""
    c = make_client(ingest_workers=3)
    c.post("/v1/libraries", json={"name": "conc"})
    results: list[Any] = []

    def put(k: int) -> None:
        r = upload(c, "conc", pdfs.make_pdf([f"shared document variant{k} text"]), filename="shared.pdf",
                   wait=True, metadata={"doc_id": "shared"})
        results.append(r)

    threads = [threading.Thread(target=put, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert [r.status_code for r in results] == [201] * 4, [r.text for r in results]
    versions = sorted(r.json()["result"]["version"] for r in results)
    assert versions == [1, 2, 3, 4]
    doc = c.get("/v1/libraries/conc/documents/shared").json()
    assert doc["version"] == 4
    found = [k for k in range(4) if search(c, f"variant{k}", ["conc"]).json()["hits"]]
    assert len(found) == 1
    hits = search(c, "shared document", ["conc"], top_k=100).json()["hits"]
    assert len(hits) == 1 and hits[0]["doc_id"] == "shared"
