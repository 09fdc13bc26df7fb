"""Worker processes started at their first use and given up for good when they break.

The parse processes (:mod:`ragspine.indexing.parse`) and the page prep processes
(:mod:`ragspine.models.prep_processes`) share this: a ``ProcessPoolExecutor`` of spawned workers
(no inherited threads, locks or CUDA state), made only when work comes, so a process that never
needs it never starts it; a pool whose worker died (killed, or a script without the ``__main__``
guard) is shut down and never made again, with one warning, and its users do the work in their
own process from then on; after :meth:`SpawnedPool.close` nothing is sent either.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

logger = logging.getLogger(__name__)


class SpawnedPool:
    """``workers`` spawned processes behind :meth:`_get`, for a subclass to submit to."""

    #: What the pool is and what its users do without it, for the warning when it breaks.
    what = "worker processes"
    fallback = "working in this process"

    def __init__(self, workers: int, initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = ()) -> None:
        self.workers = workers
        self.broken = False
        self._closed = False
        self._initializer, self._initargs = initializer, initargs
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._pool is not None

    def _get(self) -> ProcessPoolExecutor | None:
        """The pool, made at the first call; None once broken or closed."""
        with self._lock:
            if self.broken or self._closed:
                return None
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                                 mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=self._initializer, initargs=self._initargs)
            return self._pool

    def _mark_broken(self) -> None:
        with self._lock:
            if not self.broken:
                logger.warning("%s failed (a worker died, or a script without 'if __name__ == \"__main__\"'); %s",
                               self.what, self.fallback)
                self.broken = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers; nothing is sent to them any more."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
