"""Page preparation in worker processes (``RAGSPINE_PREP_WORKERS`` = N >= 2; off by default).

Why: the ingest prepares page batches (the processor's resize and normalise; ColSmol's uint8
tiles) on prep threads inside the ingesting process, beside the ingesting thread's Python work
(parse, BM25 weights, points), and a prep thread that leaves the GIL for C code must win it back
at every return: on the development machine a prep thread prepared x0.02-0.07 of its pages beside
a Python thread busy all the time, x0.58-0.87 beside one busy half the time
(``bench/prep_threads.py --gil``; docs/measured.md, "Page preparation in processes").

Why it is off by default: the hand-over costs more than it saves there. A page prepared in a
process (its image sent to a worker, its tensors back) took 7.5-9.3 ms more than on a thread on
those cores, so one process prepared 21-65 pages/s where a thread prepared 41-182, and beside
a Python thread busy half the time the thread still prepared more (the calling thread needs the
GIL for the hand-over too). A
GPU node's many cores and faster memory may turn that round; ``bench/encode.py --prep-workers``
measures ingest both ways on the first GPU lent (``bench/gpu_checks.sh``).

How: ``workers`` spawned processes, each holding the encoder's
:class:`~ragspine.models.page_prep.PagePrep` (pickled once, rebuilt there); a prep thread hands a
batch of page images to one and waits, without the GIL, for the model inputs and layouts. The
tensors come back through shared memory (torch's reductions for multiprocessing), and the prep
thread pins them. Started at the first batch, not when the model loads: a server that never
ingests never starts them. A pool that breaks (a worker killed) is given up for good and the
prep threads prepare in the process again (:meth:`PrepProcesses.prepare` answers None).
"""

from __future__ import annotations

import logging
import pickle
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from ragspine.spawn_pool import SpawnedPool

if TYPE_CHECKING:
    from PIL.Image import Image

    from ragspine.models.page_prep import Layout, PagePrep

logger = logging.getLogger(__name__)


def prep_workers(setting: int) -> int:
    """Processes that prepare pages (0: the prep threads prepare them in the process).
    ``setting`` is ``RAGSPINE_PREP_WORKERS``: 0 (auto) and 1 the prep threads (measured faster
    wherever measured so far), 2 or more that many processes."""
    return setting if setting >= 2 else 0


#: The worker's PagePrep (key ``prep``), set by :func:`_install` when the worker starts.
_WORKER: dict[str, PagePrep] = {}


def _install(prep_bytes: bytes) -> None:
    import torch

    torch.set_num_threads(1)  # one batch a process; the processes are the parallelism
    _WORKER["prep"] = pickle.loads(prep_bytes)


class _PageError:
    """An exception the page preparation itself raised in a worker, sent back as a result: only
    that is the caller's error; whatever else fails (the pool, the hand-over) breaks the pool."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _prepare(images: list[Image], dtype: Any) -> tuple[Any, list[Layout]] | _PageError:
    try:
        batch, layouts = _WORKER["prep"].prepare(images)
    except Exception as exc:  # noqa: BLE001  (a page the processor refuses: the caller's error)
        return _PageError(exc)
    out = {}
    for key, value in batch.items():  # a plain dict of tensors: torch shares them in memory
        if dtype is not None and getattr(value, "is_floating_point", lambda: False)():
            value = value.to(dtype)  # the model's dtype now: half the bytes to share in bf16
        out[key] = value
    return out, layouts


class PrepProcesses(SpawnedPool):
    """One encoder's prep processes (spawned at the first batch; stopped by :meth:`close`)."""

    what = "page prep processes"
    fallback = "preparing pages in this process"

    def __init__(self, prep: PagePrep, workers: int, dtype: Any = None) -> None:
        if workers < 1:
            raise ValueError(f"prep processes need at least one worker, not {workers}")
        # Pickled now, on the thread that builds the encoder: a worker spawned later from a prep
        # thread would pickle a processor another thread may be tokenising with.
        super().__init__(workers, _install, (pickle.dumps(prep),))
        self.prep = prep
        #: Floating tensors come back in this dtype (the model's, where the batch is pinned and
        #: cast anyway); None keeps the processor's.
        self.dtype = dtype

    def prepare(self, images: list[Image]) -> tuple[dict[str, Any], list[Layout]] | None:
        """One batch of pages as ``PagePrep.prepare`` makes it, made in a worker; None when the
        pool is broken or closed (the caller prepares it itself). A page's own error (an image
        the processor refuses) is raised as it would be in the process; any other failure (a
        worker killed, shared memory full, the pool closed meanwhile) gives the pool up."""
        pool = self._get()
        if pool is None:
            return None
        try:
            made = pool.submit(_prepare, images, self.dtype).result()
        except CancelledError:  # close() cancelled it before a worker took it
            return None
        except RuntimeError as exc:
            if "shutdown" in str(exc):  # submitted as close() shut the pool down
                return None
            self._give_up(exc)
            return None
        except Exception as exc:  # noqa: BLE001  (BrokenProcessPool, OSError: /dev/shm full, ...)
            self._give_up(exc)
            return None
        if isinstance(made, _PageError):
            raise made.exc
        return made

    def _give_up(self, exc: BaseException) -> None:
        logger.warning("page prep processes: %s: %s", type(exc).__name__, exc)
        self._mark_broken()
