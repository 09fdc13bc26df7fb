"""Vector storage: the :class:`Store` Protocol and the one factory that picks a backend."""

from __future__ import annotations

from ragspine.config import Settings
from ragspine.store.base import CollectionSpec, DenseField, Hit, PointData, Record, Store, Where

__all__ = ["CollectionSpec", "DenseField", "Hit", "PointData", "Record", "Store", "Where", "open_store"]


def open_store(settings: Settings) -> Store:
    """Qdrant server when ``RAGSPINE_QDRANT_URL`` is set, else embedded Qdrant Edge."""
    if settings.qdrant_url:
        from ragspine.store.server import ServerStore

        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return ServerStore.from_url(settings.qdrant_url, api_key=key)
    from ragspine.store.edge import EdgeStore

    return EdgeStore(settings.data_dir, search_threads=settings.search_threads, exact_device=settings.exact_device)
