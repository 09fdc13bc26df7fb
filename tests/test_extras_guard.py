"""`make test` stops when an extra does not import (RAGSPINE_TEST_REQUIRE_EXTRAS=1), instead of
skipping the model, Ray and architecture tests. Shown here by running pytest from the project
root, as `make test` does, with a package that is present but broken on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two pytest processes that import torch and Ray

ROOT = Path(__file__).resolve().parents[1]


def _pytest(tmp_path: Path, require: bool) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "shadow" / "colpali_engine"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('simulated broken install')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env["PYTHONPATH"] = str(fake.parent)  # shadows the installed colpali_engine
    if require:
        env["RAGSPINE_TEST_REQUIRE_EXTRAS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", "tests/scoring/test_fusion.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def test_a_broken_extra_stops_the_run(tmp_path: Path) -> None:
    out = _pytest(tmp_path, require=True)
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's exit code for a usage error
    text = out.stdout + out.stderr
    assert "RAGSPINE_TEST_REQUIRE_EXTRAS=1 but these do not import" in text
    assert "colpali_engine (gpu): ImportError: simulated broken install" in text


def test_without_the_setting_the_run_goes_on(tmp_path: Path) -> None:
    out = _pytest(tmp_path, require=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tests collected" in out.stdout
