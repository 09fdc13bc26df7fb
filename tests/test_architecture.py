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


# -- no circle of file imports inside a package ---------------------------------------------------

#: Every package of ragspine: none has a circle any more.
PACKAGES = sorted(p.name for p in (ROOT / "src" / "ragspine").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def file_circles(src: Path, package: str) -> list[list[str]]:
    """Circles of imports between the files of ``src/ragspine/<package>``: any import of another
    file of the package is an arrow, type-only and lazy ones included (a function that takes
    the whole object back through ``TYPE_CHECKING`` is still one object)."""
    import ast

    import networkx as nx

    base = src / package
    assert (base / "__init__.py").is_file(), f"no package {base}"
    mods = {".".join(("ragspine", *f.relative_to(src).with_suffix("").parts)).removesuffix(".__init__"): f
            for f in base.rglob("*.py")}
    g = nx.DiGraph()
    for mod, f in mods.items():
        here = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom):
                m = ".".join(here.split(".")[: len(here.split(".")) - n.level + 1] + [n.module or ""]).strip(".") \
                    if n.level else (n.module or "")
                names = [m, *(f"{m}.{a.name}" for a in n.names)]
            elif isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            else:
                continue
            for name in names:
                other = mods.get(name)
                if other is not None and other != f and other.name != "__init__.py":
                    g.add_edge(f.name if f.parent == base else str(f.relative_to(base)),
                               other.name if other.parent == base else str(other.relative_to(base)))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_file_imports_another_of_its_package_in_a_circle(package: str) -> None:
    assert file_circles(ROOT / "src" / "ragspine", package) == []


def test_the_circle_check_finds_a_type_only_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "ragspine" / "things"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ragspine.things.a import A\n")
    (pkg / "a.py").write_text("from ragspine.things.b import helper\n\nclass A: ...\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n\n"
                              "def helper(a: 'A') -> None: ...\n")
    (pkg / "c.py").write_text("from ragspine.things import b\n")
    assert file_circles(tmp_path / "ragspine", "things") == [["a.py", "b.py"]]
    (pkg / "b.py").write_text("def helper(a: object) -> None: ...\n")
    assert file_circles(tmp_path / "ragspine", "things") == []
