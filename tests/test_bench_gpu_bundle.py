"""bench/gpu_bundle.py and bench/gpu_checks.sh: what a device lease carries, and the one call that
prints the GPU table inside its time budget."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench_kit import BENCH, load_bench
from pdfs import NOT_A_PDF, encrypted_pdf, make_pdf

gb = load_bench("gpu_bundle")
ROOT = BENCH.parent


def test_a_wheels_project_is_read_from_its_file_name() -> None:
    whl = Path("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
    assert gb.wheel_project(whl) == "pydantic-core"
    assert gb.canonical("Qdrant_Edge.Py") == "qdrant-edge-py"


def test_only_the_wheels_of_projects_not_installed_are_to_install(tmp_path: Path) -> None:
    (tmp_path / "pydantic-2.0.0-py3-none-any.whl").write_bytes(b"")  # installed here
    absent = tmp_path / "no_such_project_xyz-1.0-py3-none-any.whl"
    absent.write_bytes(b"")
    assert gb.missing(tmp_path) == [absent]


def test_the_closure_carries_the_server_packages_and_leaves_the_images_and_ocrs() -> None:
    found = gb.closure([("ragspine", ("server",)), ("colpali-engine", ())])
    # Direct needs of the server extra, and needs of needs (pydantic's core, colpali's peft).
    for name in ("pydantic", "pydantic-core", "pymupdf", "qdrant-edge-py", "fastapi", "mcp", "peft",
                 "rapidocr-onnxruntime", "openvino", "wordninja"):
        assert name in found, name
    image = gb.image_packages()
    assert {"numpy", "torch", "transformers", "peft"} <= image
    carry = gb.to_carry(found, image, ocr=False)
    assert {"pydantic", "pydantic-core", "pymupdf", "qdrant-edge-py", "fastapi", "mcp", "wordninja"} <= set(carry)
    assert not {"numpy", "peft", "ragspine", "openvino", "rapidocr-onnxruntime", "onnx2torch"} & set(carry)
    assert carry["pydantic"] == found["pydantic"]  # the version the tests ran with
    with_ocr = gb.to_carry(found, image, ocr=True)
    assert "rapidocr-onnxruntime" in with_ocr and "openvino" not in with_ocr


def test_the_image_list_skips_comments(tmp_path: Path) -> None:
    f = tmp_path / "list.txt"
    f.write_text("# a header\nTorch\n\nopencv_python_headless  # cv2\n")
    assert gb.image_packages(f) == {"torch", "opencv-python-headless"}


def test_the_page_sample_keeps_the_first_pages_within_its_budget_and_names_what_it_left(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.pdf").write_bytes(make_pdf([f"page {i} of a" for i in range(5)]))
    (src / "b.pdf").write_bytes(make_pdf(["one of b", "two of b"]))
    (src / "c.pdf").write_bytes(NOT_A_PDF)
    (src / "d.pdf").write_bytes(encrypted_pdf(tmp_path))
    files, pages, skipped = gb.sample_pdfs(src, tmp_path / "out", 3, 10**7)
    assert (files, pages) == (2, 3 + 2)
    assert [s.split(" ")[0] for s in skipped] == ["c.pdf", "d.pdf"]
    assert "encrypted" in skipped[1]
    import pymupdf

    with pymupdf.open(tmp_path / "out" / "a.pdf") as doc:
        assert [p.get_text().strip() for p in doc] == ["page 0 of a", "page 1 of a", "page 2 of a"]
    # A budget below a.pdf's sample: a is left out, b still fits.
    a_size = (tmp_path / "out" / "a.pdf").stat().st_size
    b_size = (tmp_path / "out" / "b.pdf").stat().st_size
    files, pages, skipped = gb.sample_pdfs(src, tmp_path / "out2", 3, max(b_size, a_size - 1))
    assert a_size - 1 >= b_size  # the budget check above is the one that fires
    assert (files, pages) == (1, 2)
    assert skipped[0] == "a.pdf (over the budget)"


def fake_python(tmp_path: Path) -> Path:
    """A PYTHON for gpu_checks.sh: the table and the bundle's wheel list run for real (the table
    fails with FAKE_TABLE_FAILS set); every other command (the benchmarks, pytest, pip) is written
    to calls.txt and takes one second, pip's install ending with FAKE_PIP_RC."""
    fake = tmp_path / "python"
    fake.write_text(f"""#!/usr/bin/env bash
[ -n "${{FAKE_TABLE_FAILS:-}}" ] && [ "$1" = bench/gpu_table.py ] && exit 1
case "$1" in
  bench/gpu_table.py|bench/gpu_bundle.py) exec {sys.executable} "$@" ;;
esac
echo "$*" >> {tmp_path}/calls.txt
sleep 1
case "$*" in *"pip install"*) exit ${{FAKE_PIP_RC:-0}} ;; esac
exit 0
""")
    fake.chmod(0o755)
    return fake


