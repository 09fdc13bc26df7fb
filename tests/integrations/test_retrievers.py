"""The LangChain and the LlamaIndex retriever against a real HTTP server (uvicorn in this
process): each query one search, the server's citations kept exactly, RESTRICTED pages and
other keys' libraries out of reach, abstentions empty, degraded answers logged once, and the
server's errors raised as they are. Every test runs for both frameworks, sync and async."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from retriever_kit import (
    CANARY,
    CANARY_PAGE,
    FRAMEWORKS,
    KEY_REPORTS,
    KEY_STAR,
    UNIQUE,
    UNIQUE_DOC,
    UNIQUE_PAGE,
    AsyncCounting,
    Counting,
    Framework,
    LiveServer,
    bbox_inside,
    layout,
)

from ragspine.client import ApiError, AsyncClient, Client

pytestmark = pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.name)

CITATION_KEYS = {"library_id", "doc_id", "title", "page", "bbox", "chunk_id", "text_source", "scores", "score",
                 "thumbnail_url", "doc_metadata"}


def both(fw: Framework, retriever: Any, query: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The retriever's answer called synchronously and asynchronously."""
    return fw.get(retriever, query), asyncio.run(fw.aget(retriever, query))


def test_every_hit_keeps_the_servers_citation(fw: Framework, live: LiveServer, rs: Client) -> None:
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports")
    sync, asy = both(fw, r, UNIQUE)
    direct = rs.search(UNIQUE, "reports")
    assert direct.hits and not direct.degraded
    for got in (sync, asy):
        assert [g["id"] for g in got] == [f"{h.library_id}/{h.chunk_id}" for h in direct.hits]
        assert [g["text"] for g in got] == [h.text for h in direct.hits]
        assert [(g["metadata"]["library_id"], g["metadata"]["doc_id"], g["metadata"]["page"],
                 g["metadata"]["chunk_id"], g["metadata"]["bbox"], g["metadata"]["title"], g["metadata"]["scores"],
                 g["metadata"]["text_source"]) for g in got] == \
            [(h.library_id, h.doc_id, h.page, h.chunk_id, h.bbox, h.title, h.scores, h.text_source)
             for h in direct.hits]
        assert [g["score"] for g in got] == [h.scores["fused"] for h in direct.hits]
        assert all(set(g["metadata"]) == CITATION_KEYS for g in got)

    top = sync[0]["metadata"]
    assert (top["library_id"], top["doc_id"], top["page"]) == ("reports", UNIQUE_DOC, UNIQUE_PAGE)
    assert UNIQUE in sync[0]["text"] and top["text_source"] == "pdf"
    assert isinstance(sync[0]["score"], float) and sync[0]["score"] > 0
    # What GET /v1/libraries/reports/documents/acme-2023 says of the same document.
    doc = rs.document("reports", UNIQUE_DOC)
    assert (doc.doc_id, doc.title) == (top["doc_id"], top["title"])
    assert top["page"] in doc.page_numbers
    width, height = doc.page_sizes[doc.page_numbers.index(top["page"])]
    assert bbox_inside(top["bbox"], (0.0, 0.0, width, height), tol=0.0)
    # ...and where the passage was drawn on the page.
    assert bbox_inside(top["bbox"], layout(UNIQUE_DOC)[UNIQUE_PAGE - 1][0])
    # The document's own metadata, whole and apart: its "score" and "library_id" fields do not
    # overwrite the citation's.
    assert top["doc_metadata"] == doc.metadata
    assert (top["doc_metadata"]["score"], top["doc_metadata"]["library_id"]) == ("AA-", "legacy-7")
    assert top["library_id"] == "reports" and top["score"] == top["scores"]["fused"]


def test_the_thumbnail_url_is_absolute_and_serves_the_page(fw: Framework, live: LiveServer, rs: Client) -> None:
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries=["reports"])
    for got in both(fw, r, UNIQUE):
        url = got[0]["metadata"]["thumbnail_url"]
        assert url == f"{live.url}/v1/libraries/reports/documents/{UNIQUE_DOC}/pages/{UNIQUE_PAGE}/thumbnail"
        resp = httpx.get(url, headers={"Authorization": f"Bearer {KEY_STAR}"})
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/png"
        assert resp.content == rs.thumbnail("reports", UNIQUE_DOC, UNIQUE_PAGE)


