"""RESTRICTED never leaves the index build (docs/invariants.md, 1), seen from the API: ingest documents
whose RESTRICTED pages (and one RESTRICTED document) carry canary words, then call every route
— searches for the canaries in every mode, every thumbnail 0..N+1 of every document, every
job, every listing, metrics, OpenAPI — and check that no response body, log line or file in
the data dir holds a canary."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pdfs
import pytest
from fastapi.testclient import TestClient
from ragspine.serving.app import create_app
from serving_kit import assert_problem, clean_settings, ingest, search, upload, wait_job

MODES = ("auto", "hybrid", "bm25", "lexical", "economy")
#: Words on open pages: they must be found (so the checks below would see a leak).
OPEN_WORDS = ("openwordalpha", "openwordbeta", "开放词语")


@dataclass
class Sweep:
    client: TestClient
    data_dir: Path
    libraries: list[str]
    canaries: list[str]
    #: doc_id -> 1-based pages the policy must have dropped (every page for dropped documents).
    dropped: dict[tuple[str, str], list[int]]
    #: (library, doc_id) -> physical page count, for every document uploaded (kept or not).
    page_counts: dict[tuple[str, str], int]
    jobs: list[str] = field(default_factory=list)
    responses: list[tuple[str, bytes]] = field(default_factory=list)

    def record(self, what: str, resp: Any) -> Any:
        self.responses.append((what, resp.content))
        return resp


def _canary_forms(canary: str) -> list[bytes]:
    """The canary as raw UTF-8 and as a JSON ``\\u`` escape (``ensure_ascii`` encoders)."""
    forms = {canary.encode(), json.dumps(canary).strip('"').encode()}
    return sorted(forms)


def assert_clean(what: str, body: bytes, canaries: Iterable[str]) -> None:
    for c in canaries:
        for form in _canary_forms(c):
            assert form not in body, f"canary {c!r} leaked in {what}: ...{body[max(0, body.find(form) - 200):body.find(form) + 200]!r}..."


def call_every_route(s: Sweep, queries: Iterable[str]) -> None:
    c = s.client
    for url in ("/", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                "/redoc"):
        s.record(url, c.get(url))
    import ragspine.serving

    web = Path(ragspine.serving.__file__).parent / "web"
    for path in sorted(web.rglob("*")):
        if path.is_file():  # the web page's own assets, when it has any
            rel = path.relative_to(web).as_posix()
            s.record(f"/static/{rel}", c.get(f"/static/{rel}"))
    listing = s.record("GET /v1/libraries", c.get("/v1/libraries"))
    assert listing.status_code == 200
    for lib in s.libraries:
        docs = s.record(f"documents of {lib}", c.get(f"/v1/libraries/{lib}/documents")).json()["documents"]
        for d in docs:
            assert not set(d["page_numbers"]) & set(s.dropped.get((lib, d["doc_id"]), [])), d
    for (lib, doc_id), n_pages in s.page_counts.items():
        r = s.record(f"document {lib}/{doc_id}", c.get(f"/v1/libraries/{lib}/documents/{doc_id}"))
        dropped = set(s.dropped.get((lib, doc_id), []))
        kept = set(range(1, n_pages + 1)) - dropped
        if not kept:
            assert_problem(r, 404, "unknown-document")
        for n in range(0, n_pages + 2):
            url = f"/v1/libraries/{lib}/documents/{doc_id}/pages/{n}/thumbnail"
            t = s.record(url, c.get(url))
            if n in kept:
                assert t.status_code == 200 and t.content.startswith(b"\x89PNG"), url
            else:
                assert_problem(t, 404)
            # The page's text and passages: the same exit.
            url = f"/v1/libraries/{lib}/documents/{doc_id}/pages/{n}"
            t = s.record(url, c.get(url))
            if n in kept:
                assert t.status_code == 200 and t.json()["page"] == n and t.json()["passages"], url
            else:
                assert_problem(t, 404)
    for job_id in s.jobs:
        s.record(f"job {job_id}", c.get(f"/v1/jobs/{job_id}"))
    all_libs = list(s.libraries)
    thumbs: set[str] = set()

    def run(what: str, q: str, libs: list[str], **kw: Any) -> None:
        r = s.record(f"search {q!r} {what}", search(c, q, libs, top_k=1000, **kw))
        assert r.status_code == 200, r.text
        for h in r.json()["hits"]:
            assert h["page"] not in s.dropped.get((h["library_id"], h["doc_id"]), []), h
            thumbs.add(h["thumbnail_url"])

    everything = " ".join(s.canaries)
    for q in [everything, f"revenue {everything}", "revenue"]:
        for mode in MODES:
            for rerank in (False, True):
                run(f"{mode} rerank={rerank}", q, all_libs, mode=mode, rerank=rerank)
    for q in [*s.canaries, *queries, "RESTRICTED", "restricted", "受限", "Classification restricted"]:
        run("all", q, all_libs)
        for lib in all_libs:
            run(lib, q, [lib])
        # A filter that matches nothing, with the unfiltered fallback allowed.
        run("fallback", q, all_libs, allow_unfiltered_fallback=True,
            filters=[{"field": "doc_id", "op": "eq", "value": "no-such-document"}])
    # Filters that name the dropped documents find nothing of their dropped pages.
    for (lib, doc_id) in s.dropped:
        run(f"doc_id={doc_id}", everything, [lib], filters=[{"field": "doc_id", "op": "eq", "value": doc_id}])
    for url in sorted(thumbs):
        t = s.record(url, c.get(url))
        assert t.status_code == 200
    sweep_graph(s)
    s.record("metrics after", c.get("/metrics"))


def sweep_graph(s: Sweep) -> None:
    """The relation graph's read routes, when the app has them: every entity, its neighbours at
    the deepest depth allowed, paths between entities, and lookups by each canary."""
    c = s.client
    paths = c.get("/openapi.json").json()["paths"]
    if "/v1/libraries/{lib}/graph/entities" not in paths:
        return
    for lib in s.libraries:
        base = f"/v1/libraries/{lib}/graph"
        r = s.record(f"{base}/entities", c.get(f"{base}/entities", params={"limit": 200}))
        assert r.status_code == 200, r.text
        ids = [e["id"] for e in r.json()["entities"]]
        for q in s.canaries:
            s.record(f"{base}/entities?q={q}", c.get(f"{base}/entities", params={"q": q, "limit": 200}))
        for entity_id in ids[:50]:
            for depth in (1, 3):
                s.record(f"neighbors {entity_id} {depth}", c.get(
                    f"{base}/entities/{entity_id}/neighbors", params={"depth": depth, "limit": 100}))
        for a, b in list(zip(ids, ids[1:]))[:25]:
            s.record(f"paths {a} {b}", c.get(f"{base}/paths", params={"from": a, "to": b}))


class _Records(logging.Handler):
    """Every log record of the process while installed (all threads, all loggers)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def capture_logs() -> Iterator[_Records]:
    root, handler = logging.getLogger(), _Records()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def check_no_leak(s: Sweep, logs: list[logging.LogRecord], open_words: Iterable[str] = OPEN_WORDS) -> None:
    assert s.responses
    for what, body in s.responses:
        assert_clean(what, body, s.canaries)
    assert logs, "no log record captured: the log check would see nothing"
    for rec in logs:
        if rec.name.startswith(("httpx", "httpcore")):
            continue  # the test's own HTTP client, logging the URLs it asks for
        text = rec.getMessage()
        if rec.exc_info:
            text += logging.Formatter().formatException(rec.exc_info)
        assert_clean(f"log record {rec.name}", text.encode(), s.canaries)
    # Positive control: the words of open pages are on disk, so a leaked canary would be too.
    blobs = [(p, p.read_bytes()) for p in s.data_dir.rglob("*") if p.is_file()]
    assert any(w.encode() in b for w in open_words for _, b in blobs), \
        "no open word found in the data dir: the on-disk check would see nothing"
    for p, b in blobs:
        assert_clean(f"file {p.relative_to(s.data_dir)}", b, s.canaries)


