"""ragspine: multimodal retrieval for chart-heavy PDF reports."""

from ragspine.config import Settings, load_settings
from ragspine.errors import RagspineError

__all__ = ["Settings", "load_settings", "RagspineError", "__version__"]
__version__ = "0.1.0"