def test_one_query_is_one_search_with_the_options_as_given(fw: Framework, live: LiveServer, rs: Client) -> None:
    sync_t, async_t = Counting(), AsyncCounting()
    client = Client(live.url, api_key=KEY_STAR, transport=sync_t)
    aclient = AsyncClient(live.url, api_key=KEY_STAR, transport=async_t)
    filters = [{"field": "period", "op": "gte", "value": 2019}]
    r = fw.make(client=client, async_client=aclient,
                libraries=["reports", "archive"], mode="bm25", top_k=3, filters=filters,
                search_options={"postprocess": ["mmr"]})
    sync = fw.get(r, "revenue")

    async def go() -> list[dict[str, Any]]:
        try:
            return await fw.aget(r, "revenue")
        finally:
            await aclient.aclose()

    asy = asyncio.run(go())
    sent = {"query": "revenue", "libraries": ["reports", "archive"], "mode": "bm25", "top_k": 3,
            "filters": filters, "postprocess": ["mmr"]}
    assert (sync_t.sent, sync_t.bodies) == ([("POST", "/v1/search")], [sent])
    assert (async_t.sent, async_t.bodies) == ([("POST", "/v1/search")], [sent])
    direct = rs.search("revenue", ["reports", "archive"], mode="bm25", top_k=3, filters=filters, postprocess=["mmr"])
    assert len(direct.hits) == 3
    assert [g["id"] for g in sync] == [g["id"] for g in asy] == \
        [f"{h.library_id}/{h.chunk_id}" for h in direct.hits]
    client.close()


def test_a_restricted_page_never_comes_out(fw: Framework, live: LiveServer, rs: Client) -> None:
    assert rs.document("reports", UNIQUE_DOC).pages_dropped == [CANARY_PAGE]  # the upload marked it
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries=["reports", "archive"], top_k=50)
    assert both(fw, r, CANARY) == ([], [])
    seen = 0
    for query in (f"{CANARY} acquisition", "board minutes acquisition platform", "revenue", "acme 2023"):
        for got in both(fw, r, query):
            seen += len(got)
            for g in got:
                m = g["metadata"]
                assert (m["doc_id"], m["page"]) != (UNIQUE_DOC, CANARY_PAGE)
                assert CANARY not in g["text"] and "board minutes" not in g["text"].lower()
    assert seen > 0  # the other pages do answer these queries


def test_a_key_for_one_library_is_refused_another(fw: Framework, live: LiveServer) -> None:
    for libraries in ("archive", ["reports", "archive"]):
        r = fw.make(url=live.url, api_key=KEY_REPORTS, libraries=libraries)
        with pytest.raises(ApiError) as sync_err:
            fw.get(r, "revenue")
        with pytest.raises(ApiError) as async_err:
            asyncio.run(fw.aget(r, "revenue"))
        assert sync_err.value.status == async_err.value.status == 403
        assert sync_err.value.type == "forbidden"
    ok = fw.make(url=live.url, api_key=KEY_REPORTS, libraries="reports")
    assert {g["metadata"]["library_id"] for g in fw.get(ok, "revenue")} == {"reports"}


def test_server_errors_are_raised_as_the_client_raises_them(fw: Framework, live: LiveServer, rs: Client) -> None:
    bad = [{"field": "period", "op": "bogus", "value": 1}]
    with pytest.raises(ApiError) as direct:
        rs.search("revenue", "reports", filters=bad)
    assert direct.value.status == 422
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports", filters=bad)
    for call in (lambda: fw.get(r, "revenue"), lambda: asyncio.run(fw.aget(r, "revenue"))):
        with pytest.raises(ApiError) as e:
            call()
        assert type(e.value) is ApiError
        assert (e.value.status, e.value.type, str(e.value)) == (422, direct.value.type, str(direct.value))
    missing = fw.make(url=live.url, api_key=KEY_STAR, libraries="no-such-library")
    with pytest.raises(ApiError) as e:
        fw.get(missing, "revenue")
    assert e.value.status == 404


