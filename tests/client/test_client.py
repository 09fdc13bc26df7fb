"""The typed client against a real HTTP server: every answer parsed into the API's models,
citations as the server sends them, errors as ApiError with the server's problem, and the
async client doing the same."""

from __future__ import annotations

import asyncio
import inspect
import io
from typing import Any

import pdfs
import pytest
from live_kit import KEY_A, KEY_STAR, LiveServer
from pydantic import ValidationError

from ragspine import api
from ragspine.client import ApiError, AsyncClient, Client, JobFailedError
from ragspine.client._common import POLL_GROWTH


def test_the_async_client_has_the_sync_clients_methods() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {n: inspect.signature(f) for n, f in vars(cls).items()
                if callable(f) and not n.startswith("_") and n not in ("close", "aclose")}

    sync, asy = public(Client), public(AsyncClient)
    assert sync.keys() == asy.keys()
    assert {n for n, s in sync.items() if s != asy[n]} == set()
    coroutines = {n for n in asy if inspect.iscoroutinefunction(getattr(AsyncClient, n))}
    assert coroutines == set(asy) - {"absolute"}


def test_a_round_trip_keeps_every_citation(live: LiveServer) -> None:
    with Client(live.url, api_key=KEY_STAR) as rs:
        made = rs.create_library("roundtrip")
        assert isinstance(made, api.LibraryCreated) and made.name == "roundtrip"
        pdf = pdfs.make_pdf(["Opening words of the report.", "Cloud revenue grew by zebracorn percent."])
        job = rs.upload("roundtrip", pdf, metadata={"doc_id": "rep-1", "entity": "acme"}, filename="rep.pdf",
                        wait=True)
        assert (job.state, job.doc_id, job.library, job.filename) == ("succeeded", "rep-1", "roundtrip", "rep.pdf")
        assert job.result is not None and job.result.pages_indexed == 2

        doc = rs.document("roundtrip", "rep-1")
        assert (doc.page_numbers, doc.metadata["entity"]) == ([1, 2], "acme")
        assert [d.doc_id for d in rs.documents("roundtrip")] == ["rep-1"]
        assert {(lib.name, lib.documents, lib.pages) for lib in rs.libraries()} >= {("roundtrip", 1, 2)}

        res = rs.search("zebracorn", "roundtrip", mode="bm25", top_k=3)
        assert isinstance(res, api.SearchResponse) and res.mode == "bm25" and not res.degraded
        top = res.hits[0]
        assert (top.doc_id, top.page, top.library_id) == ("rep-1", 2, "roundtrip")
        assert "zebracorn" in top.text
        width, height = doc.page_sizes[doc.page_numbers.index(2)]
        x0, y0, x1, y1 = top.bbox
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        # The same answer as the raw API sends, field for field.
        raw = rs._http.post("/v1/search", json={"query": "zebracorn", "libraries": ["roundtrip"],
                                                 "mode": "bm25", "top_k": 3}).json()
        assert res.model_dump(mode="json", exclude_unset=True)["hits"] == raw["hits"]

        page = rs.page("roundtrip", "rep-1", 2)
        cited = [p for p in page.passages if p.chunk_id == top.chunk_id]
        assert [(p.bbox, p.text) for p in cited] == [(top.bbox, top.text)]
        assert "zebracorn" in page.text and (page.width, page.height) == (width, height)

        png = rs.thumbnail("roundtrip", "rep-1", 2)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert rs.absolute(top.thumbnail_url) == f"{live.url}/v1/libraries/roundtrip/documents/rep-1/pages/2/thumbnail"

        rs.delete_document("roundtrip", "rep-1")
        assert rs.documents("roundtrip") == []
        rs.delete_library("roundtrip")
        assert "roundtrip" not in {lib.name for lib in rs.libraries()}