# -- our own corpus ------------------------------------------------------------------------------

# The sweeps run with gap_log off: they search with the canaries as queries, and a query is the
# user's own text, which the knowledge-gap log keeps by design (tests/chain/test_query_chain.py
# shows it keeps nothing else). What they check is that no RESTRICTED page content leaves.
CANARIES = ["zqcanaryhdr", "zqcanaryfoot", "雪豹机密", "zqcanaryover", "zqcanarylabel", "zqcanarydoc",
            "zqcanarytitle", "zqcanaryall", "zqcanaryreplace"]


@pytest.fixture(scope="module")
def own_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sweep, list[logging.LogRecord]]]:
    with capture_logs() as logs, TestClient(
        create_app(clean_settings(data_dir=tmp_path_factory.mktemp("sweep"), gap_log=False)), raise_server_exceptions=False
    ) as c:
        yield _build_own_corpus(c), logs.records


def _build_own_corpus(c: TestClient) -> Sweep:
    data_dir = Path(c.app.state.engine.settings.data_dir)  # type: ignore[attr-defined]
    for lib in ("sweep", "other"):
        assert c.post("/v1/libraries", json={"name": lib}).status_code == 201
    jobs: list[str] = []
    dropped: dict[tuple[str, str], list[int]] = {}
    counts: dict[tuple[str, str], int] = {}

    mixed = pdfs.make_pdf([
        f"Open summary: revenue grew in every region. {OPEN_WORDS[0]}.",
        pdfs.Page([f"Merger plan codename {CANARIES[0]}: revenue synergies of 40 million."], header="RESTRICTED"),
        "Operating margin by segment and revenue by quarter, restricted stock units excluded.",
        pdfs.Page([f"收购计划 代号 {CANARIES[2]}，营业收入 预测。 {CANARIES[1]} revenue forecast."], footer="受限"),
        f"Layoff list {CANARIES[3]} with revenue per head.",
        pdfs.Page([f"Pricing floor {CANARIES[4]} for revenue."], header="Classification: restricted"),
        pdfs.Page([f"Public appendix {OPEN_WORDS[1]} 开放词语 revenue tables."], header="UNRESTRICTED distribution"),
    ], title="Mixed report")
    r = upload(c, "sweep", mixed, filename="mixed-report.pdf",
               metadata={"doc_id": "mixed-report", "title": "Mixed report", "period": 2023,
                         "page_sensitivity": {"5": " restricted "}})
    assert r.status_code == 202
    job = wait_job(c, r.json()["id"])
    assert job["state"] == "succeeded", job
    assert job["pages_dropped"] == [2, 4, 5, 6]
    jobs.append(job["id"])
    dropped[("sweep", "mixed-report")] = [2, 4, 5, 6]
    counts[("sweep", "mixed-report")] = 7

    # A RESTRICTED document (sensitivity in any case, padded): canary in its text and title.
    memo = pdfs.make_pdf([f"Board memo {CANARIES[5]}: acquisition revenue.", "Second page revenue."],
                         title=f"Memo {CANARIES[6]}")
    j = ingest(c, "sweep", memo, filename="board-memo.pdf",
               metadata={"doc_id": "board-memo", "title": f"Board memo {CANARIES[6]}",
                         "sensitivity": "  Restricted "})
    assert j["status"] == "dropped_by_policy"
    jobs.append(j["id"])
    dropped[("sweep", "board-memo")] = [1, 2]
    counts[("sweep", "board-memo")] = 2

    # Every page marked: nothing of the document may be searchable.
    allmarked = pdfs.make_pdf([pdfs.Page([f"{CANARIES[7]} revenue"], header="RESTRICTED"),
                               pdfs.Page([f"{CANARIES[7]} margin"], footer="受限")])
    j = ingest(c, "other", allmarked, filename="all-marked.pdf", metadata={"doc_id": "all-marked"})
    assert j["status"] == "dropped_by_policy" and j["pages_dropped"] == [1, 2]
    jobs.append(j["id"])
    dropped[("other", "all-marked")] = [1, 2]
    counts[("other", "all-marked")] = 2

    # An open document replaced by a RESTRICTED version: the old one goes, the new one never comes.
    j = ingest(c, "other", pdfs.make_pdf(["An open draft about revenue and margin."]),
               filename="draft.pdf", metadata={"doc_id": "draft"})
    assert j["status"] == "indexed"
    jobs.append(j["id"])
    j = ingest(c, "other", pdfs.make_pdf([f"Final {CANARIES[8]} revenue"]), filename="draft.pdf",
               metadata={"doc_id": "draft", "sensitivity": "RESTRICTED"})
    assert j["status"] == "dropped_by_policy"
    jobs.append(j["id"])
    dropped[("other", "draft")] = [1]
    counts[("other", "draft")] = 1

    # A plain open document beside them.
    j = ingest(c, "other", pdfs.make_pdf([f"Globex open report revenue {OPEN_WORDS[0]}."]), filename="globex.pdf")
    jobs.append(j["id"])
    counts[("other", "globex")] = 1

    return Sweep(c, data_dir, ["sweep", "other"], CANARIES, dropped, counts, jobs)


