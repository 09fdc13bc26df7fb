"""The model deployments of the Ray Serve application: page images and queries (one page model,
two deployments so bulk ingest never queues in front of a search), dense passages, reranking.
Each loads its model once, answers ``info()`` with the model's identity (or why it failed to
load), batches with ``@serve.batch`` where that pays, and has a ``check_health`` that runs a
tiny forward pass."""

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from ragspine.config import Settings
from ragspine.errors import InvalidRequestError, MissingExtraError
from ragspine.models.modelset import describe
from ragspine.serving.ray_proxies import ModelDeploymentError
from ragspine.serving.ray_settings import (
    DENSE_ENCODER,
    HEALTH_FORWARD_EVERY_S,
    MODEL_CPUS,
    PAGE_ENCODER,
    QUERY_ENCODER,
    RERANKER,
    ModelUserConfig,
    resolve_settings,
)

try:
    from ray import serve
except ImportError as _exc:  # the serve extra is optional
    raise MissingExtraError("ray[serve]", "serve", "ragspine on Ray Serve") from _exc

logger = logging.getLogger(__name__)


class _ModelReplica:
    """What the model deployments share: load once (never raising), health, user_config."""

    deployment = "model"

    def _start(self, overrides: dict[str, Any], slot: str, load: Callable[[Settings], Any]) -> None:
        _replica_env()
        self.settings = resolve_settings(overrides)
        self.user_config = ModelUserConfig()
        self.error: str | None = None
        self.fault: str | None = None
        self.model: Any = None
        self._checked_at = 0.0
        self._lock = threading.Lock()  # one forward at a time per replica (GPU memory)
        t0 = time.perf_counter()
        try:
            self.model = load(self.settings)
        except Exception as e:  # a model that cannot load leaves the CPU path serving
            self.error = describe(e)
            logger.error("%s: %s model failed to load: %s", self.deployment, slot, self.error)
        else:
            logger.info("%s: loaded %r in %.1f s", self.deployment, self.model, time.perf_counter() - t0)

    def _apply(self, config: dict[str, Any] | None) -> ModelUserConfig:
        self.user_config = ModelUserConfig.model_validate(config or {})
        return self.user_config

    def _require(self) -> Any:
        if self.fault == "unhealthy":
            raise ModelDeploymentError(f"the {self.deployment} deployment is marked unhealthy (fault drill)")
        if self.model is None:
            raise ModelDeploymentError(f"the {self.deployment} model failed to load: {self.error}")
        return self.model

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            try:
                return fn(*args)
            except Exception:
                self._checked_at = 0.0  # a failed call: the next health check runs a forward pass
                raise

    async def info(self) -> dict[str, Any]:
        """Identity of the loaded model, or the load error; and this replica's actor name."""
        import ray

        m = self.model
        return {
            "model_id": getattr(m, "model_id", None),
            "revision": getattr(m, "revision", None),
            "dim": getattr(m, "dim", None),
            "error": self.error,
            "replica": ray.get_runtime_context().get_actor_name(),
        }

    async def drill(self, fault: Literal["unhealthy"] | None) -> str:
        """Fault drill on this replica: ``"unhealthy"`` fails every call and health check from
        now on (Serve replaces the replica); ``None`` clears it. Returns the replica's name."""
        import ray

        if fault not in (None, "unhealthy"):
            raise InvalidRequestError(f"drill: fault must be 'unhealthy' or None, got {fault!r}")
        self.fault = fault
        logger.warning("%s: fault drill set to %r", self.deployment, fault)
        return str(ray.get_runtime_context().get_actor_name())

    async def check_health(self) -> None:
        """Healthy = the drill switch is off and, when a model is loaded, a tiny forward pass
        works (run at most once a minute). A model that failed to load is reported through
        ``info()`` instead: restarting the replica would not fix a bad checkpoint."""
        if self.fault == "unhealthy":
            raise RuntimeError(f"{self.deployment} marked unhealthy (fault drill)")
        if self.model is None:
            return
        now = time.monotonic()
        if now - self._checked_at < HEALTH_FORWARD_EVERY_S:
            return
        await asyncio.to_thread(self._run, self._probe)
        self._checked_at = time.monotonic()

    def _probe(self) -> None:
        raise NotImplementedError


def _replica_env() -> None:
    # Tokenizers' own thread pool fights the replica's threads (and warns after a fork).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_page_model(s: Settings) -> Any:
    from ragspine.models import registry

    return registry.load_page_encoder(
        s.page_model,  # type: ignore[arg-type]
        family=s.page_model_family,
        device=s.device,
        dtype=s.dtype,
        attn_implementation=s.attn_implementation,
        batch_size=s.ray_page_batch_size,
        query_batch_size=s.ray_query_batch_size,
        query_graphs=s.query_graphs,
        prep_workers=s.prep_workers,
    )


