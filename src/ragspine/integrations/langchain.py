"""ragspine as a LangChain retriever: ``pip install 'ragspine[langchain]'``.

    from ragspine.integrations.langchain import RagspineRetriever

    retriever = RagspineRetriever(url="http://127.0.0.1:8000", api_key="...", libraries="reports", top_k=5)
    for doc in retriever.invoke("operating margin 2023"):
        m = doc.metadata
        print(m["title"], "p.", m["page"], m["bbox"], m["thumbnail_url"], doc.page_content[:80])

Each query is one ``search`` call of :class:`ragspine.client.Client` (``ainvoke``: of
:class:`ragspine.client.AsyncClient`), and each hit one ``Document`` with the hit's text and
citation. Errors the server answers (a bad filter, a library the key may not read) raise
:class:`ragspine.client.ApiError` unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

    from ragspine import api
    from ragspine.client import AsyncClient, Client
    from ragspine.integrations._common import (
        Clients,
        answered,
        check_options,
        citation,
        hit_id,
        library_list,
        request_options,
    )
except ImportError as e:  # pragma: no cover - shown by tests/integrations/test_retriever_imports.py
    raise ImportError(f"ragspine.integrations.langchain needs langchain-core and ragspine's client ({e}): "
                      "pip install 'ragspine[langchain]'") from e

__all__ = ["RagspineRetriever"]

logger = logging.getLogger(__name__)


class RagspineRetriever(BaseRetriever):
    """Documents from a ragspine server, one per hit, with their citations.

    Give ``url`` (and ``api_key`` when the server has keys), or a ragspine ``client`` and/or
    ``async_client``; without an ``async_client``, ``ainvoke`` uses one made from ``url`` and
    ``api_key`` (or, with only ``client``, runs its call in a worker thread). ``libraries``: one
    name or a list. ``mode``, ``top_k``, ``filters``, ``rerank`` and ``search_options`` (any
    other field of the search request: ``rewrite``, ``corrective``, ``expand``...) are sent
    with every query as they are.

    ``Document.page_content`` is the passage; ``Document.id`` is ``library/chunk_id``;
    ``Document.metadata`` holds ``library_id``, ``doc_id``, ``title``, ``page`` (1-based),
    ``bbox`` (PDF points, origin top-left), ``chunk_id``, ``text_source`` (``pdf`` or ``ocr``),
    ``scores`` (per channel), ``score`` (the fused one), ``thumbnail_url`` (absolute) and
    ``doc_metadata`` (the document's own metadata). An answer the server abstained on is
    ``[]``; a degraded one is logged at WARNING with its reasons.
    """

    client: Client | None = None
    async_client: AsyncClient | None = None
    url: str | None = None
    api_key: SecretStr | None = Field(default=None, repr=False)
    libraries: list[str]
    mode: api.Mode = "auto"
    top_k: int = 10
    filters: list[dict[str, Any]] | None = None
    rerank: bool = False
    search_options: dict[str, Any] = Field(default_factory=dict)

    _clients: Clients = PrivateAttr()

    @field_validator("libraries", mode="before")
    @classmethod
    def _libraries(cls, v: str | Sequence[str]) -> list[str]:
        return library_list(v)

    @model_validator(mode="after")
    def _connect(self) -> RagspineRetriever:
        check_options(self.libraries, self._options())
        key = self.api_key.get_secret_value() if self.api_key is not None else None
        self._clients = Clients(self.client, self.async_client, self.url, key)
        return self

    def _options(self) -> dict[str, Any]:
        return request_options(self.mode, self.top_k, self.filters, self.rerank, self.search_options)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        resp, absolute = self._clients.search(query, self.libraries, self._options())
        return [_document(h, absolute) for h in answered(resp, logger)]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
                                       ) -> list[Document]:
        resp, absolute = await self._clients.asearch(query, self.libraries, self._options())
        return [_document(h, absolute) for h in answered(resp, logger)]

    def close(self) -> None:
        """Close the blocking client this retriever made from ``url`` (never one it was given)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the clients this retriever made from ``url`` for the running event loop."""
        await self._clients.aclose()


def _document(hit: api.Hit, absolute: Callable[[str], str]) -> Document:
    return Document(id=hit_id(hit), page_content=hit.text, metadata=citation(hit, absolute))