def test_restricted_never_leaves_through_any_route(own_corpus: tuple[Sweep, list[logging.LogRecord]]) -> None:
    s, logs = own_corpus
    # The open pages are searchable (the sweep would otherwise prove nothing).
    hits = search(s.client, OPEN_WORDS[1], ["sweep"]).json()["hits"]
    assert [(h["doc_id"], h["page"]) for h in hits] == [("mixed-report", 7)]
    hits = search(s.client, "revenue", ["sweep", "other"], top_k=100).json()["hits"]
    assert {(h["library_id"], h["doc_id"], h["page"]) for h in hits} == {
        ("sweep", "mixed-report", 1), ("sweep", "mixed-report", 3), ("sweep", "mixed-report", 7),
        ("other", "globex", 1)}
    assert search(s.client, OPEN_WORDS[2], ["sweep"]).json()["hits"][0]["page"] == 7
    call_every_route(s, ["revenue", "revenue forecast", "收购计划", "营业收入 预测", "acquisition",
                         "merger plan codename", "layoff list", "board memo", "pricing floor"])
    check_no_leak(s, logs)


def test_dropped_page_thumbnail_is_indistinguishable_from_a_missing_page(
    own_corpus: tuple[Sweep, list[logging.LogRecord]],
) -> None:
    c = own_corpus[0].client
    base = "/v1/libraries/sweep/documents/mixed-report/pages/{}/thumbnail"
    dropped = assert_problem(c.get(base.format(2)), 404)
    missing = assert_problem(c.get(base.format(99)), 404)
    assert {k: v for k, v in dropped.items() if k != "detail"} == {k: v for k, v in missing.items() if k != "detail"}
    assert dropped["detail"].replace(" 2 ", " N ") == missing["detail"].replace(" 99 ", " N ")


