"""The ``cluster`` fixture: two replicas (Engines) over one Qdrant double, one library."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from cluster.replica_kit import LIB, close, replica
from ragspine.engine import Engine


@pytest.fixture
def cluster(data_dir: Path) -> Iterator[tuple[Engine, Engine]]:
    client = QdrantClient(":memory:")
    a = replica(client, data_dir, writer_lease_seconds=5)
    b = replica(client, data_dir, writer_lease_seconds=5)
    a.create_library(LIB)
    try:
        yield a, b
    finally:
        close(a, b, client=client)
