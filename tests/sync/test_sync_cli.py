"""``ragspine sync`` on the command line: its lines, its summary, its exit status, and bad
arguments as one line on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pdfs
import pytest
from sync_kit import A_ID, B_ID, LIB, TOP_ID, write_pdf

from ragspine.cli import main
from ragspine.config import Settings
from ragspine.engine import Engine


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def documents(data: Path) -> dict[str, Any]:
    eng = Engine(Settings(data_dir=data))
    try:
        return {d["doc_id"]: d for d in eng.documents(LIB)}
    finally:
        eng.close()


def test_sync_prints_each_change_then_the_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  folder: Path) -> None:
    data = str(tmp_path / "data")
    code, out, err = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "-q",
                         "--meta", '{"entity": "acme", "period": 2023}')
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split(" v1:")[0] for line in lines[:3]] == [
        f"a/report.pdf: added: {A_ID}", f"b/report.pdf: added: {B_ID}", f"top.pdf: added: {TOP_ID}"]
    assert lines[3:] == ["added 3, updated 0, unchanged 0, deleted 0, failed 0"]
    assert err.splitlines()[0] == "created library 'lib'"
    # Without --meta every file's metadata changed: three updates, then nothing.
    code, out, err = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "-q")
    assert code == 0 and len(out.splitlines()) == 4
    assert out.splitlines()[-1] == "added 0, updated 3, unchanged 0, deleted 0, failed 0"
    code, out, _ = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "-q")
    assert (code, out) == (0, "added 0, updated 0, unchanged 3, deleted 0, failed 0\n")
    assert documents(Path(data))[TOP_ID]["metadata"] == {}


def test_meta_reaches_the_documents(capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path) -> None:
    data = tmp_path / "data"
    code, _, err = run(capsys, "--data-dir", str(data), "sync", str(folder), "--library", LIB, "-q",
                       "--meta", '{"entity": "acme", "period": 2023}')
    assert code == 0, err
    assert {d: e["metadata"] for d, e in documents(data).items()} == {
        i: {"entity": "acme", "period": 2023} for i in (A_ID, B_ID, TOP_ID)}


def test_a_failed_file_makes_the_exit_status_one(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 folder: Path) -> None:
    (folder / "broken.pdf").write_bytes(pdfs.NOT_A_PDF)
    code, out, _ = run(capsys, "--data-dir", str(tmp_path / "data"), "sync", str(folder), "--library", LIB, "-q")
    assert code == 1
    assert "broken.pdf: failed: " in out and "not a PDF" in out
    assert out.splitlines()[-1] == "added 3, updated 0, unchanged 0, deleted 0, failed 1"


def test_dry_run_and_delete_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path) -> None:
    data = str(tmp_path / "data")
    code, out, _ = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "--dry-run", "-q")
    assert code == 0
    assert out.splitlines() == ["a/report.pdf: would be added", "b/report.pdf: would be added",
                                "top.pdf: would be added",
                                "dry run (nothing changed): added 3, updated 0, unchanged 0, deleted 0, failed 0"]
    code, out, _ = run(capsys, "--data-dir", data, "libraries")
    assert out.startswith("no libraries")
    run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "-q")
    (folder / "top.pdf").unlink()
    code, out, _ = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "--delete", "-q")
    assert (code, out.splitlines()) == (0, [f"top.pdf: deleted: deleted {TOP_ID}",
                                            "added 0, updated 0, unchanged 2, deleted 1, failed 0"])


def test_an_empty_folder_deletes_nothing_and_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     folder: Path) -> None:
    data = str(tmp_path / "data")
    run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "-q")
    empty = tmp_path / "empty"
    folder.rename(empty)
    folder.mkdir()
    code, out, err = run(capsys, "--data-dir", data, "sync", str(folder), "--library", LIB, "--delete", "-q")
    assert code == 0 and out == "added 0, updated 0, unchanged 0, deleted 0, failed 0\n"
    assert err == (f"no PDF files under {folder.resolve()}; nothing deleted (an empty or unmounted folder is never "
                   "taken for 3 removed files)\n")
    assert set(documents(Path(data))) == {A_ID, B_ID, TOP_ID}


@pytest.mark.parametrize(("args", "message"), [
    (["sync", "{missing}", "--library", LIB], "no such folder: {missing} (nothing synced, nothing deleted)"),
    (["sync", "{folder}", "--library", LIB, "--meta", "{not json"], "--meta is not valid JSON: "),
    (["sync", "{folder}", "--library", LIB, "--meta", "[1]"], "--meta must be a JSON object of metadata fields, got list"),
    (["sync", "{folder}", "--library", LIB, "--meta", '{"doc_id": "x"}'],
     "--meta: doc_id is set by the file's path in a sync; remove it"),
    (["sync", "{folder}", "--library", LIB, "--meta", '{"period": {"a": 1}}'], "--meta: metadata field 'period"),
    (["sync", "{folder}", "--library", LIB, "--watch", "--dry-run"], "--dry-run and --watch do not go together"),
    (["sync", "{folder}", "--library", "Bad Name"], "library name 'Bad Name' is not allowed"),
    (["sync", "{folder}"], "the following arguments are required: --library"),
])
def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path,
                                    args: list[str], message: str) -> None:
    subst = {"missing": str(tmp_path / "missing"), "folder": str(folder)}
    argv = [subst.get(a[1:-1], a) if a in ("{missing}", "{folder}") else a for a in args]
    code, out, err = run(capsys, "--data-dir", str(tmp_path / "data"), *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message.replace("{missing}", subst["missing"]) in err


def test_watch_stops_cleanly_on_ctrl_c(capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import ragspine.sync.watch as watch_mod

    def one_round_then_ctrl_c(root: Path, run_once: Any, **kw: Any) -> int:
        run_once()
        kw["on_ready"]()
        write_pdf(folder / "late.pdf", "arrives while watching")
        run_once()  # (--quiet-seconds 0: no file is too young)
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_mod, "watch", one_round_then_ctrl_c)
    code, out, err = run(capsys, "--data-dir", str(tmp_path / "data"), "sync", str(folder), "--library", LIB,
                         "--watch", "-q", "--quiet-seconds", "0")
    assert code == 0
    assert out.splitlines()[-1] == "added 1, updated 0, unchanged 3, deleted 0, failed 0"
    assert err.splitlines()[-1] == "stopped watching" and f"watching {folder.resolve()} (Ctrl-C stops)" in err


def test_a_data_dir_held_by_a_server_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 folder: Path) -> None:
    data = tmp_path / "data"
    server = Engine(Settings(data_dir=data))  # what a running 'ragspine serve' holds
    try:
        code, out, err = run(capsys, "--data-dir", str(data), "sync", str(folder), "--library", LIB, "-q")
    finally:
        server.close()
    assert (code, out) == (2, "")
    # (a server in this very process here: the store says so; another process gets "in use by another
    # ragspine process", tests/store/test_edge_lock.py)
    assert len(err.splitlines()) == 1 and "is already open in this process" in err
