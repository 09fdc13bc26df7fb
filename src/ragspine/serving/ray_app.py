"""ragspine on Ray Serve: the same REST API, with the models as shared, batched deployments.

    serve run ragspine.serving.ray_app:build_app data_dir=/data page_model=vidore/colqwen2-v1.0
    ragspine serve --engine ray                    # the same, on a local Ray (CPU works)

Deployments (names as in ``serveConfigV2``; code defaults fit a 2-core laptop, the cluster
config overrides resources and autoscaling per deployment):

``Ingress``
    The FastAPI app of :func:`ragspine.serving.app.create_app` - one API definition - wrapped
    with ``@serve.ingress``. Its :class:`~ragspine.engine.Engine` runs the CPU side (PDF parsing,
    RESTRICTED policy, BM25, store access, RRF, citations, the relation graph) and reaches the
    models through proxies with deadlines (:mod:`ragspine.serving.ray_proxies`). Lexical search and store
    access stay here rather than in a deployment of their own: a BM25 query is a sub-millisecond
    store call, so a hop would cost more than it saves, and the store already scales on its own
    (a Qdrant cluster). With the embedded Qdrant Edge store (no ``RAGSPINE_QDRANT_URL``) the
    shard belongs to one process, so the ingress is pinned to one replica; with a Qdrant
    server it autoscales.
``PageEncoder``
    Page images to multivectors; throughput-bound, ``@serve.batch`` packs pages of concurrent
    documents into one model call (``RAGSPINE_RAY_PAGE_BATCH_SIZE`` / ``_WAIT_MS``).
``QueryEncoder``
    The same page model for query text; latency-bound and separate, so a bulk ingest never
    queues in front of a query.
``DenseEncoder``, ``Reranker``
    Only when ``RAGSPINE_DENSE_MODEL`` / ``RAGSPINE_RERANKER`` ask for them.

Each model deployment has ``autoscaling_config``, fractional ``num_cpus`` (and
``RAGSPINE_RAY_MODEL_GPUS``), ``reconfigure(user_config)`` for its batch parameters and a
``check_health`` that runs a tiny forward pass (at most once a minute; the ingress checks the
store). A model that fails to load does not fail the application: its replica stays up, says so
in ``info()``, and the ingress serves the CPU path with ``degraded: true`` and the reason.

Fault drills: ``handle.drill.remote("unhealthy")`` on a model deployment makes the replica that
receives it fail every call and its health checks, as a broken GPU would; Serve then replaces
it, and the new replica is healthy. Tests and game days use it to watch the fallback (degraded
answers, then recovery) without touching the cluster; ``ray.kill`` of a replica works too.
"""

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragspine.config import Settings, load_settings
from ragspine.errors import InvalidRequestError, MissingExtraError, RagspineError
from ragspine.models.modelset import ModelSet, describe
from ragspine.serving.ray_proxies import (
    DenseEncoderProxy,
    DeploymentCaller,
    ModelDeploymentError,
    PageEncoderProxy,
    RerankerProxy,
    fetch_info,
    fetch_info_sync,
)

try:
    from ray import serve
    from ray.serve import Application
except ImportError as _exc:  # the serve extra is optional
    raise MissingExtraError("ray[serve]", "serve", "ragspine on Ray Serve") from _exc

logger = logging.getLogger(__name__)

#: Deployment names, as ``serveConfigV2`` and ``serve status`` show them.
INGRESS, PAGE_ENCODER, QUERY_ENCODER, DENSE_ENCODER, RERANKER = (
    "Ingress", "PageEncoder", "QueryEncoder", "DenseEncoder", "Reranker",
)
DEPLOYMENT_NAMES = (INGRESS, PAGE_ENCODER, QUERY_ENCODER, DENSE_ENCODER, RERANKER)
#: Default Serve application name (``serve run``, ``--engine ray``, the RayService config).
APP_NAME = "ragspine"
#: How long the ingress waits at start for a model deployment's identity (model load included).
MODEL_START_TIMEOUT_S = 600.0
#: A model replica's health check runs a real forward pass at most this often.
HEALTH_FORWARD_EVERY_S = 60.0
#: Settings that hold secrets: never passed through deployment arguments (which Ray keeps in
#: its control store); each replica reads them from its own environment.
SECRET_FIELDS = frozenset({"qdrant_api_key", "api_keys"})

# Resources and autoscaling, fitted to a 2-core laptop: at the minimum replica counts the five
# deployments ask for 1.5 CPUs together (Ray Serve's default of 1 CPU per replica would leave a
# second application pending forever). A cluster overrides these in serveConfigV2.
_INGRESS_CPUS = 0.5
_MODEL_CPUS = 0.25


# -- settings travel as overrides ------------------------------------------------------------