def _probe_image() -> Any:
    from PIL import Image

    return Image.new("RGB", (64, 64), "white")


@serve.deployment(
    name=PAGE_ENCODER,
    ray_actor_options={"num_cpus": MODEL_CPUS},
    max_ongoing_requests=256,  # pages queue here so that batches fill
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 32},
    health_check_period_s=10,
    health_check_timeout_s=60,
)
class PageEncoderDeployment(_ModelReplica):
    """Page images → :class:`~ragspine.models.base.EncodedPage`, batched across requests."""

    deployment = PAGE_ENCODER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "page", load_page_model)

    def reconfigure(self, config: dict[str, Any]) -> None:
        cfg = self._apply(config)
        self.encode_page.set_max_batch_size(cfg.max_batch_size)
        self.encode_page.set_batch_wait_timeout_s(cfg.batch_wait_timeout_s)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.05)
    async def encode_page(self, images: list[Any]) -> list[Any]:
        model = self._require()
        return await asyncio.to_thread(self._run, model.encode_pages, images)

    def _probe(self) -> None:
        (page,) = self.model.encode_pages([_probe_image()])
        if page.dim != self.model.dim:
            raise RuntimeError(f"probe page has dim {page.dim}, model says {self.model.dim}")


@serve.deployment(
    name=QUERY_ENCODER,
    ray_actor_options={"num_cpus": MODEL_CPUS},
    max_ongoing_requests=64,
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 8},
    health_check_period_s=10,
    health_check_timeout_s=30,
)
class QueryEncoderDeployment(_ModelReplica):
    """Query text → ``(n_tokens, dim)`` in the page model's space; latency-bound."""

    deployment = QUERY_ENCODER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "page", load_page_model)

    def reconfigure(self, config: dict[str, Any]) -> None:
        cfg = self._apply(config)
        self.encode_query.set_max_batch_size(cfg.max_batch_size)
        self.encode_query.set_batch_wait_timeout_s(cfg.batch_wait_timeout_s)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def encode_query(self, texts: list[str]) -> list[Any]:
        model = self._require()
        return await asyncio.to_thread(self._run, model.encode_queries, texts)

    def _probe(self) -> None:
        (q,) = self.model.encode_queries(["health check"])
        if q.shape[1] != self.model.dim:
            raise RuntimeError(f"probe query has dim {q.shape[1]}, model says {self.model.dim}")


def _load_dense(s: Settings) -> Any:
    from ragspine.models import registry

    return registry.load_dense_encoder(s.dense_model, device=s.device, dtype=s.dtype)  # type: ignore[arg-type]


@serve.deployment(
    name=DENSE_ENCODER,
    ray_actor_options={"num_cpus": MODEL_CPUS},
    max_ongoing_requests=32,
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 4},
    health_check_period_s=10,
    health_check_timeout_s=30,
)
class DenseEncoderDeployment(_ModelReplica):
    """Texts → unit-length dense vectors (queries at search time, passages at ingest)."""

    deployment = DENSE_ENCODER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "dense", _load_dense)

    def reconfigure(self, config: dict[str, Any]) -> None:
        self._apply(config)

    async def encode(self, texts: list[str], kind: str) -> Any:
        model = self._require()
        return await asyncio.to_thread(self._run, model.encode, texts, kind)

    def _probe(self) -> None:
        self.model.encode(["health check"], "query")


def _load_reranker(s: Settings) -> Any:
    from ragspine.models import registry

    return registry.load_reranker(s.reranker, s.reranker_model, device=s.device, dtype=s.dtype)


@serve.deployment(
    name=RERANKER,
    ray_actor_options={"num_cpus": MODEL_CPUS},
    max_ongoing_requests=16,
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2},
    health_check_period_s=10,
    health_check_timeout_s=30,
)
class RerankerDeployment(_ModelReplica):
    """(query, candidate texts) → scores. ``reranker: auto`` may find no model: then ``info``
    says so and the ingress has no reranker (requests asking ``rerank`` are told)."""

    deployment = RERANKER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "reranker", _load_reranker)
        if self.model is None and self.error is None:
            self.error = "no reranker available (reranker 'auto' found none)"

    def reconfigure(self, config: dict[str, Any]) -> None:
        self._apply(config)

    async def score(self, query: str, texts: list[str]) -> list[float]:
        model = self._require()
        return await asyncio.to_thread(self._run, model.score, query, texts)

    def _probe(self) -> None:
        self.model.score("health", ["check"])


