"""The retrievers' imports: a missing framework is an ImportError that names the extra to
install, importing them loads no server package, and the import-linter contract that keeps it
so fires when a server package is imported."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
CONTRACT = "the client and the retrievers need no server"


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("ragspine.integrations.langchain", "langchain_core", "langchain"),
    ("ragspine.integrations.llamaindex", "llama_index", "llamaindex"),
])
def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str, framework: str,
                                             extra: str) -> None:
    # None in sys.modules makes an import of that name fail, as when it is not installed.
    for name in [m for m in sys.modules if m == framework or m.startswith(f"{framework}.")] + [framework]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'ragspine\[{extra}\]'") as e:
        importlib.import_module(module)
    assert isinstance(e.value.__cause__, ImportError) and framework in str(e.value.__cause__)


def test_the_retrievers_load_no_server_package() -> None:
    code = ("import sys, ragspine.integrations.langchain, ragspine.integrations.llamaindex\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m == 'ragspine' or m.startswith('ragspine.'))))\n"
            "print('\\n'.join(m for m in ('fastapi', 'uvicorn', 'qdrant_edge', 'qdrant_client', 'pymupdf', "
            "'pydantic_settings') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    allowed = ("ragspine.api", "ragspine.client", "ragspine.integrations")
    assert [m for m in loaded if m not in ("ragspine", "ragspine.errors") and not m.startswith(allowed)] == []
    assert {"ragspine.integrations.langchain", "ragspine.integrations.llamaindex", "ragspine.client"} <= set(loaded)


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}  # the copy shadows the editable install
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=src.parent, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("module", "line", "shown"), [
    ("integrations/_common.py", "from ragspine.engine import Engine",
     "ragspine.integrations._common -> ragspine.engine"),
    ("client/_common.py", "from ragspine import config", "ragspine.client._common -> ragspine.config"),
])
def test_the_contract_fires_on_a_server_import(tmp_path: Path, module: str, line: str, shown: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "ragspine", src / "ragspine", ignore=shutil.ignore_patterns("__pycache__"))
    clean = _lint(src)
    assert clean.returncode == 0 and f"{CONTRACT} KEPT" in clean.stdout, clean.stdout + clean.stderr
    target = src / "ragspine" / module
    target.write_text(target.read_text() + f"\n{line}  # added by the test\n")
    out = _lint(src)
    assert out.returncode != 0 and f"{CONTRACT} BROKEN" in out.stdout, out.stdout + out.stderr
    assert shown in out.stdout