def resolve_settings(overrides: dict[str, Any]) -> Settings:
    """Settings from this process's ``RAGSPINE_*`` environment plus ``overrides``.

    Every replica calls this itself, so secrets come from each pod's environment (a Kubernetes
    Secret) rather than through Ray; the builder calls it first, so a bad setting fails the
    deploy with one clear message.
    """
    try:
        return load_settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "settings"
        raise InvalidRequestError(f"bad setting RAGSPINE_{field.upper()}: {err['msg']}") from None


class AppArgs(BaseModel):
    """Arguments of :func:`build_app` (``serve run ... key=value``, ``serveConfigV2.args``).

    Top-level keys that are Settings fields (``data_dir``, ``page_model``, ...) are settings
    overrides, on top of the ``RAGSPINE_*`` environment of every replica. ``deployments`` takes
    per-deployment ``.options()`` (``num_replicas``, ``autoscaling_config``,
    ``ray_actor_options``, ``user_config``, ``health_check_period_s``, ...), as a Serve config
    file would.
    """

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any] = Field(default_factory=dict)
    deployments: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        settings = dict(data.pop("settings", None) or {})
        for key in [k for k in data if k not in ("deployments",)]:
            if key in Settings.model_fields:
                settings[key] = data.pop(key)
        unknown = [k for k in data if k != "deployments"]
        if unknown:
            raise ValueError(
                f"unknown build_app argument(s) {unknown}: expected Settings fields (e.g. "
                "data_dir, page_model, qdrant_url), 'settings' or 'deployments'"
            )
        data["settings"] = settings
        return data

    @model_validator(mode="after")
    def _known(self) -> "AppArgs":
        bad = [k for k in self.settings if k not in Settings.model_fields]
        if bad:
            raise ValueError(f"unknown setting(s) {bad}; see ragspine.config.Settings")
        secret = sorted(SECRET_FIELDS & set(self.settings))
        if secret:
            raise ValueError(
                f"{secret} hold secrets: set RAGSPINE_{secret[0].upper()} in the environment of "
                "every Ray node (a Kubernetes Secret), not as an application argument"
            )
        bad = [k for k in self.deployments if k not in DEPLOYMENT_NAMES]
        if bad:
            raise ValueError(f"unknown deployment(s) {bad}; known: {', '.join(DEPLOYMENT_NAMES)}")
        return self


# -- model replicas ------------------------------------------------------------------------------


class ModelUserConfig(BaseModel):
    """``user_config`` of a model deployment (``reconfigure`` applies it without a restart)."""

    model_config = ConfigDict(extra="forbid")

    #: ``@serve.batch`` size and wait (ignored by deployments that do not batch).
    max_batch_size: int = Field(default=16, ge=1, le=1024)
    batch_wait_timeout_s: float = Field(default=0.01, ge=0, le=60)


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


def _load_page_model(s: Settings) -> Any:
    from ragspine.models import registry

    return registry.load_page_encoder(
        s.page_model,  # type: ignore[arg-type]
        family=s.page_model_family,
        device=s.device,
        dtype=s.dtype,
        attn_implementation=s.attn_implementation,
        batch_size=s.ray_page_batch_size,
        query_batch_size=s.ray_query_batch_size,
    )


def _probe_image() -> Any:
    from PIL import Image

    return Image.new("RGB", (64, 64), "white")


@serve.deployment(
    name=PAGE_ENCODER,
    ray_actor_options={"num_cpus": _MODEL_CPUS},
    max_ongoing_requests=256,  # pages queue here so that batches fill
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 32},
    health_check_period_s=10,
    health_check_timeout_s=60,
)
class PageEncoderDeployment(_ModelReplica):
    """Page images → :class:`~ragspine.models.base.EncodedPage`, batched across requests."""

    deployment = PAGE_ENCODER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "page", _load_page_model)

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
    ray_actor_options={"num_cpus": _MODEL_CPUS},
    max_ongoing_requests=64,
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 8},
    health_check_period_s=10,
    health_check_timeout_s=30,
)
class QueryEncoderDeployment(_ModelReplica):
    """Query text → ``(n_tokens, dim)`` in the page model's space; latency-bound."""

    deployment = QUERY_ENCODER

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._start(overrides, "page", _load_page_model)

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
    ray_actor_options={"num_cpus": _MODEL_CPUS},
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
    ray_actor_options={"num_cpus": _MODEL_CPUS},
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


# -- the ingress ---------------------------------------------------------------------------------


