"""Ctrl-C in the commands that wait on OCR: the engine is closed with no drain time, so owed
OCR stops at its next page instead of running to its end (the OCR workers sit in sessions of
their own and no longer die with the terminal's SIGINT); and a server that cannot start still
exits 3, as ``uvicorn.run`` did."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from serving_kit import ragspine_command

from ragspine.cli import main
from ragspine.config import Settings
from ragspine.engine import Engine


@pytest.fixture
def drains(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The drain time of every Engine.close call, in order."""
    seen: list[float | None] = []
    real = Engine.close

    def close(self: Engine, drain: float | None = None, **kw: Any) -> None:
        seen.append(drain)
        real(self, drain, **kw)

    monkeypatch.setattr(Engine, "close", close)
    return seen


def _interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


def test_ctrl_c_in_ragspine_sync_closes_without_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       drains: list[float | None]) -> None:
    import ragspine.cli.sync as cli_sync

    monkeypatch.setattr(cli_sync, "_round", _interrupt)
    (tmp_path / "folder").mkdir()
    assert main(["--data-dir", str(tmp_path / "data"), "sync", str(tmp_path / "folder"), "--library", "lib"]) == 130
    assert drains[0] == 0.0


def test_ctrl_c_in_ragspine_ocr_resume_closes_without_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             drains: list[float | None]) -> None:
    import pymupdf
    import scans

    import ragspine.cli.ingest as cli_ingest

    doc = pymupdf.open()
    doc.new_page().insert_text((72, 100), "Harbour traffic grew strongly at every terminal.", fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([scans.ScanPage([scans.Line("Container volumes doubled")])])))
    data = tmp_path / "data"
    eng = Engine(Settings(data_dir=data))
    eng.create_library("lib")
    eng.ingest("lib", doc.tobytes(), {"doc_id": "mixed"}, defer_ocr=True)
    eng.close()  # stopped before its second phase: OCR is owed
    drains.clear()
    monkeypatch.setattr(cli_ingest, "_wait_for_ocr", _interrupt)
    assert main(["--data-dir", str(data), "ocr", "--resume", "--quiet"]) == 130
    assert drains[0] == 0.0


def test_ctrl_c_in_an_eval_closes_without_drain_and_removes_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drains: list[float | None]) -> None:
    from ragspine.evaluation.corpus import _workspace

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the eval's scratch folder goes under tmp_path
    with pytest.raises(KeyboardInterrupt):
        with _workspace(Settings(), "interrupted", None) as (engine, _):
            folder = Path(engine.settings.data_dir)
            raise KeyboardInterrupt
    assert drains == [0.0]
    assert not folder.exists()
    assert folder.name.startswith(f"ragspine-eval-{os.getpid()}-")  # the next eval can tell it from a killed one's


def test_an_eval_removes_the_scratch_folders_of_evals_that_were_killed(tmp_path: Path) -> None:
    from ragspine.evaluation.corpus import sweep_scratch

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs: a killed eval's
    dead = tmp_path / f"ragspine-eval-{gone.pid}-k1ll3d"
    (dead / "store").mkdir(parents=True)
    (dead / "store" / "segment").write_bytes(b"x" * 1000)
    live = tmp_path / f"ragspine-eval-{os.getpid()}-running"  # this process: an eval still running
    live.mkdir()
    other = tmp_path / "ragspine-eval-kept"  # not an eval's name with a pid: not ours to judge
    other.mkdir()
    target = tmp_path / "someone-elses"
    target.mkdir()
    (target / "keep").write_text("x")
    planted = tmp_path / f"ragspine-eval-{gone.pid}-link"  # a dead pid's name on a link: never followed
    planted.symlink_to(target, target_is_directory=True)
    (tmp_path / f"ragspine-eval-{gone.pid}-file").write_text("x")  # a file of that name: not a folder
    assert sweep_scratch(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and other.is_dir()
    assert planted.is_symlink() and (target / "keep").exists()
    assert (tmp_path / f"ragspine-eval-{gone.pid}-file").exists()


def test_a_server_that_cannot_take_its_port_exits_3(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
        env.update({"RAGSPINE_DATA_DIR": str(tmp_path / "data"), "RAGSPINE_DENSE_MODEL": "none"})
        r = subprocess.run([*ragspine_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "address already in use" in r.stderr.lower()
