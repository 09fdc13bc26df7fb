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
from typing import Any

from ragspine.config import Settings
from ragspine.errors import MissingExtraError, RagspineError
from ragspine.models.modelset import ModelSet
from ragspine.serving.ray_models import (
    DenseEncoderDeployment,
    PageEncoderDeployment,
    QueryEncoderDeployment,
    RerankerDeployment,
    _replica_env,
    load_page_model,
)
from ragspine.serving.ray_proxies import (
    DenseEncoderProxy,
    DeploymentCaller,
    PageEncoderProxy,
    RerankerProxy,
    fetch_info,
    fetch_info_sync,
)
from ragspine.serving.ray_settings import (
    APP_NAME,
    DENSE_ENCODER,
    DEPLOYMENT_NAMES,
    INGRESS,
    INGRESS_CPUS,
    MODEL_START_TIMEOUT_S,
    PAGE_ENCODER,
    QUERY_ENCODER,
    RERANKER,
    AppArgs,
    ModelUserConfig,
    deployment_overrides,
    resolve_settings,
    settings_overrides,
)

try:
    from ray import serve
    from ray.serve import Application
except ImportError as _exc:  # the serve extra is optional
    raise MissingExtraError("ray[serve]", "serve", "ragspine on Ray Serve") from _exc

__all__ = [
    "APP_NAME", "DEPLOYMENT_NAMES", "AppArgs", "DenseEncoderDeployment", "Ingress", "ModelUserConfig",
    "PageEncoderDeployment", "QueryEncoderDeployment", "RerankerDeployment", "build_app", "build_model_set",
    "deployment_overrides", "init_ray", "load_page_model", "resolve_settings", "settings_overrides",
    "start_local", "stop_local",
]

logger = logging.getLogger(__name__)


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
    ray_actor_options={"num_cpus": INGRESS_CPUS},
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
        # /mcp without sessions: Serve's proxy may send an agent's next request to another
        # Ingress replica, which would not know its session.
        self.api = create_app(self.settings.model_copy(update={"mcp_stateless": True}),
                              self.engine)  # (`app` is Serve's own attribute)

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
                engine.close(drain=engine.settings.drain_seconds)  # owed OCR: the drain time, then it stops
            except Exception:  # shutting down: log, never raise
                logger.exception("closing the engine failed")


# -- the builder ---------------------------------------------------------------------------------


def _options(deployment: Any, name: str, *layers: dict[str, dict[str, Any]]) -> Any:
    opts: dict[str, Any] = {}
    for layer in layers:
        mine = layer.get(name, {})
        for key, value in mine.items():
            if key == "ray_actor_options" and isinstance(value, dict):
                opts[key] = {**opts.get(key, {}), **value}
            else:
                opts[key] = value
        if "num_replicas" in mine and "autoscaling_config" not in mine:
            # A fixed count replaces the code's (or an earlier layer's) autoscaling.
            opts["autoscaling_config"] = None
        elif "autoscaling_config" in mine and "num_replicas" not in mine:
            opts.pop("num_replicas", None)
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