async def build_model_set(settings: Settings, handles: dict[str, Any]) -> ModelSet:
    """The ingress's ModelSet: proxies to the model deployments that ``handles`` holds.

    A deployment that is missing, failed to load its model or does not answer leaves its slot
    empty with the reason in ``errors`` (the engine then serves the CPU path, degraded).
    """
    ms = ModelSet()
    q_ms, i_ms = settings.ray_query_deadline_ms, settings.ray_ingest_deadline_ms
    q_set, i_set = "RAGSPINE_RAY_QUERY_DEADLINE_MS", "RAGSPINE_RAY_INGEST_DEADLINE_MS"

    if settings.page_model:
        ms.configured["page"] = settings.page_model
        try:
            page_info, query_info = await asyncio.gather(
                fetch_info(handles[PAGE_ENCODER], PAGE_ENCODER, MODEL_START_TIMEOUT_S),
                fetch_info(handles[QUERY_ENCODER], QUERY_ENCODER, MODEL_START_TIMEOUT_S),
            )
            ms.page = PageEncoderProxy(
                DeploymentCaller(handles[PAGE_ENCODER], PAGE_ENCODER, i_ms, i_set),
                DeploymentCaller(handles[QUERY_ENCODER], QUERY_ENCODER, q_ms, q_set),
                page_info, query_info,
            )
        except RagspineError as e:
            ms.errors["page"] = e.detail
            logger.error("page model unavailable: %s", e.detail)

    if settings.dense_model:
        ms.configured["dense"] = settings.dense_model
        try:
            info = await fetch_info(handles[DENSE_ENCODER], DENSE_ENCODER, MODEL_START_TIMEOUT_S)
            ms.dense = DenseEncoderProxy(
                DeploymentCaller(handles[DENSE_ENCODER], DENSE_ENCODER, q_ms, q_set),
                DeploymentCaller(handles[DENSE_ENCODER], DENSE_ENCODER, i_ms, i_set),
                info,
            )
        except RagspineError as e:
            ms.errors["dense"] = e.detail
            logger.error("dense model unavailable: %s", e.detail)

    if settings.reranker != "none":
        kind, model = settings.reranker, settings.reranker_model
        ms.configured["reranker"] = f"{kind}:{model}" if model else kind
        caller = DeploymentCaller(handles[RERANKER], RERANKER, q_ms, q_set)

        def reranker() -> RerankerProxy | None:  # called by ModelSet.reranker(), off the event loop
            info = fetch_info_sync(caller)
            if info.get("model_id") is None and str(info.get("error", "")).startswith("no reranker"):
                return None  # 'auto' found none: not an error, just no reranking
            return RerankerProxy(caller, info)

        ms.reranker_factory = reranker
    return ms


def _engine(settings: Settings, models: ModelSet) -> Any:
    from ragspine.engine import Engine

    return Engine(settings, models=models)


@serve.deployment(
    name=INGRESS,
    ray_actor_options={"num_cpus": _INGRESS_CPUS},
    # Routes are sync FastAPI handlers (a thread each); the engine releases the GIL in the store.
    max_ongoing_requests=64,
    autoscaling_config={"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 16},
    health_check_period_s=10,
    health_check_timeout_s=30,
)
@serve.ingress()
class Ingress:
    """The REST API (:func:`ragspine.serving.app.create_app`) with models behind deployments."""

    async def __init__(
        self,
        overrides: dict[str, Any],
        page: Any = None,
        query: Any = None,
        dense: Any = None,
        reranker: Any = None,
    ) -> None:
        from ragspine.serving.app import create_app

        _replica_env()
        self.settings = resolve_settings(overrides)
        handles = {PAGE_ENCODER: page, QUERY_ENCODER: query, DENSE_ENCODER: dense, RERANKER: reranker}
        self.models = await build_model_set(self.settings, handles)
        self.engine = await asyncio.to_thread(_engine, self.settings, self.models)
        self.api = create_app(self.settings, self.engine)  # (`app` is Serve's own attribute)

    def __serve_build_asgi_app__(self) -> Any:
        return self.api

    async def check_health(self) -> None:
        """Healthy = the store answers (model trouble degrades answers; it is not a reason to
        restart the API)."""
        await asyncio.wait_for(asyncio.to_thread(self.engine.list_libraries), timeout=20)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:
                engine.close()
            except Exception:  # shutting down: log, never raise
                logger.exception("closing the engine failed")


# -- the builder ---------------------------------------------------------------------------------


def deployment_overrides(settings: Settings) -> dict[str, dict[str, Any]]:
    """``.options()`` that follow from settings: batch parameters, GPUs, ingress scaling."""
    gpu = {"num_gpus": settings.ray_model_gpus} if settings.ray_model_gpus else {}
    model_actor = {"num_cpus": _MODEL_CPUS, **gpu}
    page_cfg = ModelUserConfig(max_batch_size=settings.ray_page_batch_size,
                               batch_wait_timeout_s=settings.ray_page_batch_wait_ms / 1000.0)
    query_cfg = ModelUserConfig(max_batch_size=settings.ray_query_batch_size,
                                batch_wait_timeout_s=settings.ray_query_batch_wait_ms / 1000.0)
    out: dict[str, dict[str, Any]] = {
        PAGE_ENCODER: {"user_config": page_cfg.model_dump(), "ray_actor_options": model_actor},
        QUERY_ENCODER: {"user_config": query_cfg.model_dump(), "ray_actor_options": model_actor},
        DENSE_ENCODER: {"user_config": ModelUserConfig().model_dump(), "ray_actor_options": model_actor},
        RERANKER: {"user_config": ModelUserConfig().model_dump(), "ray_actor_options": model_actor},
    }
    if settings.qdrant_url:  # a shared store: the ingress may scale out
        out[INGRESS] = {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4,
                                               "target_ongoing_requests": 16}}
    return out


