"""Both retrievers against a real ``ragspine serve`` process, sync and async: the corpus
ingested through the client, citations equal to the server's, a thumbnail fetched, the
RESTRICTED page out of reach, another library refused to a scoped key."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from retriever_kit import (
    API_KEYS,
    CANARY,
    FRAMEWORKS,
    KEY_REPORTS,
    KEY_STAR,
    UNIQUE,
    UNIQUE_DOC,
    UNIQUE_PAGE,
    Framework,
    seed,
)
from serving_kit import serve_process

from ragspine.client import ApiError, Client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("serve") / "data"
    data.mkdir()
    env = {"RAGSPINE_API_KEYS": API_KEYS, "RAGSPINE_RERANKER": "none", "RAGSPINE_OCR_WORKERS": "1"}
    with serve_process(Path(data), env=env) as url:
        with Client(url, api_key=KEY_STAR) as c:
            seed(c)
        yield url


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.name)
def test_the_retriever_against_ragspine_serve(fw: Framework, served: str) -> None:
    r = fw.make(url=served, api_key=KEY_STAR, libraries=["reports", "archive"], top_k=5)
    sync = fw.get(r, UNIQUE)
    asy = asyncio.run(fw.aget(r, UNIQUE))
    with Client(served, api_key=KEY_STAR) as rs:
        direct = rs.search(UNIQUE, ["reports", "archive"], top_k=5)
        doc = rs.document("reports", UNIQUE_DOC)
        png = rs.thumbnail("reports", UNIQUE_DOC, UNIQUE_PAGE)
    ids = [f"{h.library_id}/{h.chunk_id}" for h in direct.hits]
    assert ids and [g["id"] for g in sync] == [g["id"] for g in asy] == ids
    assert sync == asy
    top = sync[0]["metadata"]
    assert (top["doc_id"], top["page"], top["chunk_id"]) == (UNIQUE_DOC, UNIQUE_PAGE, direct.hits[0].chunk_id)
    assert (top["bbox"], top["scores"], sync[0]["score"]) == (direct.hits[0].bbox, direct.hits[0].scores,
                                                              direct.hits[0].scores["fused"])
    assert top["title"] == doc.title and top["doc_metadata"] == doc.metadata and top["page"] in doc.page_numbers
    thumb = httpx.get(top["thumbnail_url"], headers={"Authorization": f"Bearer {KEY_STAR}"})
    assert top["thumbnail_url"].startswith(f"{served}/")
    assert (thumb.status_code, thumb.headers["content-type"], thumb.content) == (200, "image/png", png)

    assert fw.get(r, CANARY) == [] and asyncio.run(fw.aget(r, CANARY)) == []

    scoped = fw.make(url=served, api_key=KEY_REPORTS, libraries="archive")
    with pytest.raises(ApiError) as e:
        fw.get(scoped, "revenue")
    assert e.value.status == 403
    with pytest.raises(ApiError) as e:
        asyncio.run(fw.aget(scoped, "revenue"))
    assert e.value.status == 403
    r.close()
    asyncio.run(r.aclose())
