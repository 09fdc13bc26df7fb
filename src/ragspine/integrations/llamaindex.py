"""ragspine as a LlamaIndex retriever: ``pip install 'ragspine[llamaindex]'``.

    from ragspine.integrations.llamaindex import RagspineRetriever

    retriever = RagspineRetriever(url="http://127.0.0.1:8000", api_key="...", libraries="reports", top_k=5)
    for n in retriever.retrieve("operating margin 2023"):
        m = n.node.metadata
        print(f"{n.score:.3f}", m["title"], "p.", m["page"], m["bbox"], m["thumbnail_url"])

Each query is one ``search`` call of :class:`ragspine.client.Client` (``aretrieve``: of
:class:`ragspine.client.AsyncClient`), and each hit one ``TextNode`` in a ``NodeWithScore``
whose score is the fused one. Errors the server answers (a bad filter, a library the key may
not read) raise :class:`ragspine.client.ApiError` unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )

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
    raise ImportError(f"ragspine.integrations.llamaindex needs llama-index-core and ragspine's client ({e}): "
                      "pip install 'ragspine[llamaindex]'") from e

__all__ = ["PROMPT_METADATA_KEYS", "RagspineRetriever"]

logger = logging.getLogger(__name__)

#: The only citation fields LlamaIndex puts into the text it embeds or gives an LLM. Every
#: other one (bbox, scores, chunk id, thumbnail URL, the document's metadata...) is in
#: ``excluded_embed_metadata_keys`` and ``excluded_llm_metadata_keys``: the citation machinery
#: (CitationQueryEngine, response synthesizers) would otherwise paste them into every prompt,
#: costing tokens and telling the model nothing. They stay in ``node.metadata`` for the app.
PROMPT_METADATA_KEYS = ("title", "doc_id", "page")


class RagspineRetriever(BaseRetriever):
    """Nodes from a ragspine server, one per hit, with their citations.

    Give ``url`` (and ``api_key`` when the server has keys), or a ragspine ``client`` and/or
    ``async_client``; without an ``async_client``, ``aretrieve`` uses one made from ``url`` and
    ``api_key`` (or, with only ``client``, runs its call in a worker thread). ``libraries``: one
    name or a list. ``mode``, ``top_k``, ``filters``, ``rerank`` and ``search_options`` (any
    other field of the search request: ``rewrite``, ``corrective``, ``expand``...) are sent
    with every query as they are.

    ``node.text`` is the passage; ``node.id_`` is ``library/chunk_id`` and its source
    (``node.ref_doc_id``) ``library/doc_id``; ``node.metadata`` holds ``library_id``,
    ``doc_id``, ``title``, ``page`` (1-based), ``bbox`` (PDF points, origin top-left),
    ``chunk_id``, ``text_source`` (``pdf`` or ``ocr``), ``scores`` (per channel), ``score``
    (the fused one, also ``NodeWithScore.score``), ``thumbnail_url`` (absolute) and
    ``doc_metadata`` (the document's own metadata). An answer the server abstained on is
    ``[]``; a degraded one is logged at WARNING with its reasons.
    """

    def __init__(self, *, libraries: str | Sequence[str], url: str | None = None, api_key: str | None = None,
                 client: Client | None = None, async_client: AsyncClient | None = None, mode: api.Mode = "auto",
                 top_k: int = 10, filters: Sequence[Mapping[str, Any]] | None = None, rerank: bool = False,
                 search_options: Mapping[str, Any] | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        self.libraries = library_list(libraries)
        self.options = request_options(mode, top_k, filters, rerank, search_options)
        check_options(self.libraries, self.options)
        self._clients = Clients(client, async_client, url, api_key)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        resp, absolute = self._clients.search(query_bundle.query_str, self.libraries, self.options)
        return [_node(h, absolute) for h in answered(resp, logger)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        resp, absolute = await self._clients.asearch(query_bundle.query_str, self.libraries, self.options)
        return [_node(h, absolute) for h in answered(resp, logger)]

    def close(self) -> None:
        """Close the blocking client this retriever made from ``url`` (never one it was given)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the clients this retriever made from ``url`` for the running event loop."""
        await self._clients.aclose()


def _node(hit: api.Hit, absolute: Callable[[str], str]) -> NodeWithScore:
    meta = citation(hit, absolute)
    # Out of the embedding and the LLM's prompt: all but title, doc_id and page (see
    # PROMPT_METADATA_KEYS), so citations do not bloat every prompt the node is put into.
    hidden = [k for k in meta if k not in PROMPT_METADATA_KEYS]
    node = TextNode(
        id_=hit_id(hit),
        text=hit.text,
        metadata=meta,
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=list(hidden),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"{hit.library_id}/{hit.doc_id}")},
    )
    return NodeWithScore(node=node, score=meta["score"])