def _options(deployment: Any, name: str, *layers: dict[str, dict[str, Any]]) -> Any:
    opts: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.get(name, {}).items():
            if key == "ray_actor_options" and isinstance(value, dict):
                opts[key] = {**opts.get(key, {}), **value}
            else:
                opts[key] = value
    if "num_replicas" in opts and "autoscaling_config" not in opts:
        opts["autoscaling_config"] = None  # a fixed count replaces the code's autoscaling
    return deployment.options(**opts) if opts else deployment


def build_app(args: AppArgs) -> Application:
    """The ragspine Serve application (an ``import_path`` target for ``serve run`` and KubeRay).

    Only the deployments the settings need are bound: no page model → no PageEncoder or
    QueryEncoder, and the app serves the CPU path (BM25 + RRF).
    """
    if not isinstance(args, AppArgs):
        args = AppArgs.model_validate(args or {})
    settings = resolve_settings(args.settings)
    if settings.page_model is None and settings.dense_model is None and settings.reranker == "none":
        logger.info("no models configured: the Ray app serves the CPU path only")
    derived = deployment_overrides(settings)
    overrides = dict(args.settings)
    if not settings.data_dir.is_absolute():  # replicas do not share the builder's directory
        overrides["data_dir"] = str(settings.data_dir.resolve())

    def bound(deployment: Any, name: str) -> Any:
        return _options(deployment, name, derived, args.deployments).bind(overrides)

    page = query = dense = reranker = None
    if settings.page_model:
        page = bound(PageEncoderDeployment, PAGE_ENCODER)
        query = bound(QueryEncoderDeployment, QUERY_ENCODER)
    if settings.dense_model:
        dense = bound(DenseEncoderDeployment, DENSE_ENCODER)
    if settings.reranker != "none":
        reranker = bound(RerankerDeployment, RERANKER)
    ingress = _options(Ingress, INGRESS, derived, args.deployments)
    return ingress.bind(overrides, page, query, dense, reranker)


# -- running it locally (``ragspine serve --engine ray``) --------------------------------------


def settings_overrides(settings: Settings) -> dict[str, Any]:
    """The non-secret settings that differ from their defaults, as JSON-safe overrides (the
    data dir made absolute: replicas need not share the caller's working directory)."""
    out: dict[str, Any] = {}
    defaults = Settings.model_construct()
    for name in Settings.model_fields:
        if name in SECRET_FIELDS:
            continue
        value = getattr(settings, name)
        if value != getattr(defaults, name, None):
            out[name] = value
    out["data_dir"] = str(settings.data_dir.resolve())
    return {k: (str(v) if hasattr(v, "__fspath__") else v) for k, v in out.items()}


def init_ray(settings: Settings) -> None:
    """Start (or join, with ``RAGSPINE_RAY_ADDRESS``) Ray in this process, once. ``ray.init``
    installs signal handlers of its own: a caller that wants its own installs them after this."""
    import ray

    if not ray.is_initialized():
        ray.init(address=settings.ray_address, include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=False)


def start_local(settings: Settings, host: str, port: int, *, name: str = APP_NAME,
                deployments: dict[str, dict[str, Any]] | None = None) -> Any:
    """Start (or join, with ``RAGSPINE_RAY_ADDRESS``) Ray, start Serve's HTTP proxy on
    ``host:port`` and deploy the app; returns the ingress handle. Stop with :func:`stop_local`."""
    init_ray(settings)
    serve.start(http_options={"host": host, "port": port})
    app = build_app(AppArgs(settings=settings_overrides(settings), deployments=deployments or {}))
    return serve.run(app, name=name, route_prefix="/")


def stop_local() -> None:
    """Shut Serve and Ray down (both, always: a leftover Serve blocks the next start)."""
    import ray

    if not ray.is_initialized():
        return
    try:
        serve.shutdown()
    finally:
        ray.shutdown()
