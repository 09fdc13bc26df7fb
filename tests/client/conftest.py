"""Fixtures of the client's tests: a live server with API keys (see live_kit)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # ``import live_kit``
    sys.path.insert(0, _HERE)

from live_kit import KEY_A, KEY_STAR, LiveServer  # noqa: E402


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server per module, with API keys: ``KEY_STAR`` for everything, ``KEY_A`` for liba."""
    with LiveServer(tmp_path_factory.mktemp("client"), api_keys=f"{KEY_A}=liba;{KEY_STAR}=*") as srv:
        yield srv
