"""Model proxies for the Ray Serve ingress: the model Protocols, answered by deployments.

Under Ray Serve the engine in the ingress gets a :class:`~ragspine.models.modelset.ModelSet`
whose members are these proxies. Each one implements a Protocol of :mod:`ragspine.models.base`
and forwards every call to a model deployment through a ``DeploymentHandle``, with a deadline:

- :class:`PageEncoderProxy` - ``encode_pages`` to the ``PageEncoder`` deployment (one request
  per page, so ``@serve.batch`` can pack pages of several documents into one model call) and
  ``encode_queries`` to the separate ``QueryEncoder`` deployment (latency-bound);
- :class:`DenseEncoderProxy` - ``encode`` to the ``DenseEncoder`` deployment;
- :class:`RerankerProxy` - ``score`` to the ``Reranker`` deployment.

A call that misses its deadline, or that finds the deployment dead, unhealthy or failing,
raises :class:`ModelDeploymentError` (a 503 ``model-unavailable``). The engine turns that into
``degraded: true`` with the reason at search time (the CPU path answers), and into an aborted,
atomic ingest at index time (the previous version stays served).

Nothing here imports Ray: handles are duck-typed (``handle.<method>.remote(...)`` returning a
response with ``result(timeout_s=...)`` and ``cancel()``), so the proxies are unit-tested with
fake handles and no cluster.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ragspine.errors import RagspineError, ServiceUnavailableError
from ragspine.models.base import EncodedPage, TextKind
from ragspine.models.errors import ModelOutputError

if TYPE_CHECKING:
    from PIL.Image import Image

logger = logging.getLogger(__name__)


class ModelDeploymentError(ServiceUnavailableError):
    """A model deployment did not answer in time, is down, or failed the call."""


def _reason(exc: BaseException) -> str:
    """A short, client-safe reason: a ragspine error's own detail, else only the error type
    (Ray's messages carry actor ids, addresses and tracebacks; they go to the log)."""
    cause = getattr(exc, "cause", None)  # RayTaskError wraps the deployment's exception
    for e in (cause, exc):
        detail = getattr(e, "detail", None) if isinstance(e, RagspineError) else None
        if isinstance(detail, str) and detail.strip():
            return detail.strip().splitlines()[0][:200]
    return type(cause if isinstance(cause, BaseException) else exc).__name__


class DeploymentCaller:
    """Calls one deployment with a deadline; every failure becomes :class:`ModelDeploymentError`.

    ``deadline_ms`` bounds one proxy call as a whole (all the requests it fans out);
    ``setting`` names the setting that sets it, for the error message.
    """

    def __init__(self, handle: Any, deployment: str, deadline_ms: int, setting: str) -> None:
        self.handle = handle
        self.deployment = deployment
        self.deadline_s = deadline_ms / 1000.0
        self.setting = setting

    def one(self, method: str, *args: Any) -> Any:
        return self.many(method, [args])[0]

    def many(self, method: str, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send every call at once, then collect the answers in order within one deadline."""
        if not calls:
            return []
        deadline = time.monotonic() + self.deadline_s
        sent: list[Any] = []
        try:
            target = getattr(self.handle, method)
            for args in calls:
                sent.append(target.remote(*args))
            out = []
            for resp in sent:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                out.append(resp.result(timeout_s=left))
            return out
        except (TimeoutError, asyncio.TimeoutError):
            self._cancel(sent)
            raise ModelDeploymentError(
                f"the {self.deployment} deployment did not answer within "
                f"{self.deadline_s * 1000:.0f} ms ({self.setting})"
            ) from None
        except Exception as e:  # dead replica, unhealthy deployment, model failure, ...
            self._cancel(sent)
            logger.warning("%s.%s failed: %r", self.deployment, method, e)
            raise ModelDeploymentError(
                f"the {self.deployment} deployment failed: {_reason(e)}"
            ) from e

    @staticmethod
    def _cancel(sent: list[Any]) -> None:
        for resp in sent:
            try:
                resp.cancel()
            except Exception:  # cancelling is best effort
                pass


async def fetch_info(handle: Any, deployment: str, timeout_s: float) -> dict[str, Any]:
    """A model deployment's ``info()`` (model id, revision, dim, load error), awaited with a
    timeout; for use on the ingress's event loop (its constructor)."""
    try:
        return dict(await asyncio.wait_for(_awaitable(handle.info.remote()), timeout_s))
    except (TimeoutError, asyncio.TimeoutError):
        raise ModelDeploymentError(
            f"the {deployment} deployment did not answer within {timeout_s:.0f} s at start"
        ) from None
    except Exception as e:
        raise ModelDeploymentError(f"the {deployment} deployment failed at start: {_reason(e)}") from e


async def _awaitable(resp: Any) -> Any:
    return await resp


def fetch_info_sync(caller: DeploymentCaller) -> dict[str, Any]:
    """``info()`` from a worker thread (never from an event loop: Ray refuses sync waits there)."""
    return dict(caller.one("info"))


def _identity(info: dict[str, Any], deployment: str) -> tuple[str, str]:
    if info.get("error"):
        raise ModelDeploymentError(f"the {deployment} model failed to load: {info['error']}")
    model_id, revision = info.get("model_id"), info.get("revision")
    if not model_id or revision is None:
        raise ModelDeploymentError(f"the {deployment} deployment has no model loaded")
    return str(model_id), str(revision)


class PageEncoderProxy:
    """:class:`~ragspine.models.base.PageEncoder` over the PageEncoder and QueryEncoder deployments.

    Identity (``model_id``, ``revision``, ``dim``) comes from the deployments when the proxy is
    built; both must serve the same model (one embedding space).
    """

    def __init__(
        self,
        pages: DeploymentCaller,
        queries: DeploymentCaller,
        page_info: dict[str, Any],
        query_info: dict[str, Any],
    ) -> None:
        self.model_id, self.revision = _identity(page_info, pages.deployment)
        q_id, q_rev = _identity(query_info, queries.deployment)
        self.dim = int(page_info["dim"])
        if (q_id, q_rev, int(query_info["dim"])) != (self.model_id, self.revision, self.dim):
            raise ModelDeploymentError(
                f"{pages.deployment} serves {self.model_id}@{self.revision} (dim {self.dim}) but "
                f"{queries.deployment} serves {q_id}@{q_rev} (dim {query_info['dim']}); both must "
                "load the same page model"
            )
        self._pages = pages
        self._queries = queries

    def __repr__(self) -> str:
        return f"PageEncoderProxy({self.model_id!r}, dim={self.dim})"

    def encode_pages(self, images: Sequence[Image]) -> list[EncodedPage]:
        # One request per page: @serve.batch on the deployment packs pages of concurrent
        # documents into full model batches.
        out = self._pages.many("encode_page", [(im,) for im in images])
        for i, page in enumerate(out):
            if not isinstance(page, EncodedPage) or page.dim != self.dim:
                raise ModelOutputError(
                    f"{self.model_id}: page {i} came back as {type(page).__name__} "
                    f"(dim {getattr(page, 'dim', None)}); expected an EncodedPage of dim {self.dim}"
                )
        return out

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = self._queries.many("encode_query", [(t,) for t in texts])
        return [_check_rows(q, self.dim, self.model_id, i) for i, q in enumerate(out)]


class DenseEncoderProxy:
    """:class:`~ragspine.models.base.DenseTextEncoder` over the DenseEncoder deployment.

    Query encodings use the query deadline, document encodings (ingest) the ingest deadline.
    """

    def __init__(self, query: DeploymentCaller, documents: DeploymentCaller, info: dict[str, Any]) -> None:
        self.model_id, self.revision = _identity(info, query.deployment)
        self.dim = int(info["dim"])
        self._query = query
        self._documents = documents

    def __repr__(self) -> str:
        return f"DenseEncoderProxy({self.model_id!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str], kind: TextKind = "query") -> np.ndarray:
        caller = self._query if kind == "query" else self._documents
        arr = np.asarray(caller.one("encode", list(texts), kind), dtype=np.float32)  # (n, dim)
        if arr.shape != (len(texts), self.dim):
            raise ModelOutputError(
                f"{self.model_id}: encode gave shape {arr.shape} for {len(texts)} texts; "
                f"expected ({len(texts)}, {self.dim})"
            )
        return arr


class RerankerProxy:
    """:class:`~ragspine.models.base.Reranker` over the Reranker deployment."""

    def __init__(self, caller: DeploymentCaller, info: dict[str, Any]) -> None:
        self.model_id, self.revision = _identity(info, caller.deployment)
        self._caller = caller

    def __repr__(self) -> str:
        return f"RerankerProxy({self.model_id!r})"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        scores = [float(s) for s in self._caller.one("score", query, list(texts))]
        if len(scores) != len(texts):
            raise ModelOutputError(
                f"{self.model_id}: {len(scores)} rerank scores for {len(texts)} candidates"
            )
        return scores


def _check_rows(q: Any, dim: int, model_id: str, i: int) -> np.ndarray:
    arr = np.asarray(q, dtype=np.float32)  # (n_tokens, dim)
    if arr.ndim != 2 or arr.shape[1] != dim or arr.shape[0] == 0 or not np.isfinite(arr).all():
        raise ModelOutputError(
            f"{model_id}: query {i} came back with shape {arr.shape}; expected (n_tokens, {dim}) "
            "finite rows"
        )
    return arr
