"""Fixtures for the REST API tests: in-process apps (TestClient) on fresh data dirs.

``client`` is a fresh, empty app per test; ``seeded`` is one app per module with the small
corpus of :func:`serving_kit.seed_docs` (two libraries, English and Chinese), for the many
tests that only read, or that check a refused request changed nothing.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import serving_kit`` whatever pytest's import mode
    sys.path.insert(0, _HERE)

with warnings.catch_warnings():  # starlette's TestClient warns about httpx vs httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from ragspine.serving.app import create_app  # noqa: E402

from serving_kit import SeedDoc, clean_settings, seed  # noqa: E402


@pytest.fixture
def make_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., TestClient]]:
    """``make_client(**settings)`` → a started TestClient on a fresh data dir; all are shut
    down (lifespan exit: jobs drained, engine closed) at the end of the test."""
    with ExitStack() as stack:

        def make(**kw: Any) -> TestClient:
            kw.setdefault("data_dir", tmp_path_factory.mktemp("data"))
            app = create_app(clean_settings(**kw))
            return stack.enter_context(TestClient(app, raise_server_exceptions=False))

        yield make


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture(scope="module")
def seeded_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, list[SeedDoc]]]:
    app = create_app(clean_settings(data_dir=tmp_path_factory.mktemp("seeded")))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c, seed(c)


@pytest.fixture
def seeded(seeded_app: tuple[TestClient, list[SeedDoc]]) -> TestClient:
    return seeded_app[0]


@pytest.fixture
def seed_list(seeded_app: tuple[TestClient, list[SeedDoc]]) -> list[SeedDoc]:
    return seeded_app[1]
