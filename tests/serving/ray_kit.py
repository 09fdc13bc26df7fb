"""Helpers for the Ray tests: a local Ray + Serve that is always shut down, tiny models, polling.

Ray Serve on a 2-core machine: the app's deployments ask for fractional CPUs (see
``ragspine.serving.ray_app``), Ray is started with ``num_cpus=2`` like the laptop it must fit,
and every fixture ends with ``serve.shutdown()`` and ``ray.shutdown()`` whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Replicas are separate processes on 2 cores: one torch thread each keeps them from fighting.
os.environ.setdefault("OMP_NUM_THREADS", "1")

#: Every Ray test gives up after this long waiting for a state change (recovery, startup).
WAIT_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float = WAIT_S, every: float = 0.5, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a replica restarting may refuse a call: keep polling
            last = e
        else:
            if last:
                return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what or check!r}; last: {last!r}")


def tiny_models(root: Path, *kinds: str) -> dict[str, Path]:
    """Build the tiny random-weight models ``kinds`` (offline, seconds) under ``root``."""
    from ragspine.models import testing

    return {k: testing.build(k, root / k) for k in kinds}


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    """A fresh local Ray for one test module; always shut down (Serve first)."""
    import ray

    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield
    finally:
        try:
            from ray import serve

            serve.shutdown()
        finally:
            ray.shutdown()
