"""The models one engine uses: page encoder, dense text encoder and reranker, each optional.

The engine never loads a model itself; it is handed a :class:`ModelSet`. Locally that is
:meth:`ModelSet.from_settings` (models in this process); under Ray Serve it holds proxies that
call the model deployments with a deadline (:mod:`ragspine.serving.ray_app`). Anything that
implements the Protocols of :mod:`ragspine.models.base` fits.

A model that fails to load does not stop the server: its slot stays empty, the reason is kept
in :attr:`ModelSet.errors`, searches answer from the CPU path marked ``degraded`` with that
reason, and ingest into a library whose vectors need the model is refused (never half-indexed).
The reranker is loaded on first use: it serves only searches that ask ``rerank: true``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragspine.models.base import DenseTextEncoder, PageEncoder, Reranker

if TYPE_CHECKING:
    from ragspine.config import Settings

logger = logging.getLogger(__name__)

#: After a failed reranker load, wait this long before trying again (a model server may recover).
RERANKER_RETRY_S = 60.0


def describe(exc: BaseException) -> str:
    """One line for ``degraded_reasons`` and ``/readyz``: the error's type and first line."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}"[:300] if msg else type(exc).__name__


@dataclass
class ModelSet:
    """Page, dense and rerank models; each None when not configured or not loadable."""

    page: PageEncoder | None = None
    dense: DenseTextEncoder | None = None
    #: Builds the reranker on first use (None: no reranker configured).
    reranker_factory: Callable[[], Reranker | None] | None = None
    #: What was configured, by slot (``page``, ``dense``, ``reranker``), for status and errors.
    configured: dict[str, str] = field(default_factory=dict)
    #: Why a configured model is missing, by slot.
    errors: dict[str, str] = field(default_factory=dict)
    _reranker: Reranker | None = field(default=None, init=False, repr=False)
    _reranker_tried: float | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def none(cls) -> "ModelSet":
        """No models: the CPU path only."""
        return cls()

    @classmethod
    def from_settings(cls, settings: "Settings") -> "ModelSet":
        """Load the models ``settings`` name (page and dense now, the reranker on first use).

        A configured model that cannot load is logged and recorded in :attr:`errors`; the
        engine then runs without it (see the module docstring).
        """
        from ragspine.models import registry

        ms = cls()
        common: dict[str, Any] = {"device": settings.device, "dtype": settings.dtype}
        if settings.page_model:
            ms.configured["page"] = settings.page_model
            ms.page = ms._load("page", lambda: registry.load_page_encoder(
                settings.page_model,
                family=settings.page_model_family,
                attn_implementation=settings.attn_implementation,
                batch_size=settings.page_batch_size,
                query_graphs=settings.query_graphs,
                prep_workers=settings.prep_workers,
                **common,
            ))
        if settings.dense_model:
            ms.configured["dense"] = settings.dense_model
            ms.dense = ms._load("dense", lambda: registry.load_dense_encoder(settings.dense_model, **common))
        if settings.reranker != "none":
            kind, model = settings.reranker, settings.reranker_model
            ms.configured["reranker"] = f"{kind}:{model}" if model else kind
            ms.reranker_factory = lambda: registry.load_reranker(kind, model, **common)
        return ms

    def _load(self, slot: str, build: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            model = build()
        except Exception as e:  # any failure: the server still answers from the CPU path
            self.errors[slot] = describe(e)
            logger.error("%s model %s failed to load: %s", slot, self.configured.get(slot), self.errors[slot])
            return None
        logger.info("%s model %r loaded in %.1f s", slot, model, time.perf_counter() - t0)
        return model

    def reranker(self) -> Reranker | None:
        """The reranker, loading it on first call; None when none is configured or it failed
        to load (the reason is in ``errors['reranker']``; a load is retried after a minute)."""
        if self._reranker is not None or self.reranker_factory is None:
            return self._reranker
        with self._lock:
            now = time.monotonic()
            if self._reranker is None and (
                self._reranker_tried is None or now - self._reranker_tried > RERANKER_RETRY_S
            ):
                self._reranker_tried = now
                try:
                    self._reranker = self.reranker_factory()
                except Exception as e:
                    self.errors["reranker"] = describe(e)
                    logger.error("reranker %s failed to load: %s", self.configured.get("reranker"), self.errors["reranker"])
                else:
                    self.errors.pop("reranker", None)
                    if self._reranker is None:
                        self.errors["reranker"] = "no reranker available (reranker 'auto' found none)"
        return self._reranker

    def serve_queries(self, max_batch: int) -> None:
        """Ready the query encoders for a server: concurrent queries of each encoder batched into
        one call (``max_batch`` > 1, :mod:`ragspine.models.batching`), and one query encoded now,
        so that the first user's query does not pay for loading kernels and tokenizers. A model
        whose warm-up fails is left as it is (its failure shows at the first query, degraded)."""
        from ragspine.models.batching import BatchedDenseEncoder, BatchedPageEncoder

        if max_batch > 1:
            if self.page is not None and not isinstance(self.page, BatchedPageEncoder):
                self.page = BatchedPageEncoder(self.page, max_batch)  # type: ignore[assignment]
            if self.dense is not None and not isinstance(self.dense, BatchedDenseEncoder):
                self.dense = BatchedDenseEncoder(self.dense, max_batch)  # type: ignore[assignment]
        for slot, warm in (("page", lambda m: m.encode_queries(["warm up"])),
                           ("dense", lambda m: m.encode(["warm up"], kind="query"))):
            model = getattr(self, slot)
            if model is None:
                continue
            t0 = time.perf_counter()
            try:
                warm(model)
            except Exception as e:  # noqa: BLE001  (the search path reports it, degraded)
                logger.warning("%s model: warm-up query failed: %s", slot, describe(e))
            else:
                logger.info("%s model warmed up in %.0f ms", slot, 1000 * (time.perf_counter() - t0))

    def close(self) -> None:
        """Stop what the models run beside themselves (a page model's prep processes)."""
        close = getattr(self.page, "close", None)
        if callable(close):
            close()

    def status(self) -> dict[str, str]:
        """``slot → "ok: <model>"`` (a page model's with how it encodes queries),
        ``"error: <why>"``, ``"not loaded yet"`` or ``"off"``."""
        out: dict[str, str] = {}
        for slot, model in (("page", self.page), ("dense", self.dense)):
            if model is not None:
                out[slot] = f"ok: {model.model_id}"
                path = getattr(model, "query_path", None)  # a page model's: CUDA graphs or why not
                if isinstance(path, str):
                    out[slot] += f"; queries: {path}"
            elif slot in self.errors:
                out[slot] = f"error: {self.errors[slot]}"
            else:
                out[slot] = "off"
        if self._reranker is not None:
            out["reranker"] = f"ok: {self._reranker.model_id}"
        elif "reranker" in self.errors:
            out["reranker"] = f"error: {self.errors['reranker']}"
        elif self.reranker_factory is not None:
            out["reranker"] = "not loaded yet (loads on the first search with rerank: true)"
        else:
            out["reranker"] = "off"
        return out
