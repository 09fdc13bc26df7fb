"""A typed Python client of ragspine's REST API: ``pip install 'ragspine[client]'``.

Needs only httpx and pydantic: the request and response models are the server's own
(:mod:`ragspine.api`), so a client and a server of one version agree on every field.

    from ragspine.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as rs:
        rs.create_library("reports")
        rs.upload("reports", "annual-2023.pdf", metadata={"entity": "acme"}, wait=True)
        for hit in rs.search("operating margin 2023", "reports").hits:
            print(hit.doc_id, hit.page, hit.bbox, hit.text[:80])

:class:`AsyncClient` has the same methods as coroutines.
"""

from ragspine.client._async import AsyncClient
from ragspine.client._sync import Client
from ragspine.client.errors import ApiError, JobFailedError, JobTimeoutError

__all__ = ["ApiError", "AsyncClient", "Client", "JobFailedError", "JobTimeoutError"]
