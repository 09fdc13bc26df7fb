"""Fixtures for the framework retrievers' tests: one real HTTP server (uvicorn in a thread) over
the seeded corpus of :mod:`retriever_kit`, shared by the fast tests of both frameworks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent / "serving"), str(_HERE.parent / "client")):
    # ``import retriever_kit``, ``serving_kit``, ``live_kit``
    if _p not in sys.path:
        sys.path.insert(0, _p)

from retriever_kit import API_KEYS, KEY_STAR, LiveServer, seed  # noqa: E402

from ragspine.client import Client  # noqa: E402


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The seeded server, with API keys and no reranker (so ``rerank: true`` answers degraded)."""
    with LiveServer(tmp_path_factory.mktemp("retrievers"), api_keys=API_KEYS, reranker="none",
                    ocr_workers=1) as srv:
        with Client(srv.url, api_key=KEY_STAR) as c:
            seed(c)
        yield srv


@pytest.fixture
def rs(live: LiveServer) -> Iterator[Client]:
    """A ragspine client with the all-libraries key: the direct answers the retrievers must match."""
    with Client(live.url, api_key=KEY_STAR) as c:
        yield c