def test_a_queued_upload_is_waited_for(live: LiveServer, tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "queued.pdf"  # type: ignore[operator]
    path.write_bytes(pdfs.make_pdf(["A document uploaded from a path on disk."]))
    with Client(live.url, api_key=KEY_STAR) as rs:
        rs.create_library("queued")
        job = rs.upload("queued", path)
        assert job.state in ("queued", "running", "succeeded") and job.filename == "queued.pdf"
        done = rs.wait_for(job, timeout=60)
        assert done.state == "succeeded" and done.doc_id is not None
        assert rs.document("queued", done.doc_id).filename == "queued.pdf"
        # From an open binary file too; a file that is not a PDF fails the upload.
        with pytest.raises(ApiError) as err:
            rs.upload("queued", io.BytesIO(b"hello, not a pdf"), filename="x.pdf", wait=True)
        assert err.value.status == 415 and err.value.type == "not-a-pdf"


def test_waiting_polls_less_and_less_often_and_once_more_at_the_deadline() -> None:
    import httpx

    from ragspine.client import JobTimeoutError
    from ragspine.client._common import MAX_POLL_S, next_delay

    delays = [0.1]
    while len(delays) < 12:
        delays.append(next_delay(delays[-1]))
    assert delays[:3] == [0.1, pytest.approx(0.1 * POLL_GROWTH), pytest.approx(0.1 * POLL_GROWTH ** 2)]
    assert delays[-1] == MAX_POLL_S
    polls = []

    def running(request: httpx.Request) -> httpx.Response:
        polls.append(request.url.path)
        return httpx.Response(200, json={"id": "j" * 32, "state": "running", "library": "l", "created_at": 0.0})

    with Client("http://test", transport=httpx.MockTransport(running)) as rs:
        with pytest.raises(JobTimeoutError) as err:
            rs.wait_for("j" * 32, timeout=0)
    assert polls == [f"/v1/jobs/{'j' * 32}"]  # a zero timeout still looks once
    assert err.value.job_id == "j" * 32


def test_readiness_is_an_answer_even_when_not_ready() -> None:
    import httpx

    def not_ready(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"status": "not ready", "checks": {"store": "unavailable: StoreError"}})

    with Client("http://test", transport=httpx.MockTransport(not_ready)) as rs:
        assert rs.ready() == {"status": "not ready", "checks": {"store": "unavailable: StoreError"}}


def test_one_async_client_serves_two_event_loops(live: LiveServer) -> None:
    rs = AsyncClient(live.url, api_key=KEY_STAR)
    first = asyncio.run(rs.libraries())
    second = asyncio.run(rs.libraries())  # a new loop: its connections are new
    assert [lib.name for lib in first] == [lib.name for lib in second]
    asyncio.run(rs.aclose())


def test_unserialisable_metadata_opens_no_file(tmp_path: Any) -> None:
    import gc
    import warnings

    path = tmp_path / "x.pdf"
    path.write_bytes(pdfs.make_pdf(["a page"]))
    with Client("http://127.0.0.1:9") as rs, warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(TypeError):
            rs.upload("lib", path, metadata={"when": object()})
        gc.collect()


def test_a_failed_job_raises_its_own_error() -> None:
    failed = api.Job(id="a" * 32, state="failed", library="l", created_at=0.0,
                     error=api.Problem(type="/problems/corrupt-pdf", title="Corrupt PDF", status=422,
                                       detail="the PDF cannot be parsed"))
    from ragspine.client._common import finished

    with pytest.raises(JobFailedError) as err:
        finished(failed, ocr=False)
    assert (err.value.status, err.value.type, err.value.detail) == (422, "corrupt-pdf", "the PDF cannot be parsed")


def test_errors_are_the_servers_problems(live: LiveServer) -> None:
    with Client(live.url, api_key=KEY_STAR) as rs:
        with pytest.raises(ApiError) as err:
            rs.documents("no-such-library")
        assert (err.value.status, err.value.type) == (404, "unknown-library")
        assert "no-such-library" in err.value.detail
        rs.create_library("errs")
        with pytest.raises(ApiError) as err:
            rs.search("revenue", "errs", filters=[{"field": "period", "op": "near", "value": 1}])
        assert err.value.status == 422 and "near" in err.value.detail
        with pytest.raises(ApiError) as err:
            rs.create_library("Bad Name")
        assert err.value.status == 422 and "not allowed" in err.value.detail
        # A path segment is encoded: a doc id with '/' cannot reach another route.
        with pytest.raises(ApiError) as err:
            rs.document("errs", "../../libraries")
        assert err.value.status in (404, 422)
    # The request is checked by the server's own model before it is sent.
    with Client(live.url) as rs, pytest.raises(ValidationError):
        rs.search("revenue", "errs", top_k="many")
    with Client(live.url) as rs, pytest.raises(ApiError) as err:
        rs.libraries()
    assert err.value.status == 401