def test_an_abstention_is_no_documents(fw: Framework, live: LiveServer, rs: Client) -> None:
    query = f"{UNIQUE} dividends buyback"
    direct = rs.search(query, "reports", mode="bm25", corrective=True)
    assert direct.abstained and direct.hits == []  # what the server answers
    assert rs.search(query, "reports", mode="bm25").hits  # without the corrective loop it finds some
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports", mode="bm25",
                search_options={"corrective": True})
    assert both(fw, r, query) == ([], [])


def test_an_abstention_with_hits_still_gives_none(fw: Framework, rs: Client) -> None:
    """The rule is the retriever's own: an answer that says ``abstained`` is never used, even
    one that carries hits (a real answer, replayed with the flag set)."""
    answer = rs.search(UNIQUE, "reports").model_dump(mode="json")
    assert answer["hits"]

    def replay(abstained: bool) -> tuple[Client, AsyncClient]:
        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json={**answer, "abstained": abstained})
        url = "http://ragspine.invalid"
        return (Client(url, transport=httpx.MockTransport(handler)),
                AsyncClient(url, transport=httpx.MockTransport(handler)))

    for abstained, expect in ((False, len(answer["hits"])), (True, 0)):
        client, aclient = replay(abstained)
        r = fw.make(client=client, async_client=aclient, libraries="reports")
        sync, asy = both(fw, r, UNIQUE)
        assert len(sync) == len(asy) == expect


def test_a_degraded_answer_is_used_and_logged_once_per_call(fw: Framework, live: LiveServer,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=fw.module)

    def mine() -> list[logging.LogRecord]:
        return [rec for rec in caplog.records if rec.name == fw.module and rec.levelno >= logging.WARNING]

    r = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports", rerank=True)  # the server has no reranker
    sync, asy = both(fw, r, UNIQUE)
    assert sync and asy and sync[0]["metadata"]["doc_id"] == UNIQUE_DOC
    assert [rec.levelno for rec in mine()] == [logging.WARNING, logging.WARNING]
    assert all("rerank_unavailable" in rec.getMessage() for rec in mine())
    plain = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports")
    both(fw, plain, UNIQUE)
    assert len(mine()) == 2  # an answer that is not degraded logs nothing


def test_the_async_path_without_an_async_client(fw: Framework, live: LiveServer) -> None:
    # Made from url and api_key: an async client per event loop, so two asyncio.run() work.
    r = fw.make(url=live.url, api_key=KEY_STAR, libraries="reports")
    first = asyncio.run(fw.aget(r, UNIQUE))
    assert first and asyncio.run(fw.aget(r, UNIQUE)) == first
    asyncio.run(r.aclose())
    r.close()
    # Given only a blocking client: the async call runs it in a worker thread.
    transport = Counting()
    with Client(live.url, api_key=KEY_STAR, transport=transport) as client:
        only_sync = fw.make(client=client, libraries="reports")
        assert asyncio.run(fw.aget(only_sync, UNIQUE)) == first
        assert transport.sent == [("POST", "/v1/search")]
        only_sync.close()  # not the retriever's to close
        assert client.search(UNIQUE, "reports").hits


def test_an_async_client_alone_serves_only_async_calls(fw: Framework, live: LiveServer) -> None:
    async def go() -> list[dict[str, Any]]:
        async with AsyncClient(live.url, api_key=KEY_STAR) as ac:
            r = fw.make(async_client=ac, libraries="reports")
            with pytest.raises(RuntimeError, match="only an async_client"):
                fw.get(r, UNIQUE)
            return await fw.aget(r, UNIQUE)

    got = asyncio.run(go())
    assert got[0]["metadata"]["doc_id"] == UNIQUE_DOC


def test_bad_arguments_fail_when_the_retriever_is_made(fw: Framework) -> None:
    with pytest.raises(ValueError, match="needs url="):
        fw.make(libraries="reports")
    with pytest.raises(ValueError, match=r"search_options repeats \['top_k'\]"):
        fw.make(url="http://127.0.0.1:9", libraries="reports", search_options={"top_k": 3})
    with pytest.raises(ValidationError, match="rewrit"):  # a misspelt option, refused by the API's model
        fw.make(url="http://127.0.0.1:9", libraries="reports", search_options={"rewrit": True})
    with pytest.raises(ValueError, match="at least one library"):
        fw.make(url="http://127.0.0.1:9", libraries=[])
    with pytest.raises(ValidationError):
        fw.make(url="http://127.0.0.1:9", libraries="reports", mode="fastest")
