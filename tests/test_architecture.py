"""The layer contracts in pyproject.toml (import-linter), run as `make test` runs them, and proof
that they fire: the same contracts over a copy of the package with one forbidden import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
# No skip when import-linter is missing: it is in the dev extra, and `make test` stops before the
# first test when a dev package does not import (tests/conftest.py, tests/test_extras_guard.py).


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: the copy shadows the editable install of the real package.
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=src.parent, env=env, capture_output=True, text=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "ragspine", src / "ragspine",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    out = _lint(_copy(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ragspine layers KEPT" in out.stdout


@pytest.mark.parametrize(
    ("module", "line", "shown"),
    [
        # the cycle this layering removed: the shared vocabulary reaching up into the query side
        ("scoring/bm25.py", "from ragspine.retrieval import search as _s", "ragspine.scoring.bm25 -> ragspine.retrieval"),
        # siblings on one layer may not import each other
        ("indexing/chunking.py", "import ragspine.retrieval.search", "ragspine.indexing.chunking -> ragspine.retrieval.search"),
        # the store sits below the catalog it serves
        ("store/base.py", "from ragspine.catalog import libraries as _l", "ragspine.store.base -> ragspine.catalog"),
    ],
)
def test_a_forbidden_import_breaks_the_build(tmp_path: Path, module: str, line: str, shown: str) -> None:
    src = _copy(tmp_path)
    target = src / "ragspine" / module
    target.write_text(target.read_text() + f"\n{line}  # added by the test\n")
    out = _lint(src)
    assert out.returncode != 0
    assert "ragspine layers BROKEN" in out.stdout
    assert shown in out.stdout
