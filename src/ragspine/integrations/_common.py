"""What the LangChain and the LlamaIndex retrievers share, with no framework imported: the
clients, the one search call, and how a hit becomes a citation.

Imports only :mod:`ragspine.client` and :mod:`ragspine.api` (``pyproject.toml`` holds the
import-linter contract that says so).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragspine import api
from ragspine.client import AsyncClient, Client

#: Search options a retriever takes as its own arguments; ``search_options`` holds the rest of
#: :class:`ragspine.api.SearchRequest`'s fields (rewrite, corrective, expand, postprocess...).
NAMED_OPTIONS = ("mode", "top_k", "filters", "rerank")


def library_list(libraries: str | Sequence[str]) -> list[str]:
    libs = [libraries] if isinstance(libraries, str) else list(libraries)
    if not libs:
        raise ValueError("libraries: name at least one library to search")
    return libs


def request_options(mode: str, top_k: int, filters: Sequence[Mapping[str, Any]] | None, rerank: bool,
                   extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of ``client.search`` besides the query and the libraries."""
    extra = dict(extra or {})
    clash = sorted(set(extra) & {*NAMED_OPTIONS, "query", "libraries"})
    if clash:
        raise ValueError(f"search_options repeats {clash}: pass query per call, and libraries, "
                         f"{', '.join(NAMED_OPTIONS)} as the retriever's own arguments")
    return {"mode": mode, "top_k": top_k, "filters": [dict(f) for f in filters or ()], "rerank": rerank, **extra}


def check_options(libraries: list[str], options: Mapping[str, Any]) -> None:
    """Check the options with the model the client sends (and the server validates) with, so
    a misspelt option fails when the retriever is made, not at its first query."""
    api.SearchRequest(query="check", libraries=libraries, **options)


class Clients:
    """The clients a retriever searches with: the ones it was given, else ones it makes from
    ``url`` and ``api_key`` (and closes in :meth:`close` / :meth:`aclose`).

    An async client belongs to the event loop it first ran in (its pooled connections do), so
    the one made here is made per running loop: ``asyncio.run(r.ainvoke(q))`` twice works."""

    def __init__(self, client: Client | None, async_client: AsyncClient | None, url: str | None,
                 api_key: str | None) -> None:
        if client is None and async_client is None and url is None:
            raise ValueError("RagspineRetriever needs url= (and api_key= when the server has keys), "
                             "or a ragspine client= / async_client=")
        self._client, self._async, self.url, self._key = client, async_client, url, api_key
        self._own: Client | None = None
        self._own_async: AsyncClient | None = None
        self._lock = threading.Lock()

    def sync(self) -> Client:
        if self._client is not None:
            return self._client
        if self.url is None:
            raise RuntimeError("this retriever was given only an async_client: call it asynchronously "
                               "(ainvoke / aretrieve), or give it client= or url= too")
        with self._lock:
            if self._own is None:
                self._own = Client(self.url, api_key=self._key)
            return self._own

    def async_(self) -> AsyncClient | None:
        """The async client; None when there is only a blocking client (its calls then run in a
        worker thread). An AsyncClient follows the running event loop itself, so one serves
        every ``asyncio.run``."""
        if self._async is not None:
            return self._async
        if self.url is None:
            return None
        with self._lock:
            if self._own_async is None:
                self._own_async = AsyncClient(self.url, api_key=self._key)
            return self._own_async

    def search(self, query: str, libraries: list[str], options: Mapping[str, Any]
               ) -> tuple[api.SearchResponse, Callable[[str], str]]:
        """The one search call; with the answer, the function that makes its URLs absolute."""
        client = self.sync()
        return client.search(query, libraries, **options), client.absolute

    async def asearch(self, query: str, libraries: list[str], options: Mapping[str, Any]
                      ) -> tuple[api.SearchResponse, Callable[[str], str]]:
        ac = self.async_()
        if ac is None:
            client = self.sync()
            return await asyncio.to_thread(client.search, query, libraries, **options), client.absolute
        return await ac.search(query, libraries, **options), ac.absolute

    def close(self) -> None:
        """Close the blocking client this object made (never one it was given)."""
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.close()

    async def aclose(self) -> None:
        """Close what :meth:`close` closes, and the async client this object made."""
        self.close()
        with self._lock:
            ac, self._own_async = self._own_async, None
        if ac is not None:
            await ac.aclose()


def answered(resp: api.SearchResponse, logger: logging.Logger) -> list[api.Hit]:
    """The hits of an answer to hand on: none when the server abstained. A degraded answer is
    used as it is, and said once, at WARNING, with the server's reasons."""
    if resp.degraded:
        logger.warning("ragspine answered degraded: %s", "; ".join(resp.degraded_reasons) or "no reason given")
    if resp.abstained:
        reason = (resp.corrective or {}).get("reason", "")
        logger.info("ragspine abstained%s", f": {reason}" if reason else "")
        return []
    return list(resp.hits)


def hit_id(hit: api.Hit) -> str:
    """A stable id of a hit: the same passage of the same document version has the same one."""
    return f"{hit.library_id}/{hit.chunk_id}"  # a chunk id starts with its doc id: acme/p2/c0


def citation(hit: api.Hit, absolute: Callable[[str], str]) -> dict[str, Any]:
    """A hit's metadata for a framework's document or node. The document's own metadata stays
    under ``doc_metadata`` (a field named ``page`` or ``score`` there cannot shadow the citation)."""
    meta: dict[str, Any] = {
        "library_id": hit.library_id,
        "doc_id": hit.doc_id,
        "title": hit.title,
        "page": hit.page,
        "bbox": list(hit.bbox),
        "chunk_id": hit.chunk_id,
        "text_source": hit.text_source,
        "scores": dict(hit.scores),
        "score": hit.scores.get("fused"),
        "thumbnail_url": absolute(hit.thumbnail_url) if hit.thumbnail_url else None,
        "doc_metadata": dict(hit.metadata),
    }
    if hit.via is not None:  # with expand: the graph paths that brought the hit in, cited
        meta["via"] = hit.via
    if hit.found_by is not None:  # with rewrite: which query variants found it
        meta["found_by"] = hit.found_by
    return meta