# -- the demo corpus -------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_corpus_restricted_never_leaves(tmp_path: Path) -> None:
    """The same sweep over the generated demo corpus (about 10 s to build its charts)."""
    demo = pytest.importorskip("ragspine.demo", reason="the demo corpus generator is not installed")
    docs = demo.build_demo_corpus(tmp_path / "corpus")
    lib = demo.DEMO_LIBRARY
    with capture_logs() as logs, TestClient(
        create_app(clean_settings(data_dir=tmp_path / "data", gap_log=False)), raise_server_exceptions=False
    ) as c:
        assert c.post("/v1/libraries", json={"name": lib}).status_code == 201
        jobs, dropped, counts, canaries = [], {}, {}, []
        for d in docs:
            j = ingest(c, lib, d.path.read_bytes(), filename=d.path.name, metadata=d.metadata)
            jobs.append(j["id"])
            canaries.extend(d.canaries)
            counts[(lib, d.doc_id)] = d.page_count
            if d.restricted_pages:
                dropped[(lib, d.doc_id)] = list(d.restricted_pages)
            if d.restricted:
                assert j["status"] == "dropped_by_policy"
            else:
                assert j["status"] == "indexed" and j["pages_dropped"] == d.restricted_pages, (d.doc_id, j)
        assert canaries
        for q in demo.demo_queries():  # the demo's own queries work through the API
            r = c.post("/v1/search", json=q)
            assert r.status_code == 200 and r.json()["hits"], (q, r.text)
        s = Sweep(c, tmp_path / "data", [lib], canaries, dropped, counts, jobs)
        call_every_route(s, [*(q["query"] for q in demo.demo_queries()), "acquisition", "board memorandum",
                             "Globex Automation", "valuation", "revenue"])
        check_no_leak(s, logs.records, open_words=["Acme"])