def test_a_key_sees_only_its_libraries(live: LiveServer) -> None:
    with Client(live.url, api_key=KEY_STAR) as admin:
        for lib in ("liba", "libb"):
            admin.create_library(lib)
            admin.upload(lib, pdfs.make_pdf([f"{lib} quarterly figures"]), wait=True)
    with Client(live.url, api_key=KEY_A) as rs:
        assert {lib.name for lib in rs.libraries()} == {"liba"}
        assert rs.search("quarterly figures", "liba", mode="bm25").hits
        with pytest.raises(ApiError) as err:
            rs.search("quarterly figures", ["liba", "libb"])
        assert err.value.status == 403


def test_graph_glossary_and_gaps(live: LiveServer) -> None:
    with Client(live.url, api_key=KEY_STAR) as rs:
        rs.create_library("chain")
        rs.upload("chain", pdfs.make_pdf(["Acme Holdings owns Acme Energy; revenue rose."]), wait=True)
        up = rs.upload_relations("chain", b"source,relation,target,provenance\n"
                                 b"Acme Energy,subsidiary_of,Acme Holdings,annual report 2023\n"
                                 b"S&P/ASX 200,peer_of,Acme Holdings,index membership\n",
                                 filename="rel.csv")
        assert (up.rows, up.declared) == (2, {"entities": 3, "relations": 2})
        # A name with '/' reaches its route (encoded by the client, a path parameter on the server).
        assert [n.name for n in rs.neighbors("chain", "S&P/ASX 200").neighbors] == ["Acme Holdings"]
        ents = rs.entities("chain", "acme")
        assert {e.name for e in ents} >= {"Acme Energy", "Acme Holdings"}
        nb = rs.neighbors("chain", "Acme Energy", relation="subsidiary_of")
        assert [n.name for n in nb.neighbors] == ["Acme Holdings"]
        assert nb.neighbors[0].path[0].citations_total >= 1
        p = rs.paths("chain", "Acme Energy", "Acme Holdings")
        assert p.found and p.hops == 1 and p.from_.name == "Acme Energy"

        g = rs.upload_glossary("chain", b"term,synonyms,kind\nrevenue,turnover|sales,metric\n", filename="g.csv")
        assert g.terms == 1
        assert rs.glossary("chain").entries == [{"term": "revenue", "synonyms": ["turnover", "sales"],
                                                 "kind": "metric"}]
        rs.delete_glossary("chain")
        with pytest.raises(ApiError) as err:
            rs.glossary("chain")
        assert err.value.status == 404

        assert rs.search("qqqxyzzy", "chain", mode="bm25").hits == []
        gaps = rs.gaps("chain")
        assert [g.query for g in gaps] == ["qqqxyzzy"] and gaps[0].hit_count == 1
        rs.delete_gap("chain", gaps[0].gap_id)
        assert rs.gaps("chain") == []
        rs.search("qqqxyzzy", "chain", mode="bm25")
        assert rs.clear_gaps("chain") == 1


def test_the_async_client_does_the_same(live: LiveServer) -> None:
    async def run() -> tuple[api.Job, api.SearchResponse, list[api.Document]]:
        async with AsyncClient(live.url, api_key=KEY_STAR) as rs:
            await rs.create_library("asynclib")
            job = await rs.upload("asynclib", pdfs.make_pdf(["Nothing here.", "Marmoset margins widened."]),
                                  metadata={"doc_id": "a-1"})
            job = await rs.wait_for(job, timeout=60)
            res, docs = await asyncio.gather(rs.search("marmoset", "asynclib", mode="bm25"),
                                             rs.documents("asynclib"))
            return job, res, docs

    job, res, docs = asyncio.run(run())
    assert job.state == "succeeded" and job.doc_id == "a-1"
    assert [(h.doc_id, h.page) for h in res.hits[:1]] == [("a-1", 2)]
    assert [d.doc_id for d in docs] == ["a-1"]
