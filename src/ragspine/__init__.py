"""ragspine: multimodal retrieval for chart-heavy PDF reports.

Importing the package imports nothing else: ``ragspine.client`` and ``ragspine.api`` must work
where only pydantic and httpx are installed (``ragspine[client]``), so the server's settings are
loaded on first use of ``ragspine.Settings``.
"""

from typing import Any

__all__ = ["RagspineError", "Settings", "__version__", "load_settings"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Settings", "load_settings"):
        from ragspine import config

        return getattr(config, name)
    if name == "RagspineError":
        from ragspine.errors import RagspineError

        return RagspineError
    raise AttributeError(f"module 'ragspine' has no attribute {name!r}")