def run_checks(tmp_path: Path, rc: int = 0, **env: str) -> tuple[str, str]:
    out = tmp_path / "out"
    r = subprocess.run(["bash", "bench/gpu_checks.sh", str(out)], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHON": str(fake_python(tmp_path)), "TMPDIR": str(tmp_path),
                            "GPU_BUNDLE": str(tmp_path / "bundle"), **env}, timeout=120)
    assert r.returncode == rc, r.stderr
    calls = tmp_path / "calls.txt"
    return r.stdout, calls.read_text() if calls.exists() else ""


def test_the_checks_stop_starting_steps_when_the_budget_is_spent(tmp_path: Path) -> None:
    # The env step makes three one-second calls: with a 6 s budget under 5 s are left after it.
    stdout, calls = run_checks(tmp_path, BUDGET_S="6", MIN_STEP_S="5")
    assert re.search(r"== env \(limit [56]s\)", stdout)  # SECONDS may tick before the first step
    for name in ("encode_colpali_colqwen2", "encode_colqwen2_5_colidefics3", "pytest_gpu", "serve_queries",
                 "maxsim_device", "encode_colpali_prep_processes"):
        assert re.search(rf"== {name}: skipped, [0-4]s of BUDGET_S=6 left", stdout), name
    assert "bench/encode.py" not in calls
    # OUT_DIR holds the two files a device call brings back, the table judging nothing as met.
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["gpu_checks.tar.gz", "table.md"]
    assert "| ColPali Engine.ingest >= 50 pages/s | - | not measured |" in (out / "table.md").read_text()
    with tarfile.open(out / "gpu_checks.tar.gz") as tar:
        assert "./env.log" in tar.getnames()


def test_each_step_gets_at_most_what_is_left_and_a_zero_limit_skips_it(tmp_path: Path) -> None:
    stdout, calls = run_checks(tmp_path, BUDGET_S="40", MIN_STEP_S="5", ENCODE_S="0")
    assert "== encode_colpali_colqwen2: skipped (limit 0)" in stdout
    # The next step's own limit is 150 s; the budget leaves at most 40 - 3 (the env step).
    limit = int(re.search(r"== encode_colqwen2_5_colidefics3 \(limit (\d+)s\)", stdout).group(1))
    assert limit <= 37
    assert "--arch colqwen2_5,colidefics3" in calls and "--arch colpali,colqwen2" not in calls


def test_the_bundles_wheels_are_installed_only_where_the_machine_lacks_them(tmp_path: Path) -> None:
    wheels = tmp_path / "bundle" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "pydantic-2.0.0-py3-none-any.whl").write_bytes(b"")
    stdout, calls = run_checks(tmp_path, BUDGET_S="1", MIN_STEP_S="5")
    assert "pip install" not in calls and "== install" not in stdout  # all there: nothing to install
    (wheels / "no_such_project_xyz-1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "calls.txt").unlink(missing_ok=True)
    stdout, calls = run_checks(tmp_path, BUDGET_S="30", MIN_STEP_S="5", ENCODE_S="0", ENCODE2_S="0",
                               PYTEST_S="0", SERVE_S="0", MAXSIM_S="0", PREP_S="0")
    install = [c for c in calls.splitlines() if "pip install" in c]
    assert len(install) == 1 and install[0].endswith("--target /tmp/ragspine-site " + str(
        wheels / "no_such_project_xyz-1.0-py3-none-any.whl"))
    assert "== install: rc=0" in stdout


def test_missing_needs_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        gb.main(["missing"])
    assert exc.value.code == 2 and "dir" in capsys.readouterr().err


class FakePip:
    """subprocess.run for ``download``: ``pip download`` lacks a wheel for ``nowheel`` until it
    is built, and ``pip wheel`` writes the wheel file named ``builds``."""

    def __init__(self, dest: Path, builds: str) -> None:
        self.dest, self.builds, self.calls = dest, builds, []

    def __call__(self, cmd: list[str], **_: object) -> subprocess.CompletedProcess:
        self.calls.append(cmd[3])
        if cmd[3] == "wheel":
            (self.dest / self.builds).write_bytes(b"")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if "wordninja==2.0.0" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for wordninja==2.0.0")
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_a_project_without_a_wheel_is_built_here_when_it_is_pure_python(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePip(tmp_path, "wordninja-2.0.0-py3-none-any.whl")
    monkeypatch.setattr(gb.subprocess, "run", fake)
    assert gb.download({"pydantic": "2.14.4", "wordninja": "2.0.0"}, tmp_path, "3.12") == ["wordninja"]
    assert fake.calls == ["download", "wheel", "download"]


def test_a_project_that_builds_only_for_this_machine_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gb.subprocess, "run", FakePip(tmp_path, "wordninja-2.0.0-cp311-cp311-linux_x86_64.whl"))
    with pytest.raises(SystemExit, match="wordninja==2.0.0 has no wheel for CPython 3.12"):
        gb.download({"wordninja": "2.0.0"}, tmp_path, "3.12")
    assert not list(tmp_path.glob("*.whl"))  # the wrong wheel does not stay to travel


def test_any_other_pip_failure_stops_with_pips_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gb.subprocess, "run", lambda cmd, **_: subprocess.CompletedProcess(
        cmd, 1, "", "WARNING: retrying\nERROR: Could not install: no space left on device"))
    with pytest.raises(SystemExit, match="pip download failed: .*no space left on device"):
        gb.download({"pydantic": "2.14.4"}, tmp_path, "3.12")


