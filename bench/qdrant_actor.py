"""One Qdrant for several Ray processes on a machine that cannot run a Qdrant server: the
client's in-process double inside a named Ray actor, and a :class:`~ragspine.store.base.Store`
that forwards every call to it. Ingress replicas get it through Ray's
``worker_process_setup_hook`` (:func:`setup`), which makes ``Engine`` open this store instead
of its own; nothing in ragspine itself knows about it.

The actor runs one call at a time, as a Qdrant shard applies its updates in order; errors come
back as their own types (Ray re-raises a task's exception as an instance of its class)."""

from __future__ import annotations

from typing import Any

import ray

ACTOR = "ragspine-test-qdrant"
NAMESPACE = "ragspine-test"


@ray.remote(num_cpus=0, max_concurrency=1)
class QdrantDouble:
    def __init__(self) -> None:
        from qdrant_client import QdrantClient

        from ragspine.store.server import ServerStore

        self.store = ServerStore(QdrantClient(":memory:"))

    def call(self, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        return getattr(self.store, method)(*args, **kw)


class RemoteStore:
    """The Store protocol over the :class:`QdrantDouble` actor."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kw: Any) -> Any:
            return ray.get(self._actor.call.remote(method, args, kw))

        return call

    def close(self) -> None:  # the actor outlives the replicas; the test kills it
        pass


def connect() -> RemoteStore:
    return RemoteStore(ray.get_actor(ACTOR, namespace=NAMESPACE))


def setup() -> None:
    """Ray worker process setup hook: every Engine made in this process uses the shared double."""
    import ragspine.engine

    ragspine.engine.open_store = lambda settings: connect()  # type: ignore[assignment]
