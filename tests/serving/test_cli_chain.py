"""``ragspine glossary``, ``ragspine gaps`` and the chain flags of ``ragspine search``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ragspine.cli import main
from ragspine.config import Settings
from ragspine.engine import Engine


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def data(data_dir: Path) -> Path:
    eng = Engine(Settings(data_dir=data_dir))
    eng.create_library("lib")
    eng.ingest_text("lib", "acme", "Acme revenue grew strongly in 2023.")
    eng.close()
    return data_dir


def test_glossary_upload_show_and_rewrite(capsys: pytest.CaptureFixture[str], data: Path, tmp_path: Path) -> None:
    g = tmp_path / "glossary.csv"
    g.write_text("term,synonyms\nturnover,revenue\n")
    code, out, err = run(capsys, "--data-dir", str(data), "glossary", "--library", "lib", "--upload", str(g))
    assert code == 0, err
    assert out.strip() == "library lib: glossary glossary.csv with 1 terms"
    code, out, _ = run(capsys, "--data-dir", str(data), "glossary", "--library", "lib")
    assert "turnover = revenue  (metric)" in out
    code, out, _ = run(capsys, "--data-dir", str(data), "search", "turnover", "--library", "lib", "--rewrite")
    assert code == 0
    assert "(searched: turnover | revenue)" in out and "found by queries 2" in out
    code, out, _ = run(capsys, "--data-dir", str(data), "search", "turnover", "--library", "lib", "--no-rewrite")
    assert "no hits" in out


def test_bad_glossary_is_one_line(capsys: pytest.CaptureFixture[str], data: Path, tmp_path: Path) -> None:
    g = tmp_path / "bad.csv"
    g.write_text("term,synonyms\nturnover,\n")
    code, out, err = run(capsys, "--data-dir", str(data), "glossary", "--library", "lib", "--upload", str(g))
    assert code == 2 and err.strip() == "ragspine: error: row 2: term 'turnover' has no synonym"
    code, _, err = run(capsys, "--data-dir", str(data), "glossary", "--library", "lib", "--upload",
                       str(tmp_path / "missing.csv"))
    assert code == 2 and "no such file" in err


def test_gaps_listed_and_cleared(capsys: pytest.CaptureFixture[str], data: Path) -> None:
    for _ in range(2):
        code, out, _ = run(capsys, "--data-dir", str(data), "search", "zebra census", "--library", "lib",
                           "--corrective")
        assert code == 0 and out.strip() == "abstained: no passage matched the query"
    code, out, _ = run(capsys, "--data-dir", str(data), "gaps", "--library", "lib", "--json")
    gaps = json.loads(out)["gaps"]
    assert [(g["query"], g["hit_count"]) for g in gaps] == [("zebra census", 2)]
    code, out, _ = run(capsys, "--data-dir", str(data), "gaps", "--library", "lib")
    assert "2×  zebra census" in out
    code, out, _ = run(capsys, "--data-dir", str(data), "gaps", "--library", "lib", "--delete", gaps[0]["gap_id"])
    assert code == 0
    code, out, _ = run(capsys, "--data-dir", str(data), "gaps", "--library", "lib")
    assert out.strip() == "library lib: no knowledge gaps recorded"
    code, _, err = run(capsys, "--data-dir", str(data), "gaps", "--library", "lib", "--delete", gaps[0]["gap_id"])
    assert code == 2 and "no gap" in err