def test_a_project_needed_but_not_installed_here_is_named() -> None:
    with pytest.raises(SystemExit, match="no-such-project-xyz is needed but not installed here"):
        gb.closure([("no_such_project_xyz", ())])


@pytest.fixture()
def offline_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """main() with one 1 MiB wheel in place of pip's downloads and an empty working tree."""

    def download(pins: dict[str, str], dest: Path, python: str) -> list[str]:
        dest.mkdir(parents=True)
        (dest / "pydantic-2.14.4-py3-none-any.whl").write_bytes(b"\0" * 2**20)
        return []

    monkeypatch.setattr(gb, "download", download)
    monkeypatch.setattr(gb, "tree_bytes", lambda root=None: 0)
    data = tmp_path / "data"
    (data / "documents").mkdir(parents=True)
    (data / "documents" / "a.pdf").write_bytes(make_pdf(["first page", "second page"]))
    (data / "queries.jsonl").write_text('{"text": "first"}\n')
    return tmp_path


def test_the_bundle_holds_the_wheels_the_sample_and_the_questions(offline_bundle: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = offline_bundle / ".gpu"
    assert gb.main(["--out", str(out), "--data", str(offline_bundle / "data"), "--limit-mib", "2",
                    "--margin-mib", "0"]) == 0
    assert (out / "data" / "queries.jsonl").read_text() == '{"text": "first"}\n'
    assert [p.name for p in (out / "data" / "documents").iterdir()] == ["a.pdf"]
    text = capsys.readouterr().out
    assert "2 pages from 1 PDFs" in text and "carry ['.gpu']" in text


def test_wheels_over_the_limit_stop_the_bundle(offline_bundle: Path) -> None:
    with pytest.raises(SystemExit, match="the wheels and the working tree already pass 0.5 MiB"):
        gb.main(["--out", str(offline_bundle / ".gpu"), "--data", str(offline_bundle / "data"),
                 "--limit-mib", "0.5", "--margin-mib", "0"])


def test_no_page_that_fits_stops_the_bundle(offline_bundle: Path) -> None:
    # 1 MiB of wheel, 18 bytes of questions: 100 bytes are left, less than any PDF.
    limit = str((2**20 + 18 + 100) / 2**20)
    with pytest.raises(SystemExit, match="no PDF page fits the 0.0 MiB left under the limit"):
        gb.main(["--out", str(offline_bundle / ".gpu"), "--data", str(offline_bundle / "data"),
                 "--limit-mib", limit, "--margin-mib", "0"])


def test_wheels_that_do_not_install_stop_the_checks(tmp_path: Path) -> None:
    wheels = tmp_path / "bundle" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "no_such_project_xyz-1.0-py3-none-any.whl").write_bytes(b"")
    stdout, calls = run_checks(tmp_path, rc=1, BUDGET_S="60", MIN_STEP_S="5", FAKE_PIP_RC="3")
    assert "== the bundle's wheels did not install (rc=3): stopping" in stdout
    assert "bench/encode.py" not in calls and "== env" not in stdout
    assert (tmp_path / "out" / "gpu_checks.tar.gz").exists()  # the install's log comes back


def test_a_table_that_fails_says_so_in_its_place(tmp_path: Path) -> None:
    run_checks(tmp_path, BUDGET_S="1", MIN_STEP_S="5", FAKE_TABLE_FAILS="1")
    assert (tmp_path / "out" / "table.md").read_text() == (
        "bench/gpu_table.py failed: see gpu_table.err in gpu_checks.tar.gz\n")


def test_a_data_folder_without_pdfs_is_named(offline_bundle: Path) -> None:
    empty = offline_bundle / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match=f"no PDF under {empty}"):
        gb.main(["--out", str(offline_bundle / ".gpu"), "--data", str(empty), "--limit-mib", "2",
                 "--margin-mib", "0"])


def test_no_time_left_to_install_stops_the_checks_too(tmp_path: Path) -> None:
    wheels = tmp_path / "bundle" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "no_such_project_xyz-1.0-py3-none-any.whl").write_bytes(b"")
    stdout, calls = run_checks(tmp_path, rc=1, BUDGET_S="1", MIN_STEP_S="5")
    assert "== install: skipped" in stdout
    assert "did not install (rc=skipped): stopping" in stdout and calls == ""
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_checks.tar.gz", "table.md"]
