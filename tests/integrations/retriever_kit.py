"""What the retriever tests share: a small corpus whose answers are known, a real HTTP server
over it (uvicorn in a thread, or ``ragspine serve`` in a process), and httpx transports that
count the requests a retriever sends."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pdfs

from live_kit import LiveServer  # noqa: F401  (the client tests' live server, re-exported)

from ragspine.client import Client

#: ``KEY_STAR`` reads every library; ``KEY_REPORTS`` only ``reports``.
KEY_STAR, KEY_REPORTS = "key-star-00000000", "key-reports-0000"
API_KEYS = f"{KEY_STAR}=*;{KEY_REPORTS}=reports"

#: A word found only on page 2 of acme-2023.
UNIQUE, UNIQUE_DOC, UNIQUE_PAGE = "quokkafin", "acme-2023", 2
#: A word found only on page 3 of acme-2023, which the upload marks RESTRICTED.
CANARY, CANARY_PAGE = "canarywombat", 3


@dataclass(frozen=True)
class Seed:
    library: str
    doc_id: str
    pages: tuple[str, ...]
    metadata: dict[str, Any]


SEEDS = (
    Seed("reports", "acme-2023", (
        "Acme revenue grew 12 percent in 2023, driven by cloud services in every region.",
        "Operating margin improved to 18 percent; the quokkafin programme cut costs in the north.",
        "Board minutes: the canarywombat acquisition of a revenue platform is not yet announced.",
    ), {"doc_id": "acme-2023", "title": "Acme 2023 annual report", "entity": "acme", "period": 2023,
        # Fields named like citation keys: they must stay the document's, under doc_metadata.
        "score": "AA-", "library_id": "legacy-7",
        "page_sensitivity": {str(CANARY_PAGE): "RESTRICTED"}}),
    Seed("reports", "globex-2022", (
        "Globex revenue declined in 2022 as retail margins narrowed.",
    ), {"doc_id": "globex-2022", "title": "Globex 2022 annual report", "entity": "globex", "period": 2022}),
    Seed("archive", "archive-2019", (
        "Archived revenue tables from 2019, with the zebracorn index by quarter.",
    ), {"doc_id": "archive-2019", "title": "Archive 2019", "entity": "acme", "period": 2019}),
)


def layout(doc_id: str) -> list[list[tuple[float, float, float, float]]]:
    """Per page, the rects (PDF points, origin top-left) where the seed's text was drawn."""
    seed = next(s for s in SEEDS if s.doc_id == doc_id)
    return pdfs.build_pdf(list(seed.pages))[1]


def seed(client: Client) -> None:
    """Create the libraries and ingest :data:`SEEDS` (every upload waited for)."""
    for lib in sorted({s.library for s in SEEDS}):
        client.create_library(lib)
    for s in SEEDS:
        job = client.upload(s.library, pdfs.make_pdf(list(s.pages)), metadata=s.metadata,
                            filename=f"{s.doc_id}.pdf", wait=True)
        assert job.state == "succeeded", job


class Counting(httpx.BaseTransport):
    """A real HTTP transport that records each request's method and path, and its JSON body."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[tuple[str, str]] = []
        self.bodies: list[Any] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        self.bodies.append(json.loads(request.content) if request.content else None)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncCounting(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, str]] = []
        self.bodies: list[Any] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        self.bodies.append(json.loads(request.content) if request.content else None)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def bbox_inside(bbox: list[float], rect: tuple[float, float, float, float], tol: float = 2.0) -> bool:
    x0, y0, x1, y1 = bbox
    return (x0 < x1 and y0 < y1 and x0 >= rect[0] - tol and y0 >= rect[1] - tol
            and x1 <= rect[2] + tol and y1 <= rect[3] + tol)


# -- the two frameworks behind one face, for the tests both must pass -----------------------------


@dataclass(frozen=True)
class Framework:
    """A framework's retriever: how to make one, call it, and read its citations."""

    name: str  # "langchain" | "llamaindex"

    @property
    def module(self) -> str:
        return f"ragspine.integrations.{self.name}"

    def make(self, **kw: Any) -> Any:
        import importlib

        return importlib.import_module(self.module).RagspineRetriever(**kw)

    def get(self, retriever: Any, query: str) -> list[dict[str, Any]]:
        """``invoke`` / ``retrieve``, the answer read by :meth:`cited`."""
        out = retriever.invoke(query) if self.name == "langchain" else retriever.retrieve(query)
        return self.cited(out)

    async def aget(self, retriever: Any, query: str) -> list[dict[str, Any]]:
        """``ainvoke`` / ``aretrieve``, the answer read by :meth:`cited`."""
        out = await (retriever.ainvoke(query) if self.name == "langchain" else retriever.aretrieve(query))
        return self.cited(out)

    def cited(self, out: list[Any]) -> list[dict[str, Any]]:
        """Each document / node as ``{id, text, metadata, score}`` (LangChain has no score of its
        own: the fused one is in its metadata)."""
        if self.name == "langchain":
            from langchain_core.documents import Document

            assert all(type(d) is Document for d in out), out
            return [{"id": d.id, "text": d.page_content, "metadata": d.metadata, "score": d.metadata["score"]}
                    for d in out]
        from llama_index.core.schema import NodeWithScore, TextNode

        assert all(type(n) is NodeWithScore and type(n.node) is TextNode for n in out), out
        return [{"id": n.node.id_, "text": n.node.text, "metadata": n.node.metadata, "score": n.score} for n in out]


FRAMEWORKS = (Framework("langchain"), Framework("llamaindex"))
