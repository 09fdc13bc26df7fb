"""``ragspine graph ...`` on a copy of the demo data dir: human output, ``--json``, one-line
errors, and no heavy import just to build the parser."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragspine.cli import main
from ragspine.demo import DEMO_LIBRARY
from ragspine.demo.corpus import demo_relations_csv


@pytest.fixture
def data_dir(demo_data_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(demo_data_dir, d)
    return d


def run(data_dir: Path, *args: str) -> int:
    return main(["--data-dir", str(data_dir), "graph", *args, "--library", DEMO_LIBRARY])


def test_relations_entities_neighbors_paths(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "group.csv"
    f.write_text(demo_relations_csv() + "Initech,peer_of,Globex Corp,press release,company,,英尼泰克,\n", encoding="utf-8")
    assert run(data_dir, "relations", str(f)) == 0
    assert "group.csv: 9 rows declared (replace)" in capsys.readouterr().out

    assert run(data_dir, "entities", "英尼泰克") == 0
    assert capsys.readouterr().out.splitlines() == ["initech\tInitech\tcompany  (aliases: 英尼泰克)"]

    assert run(data_dir, "neighbors", "阿克米控股", "--relation", "subsidiary_of") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Acme Holdings (acme-holdings, company): 3 neighbours"
    assert "acme-energy —subsidiary_of→ acme-holdings" in out and "group.csv row 3" in out

    assert run(data_dir, "paths", "Initech", "Acme Robotics", "--relation", "peer_of,subsidiary_of") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Initech → Acme Robotics: 3 hops via Initech → Globex Corp → Acme Holdings → Acme Robotics"

    assert run(data_dir, "paths", "initech", "revenue", "--max-hops", "1", "--json") == 0
    assert json.loads(capsys.readouterr().out)["found"] is False

    assert run(data_dir, "neighbors", "acme-energy", "--depth", "2", "--json") == 0
    body = json.loads(capsys.readouterr().out)
    assert body["entity"]["id"] == "acme-energy" and body["neighbors"]

    assert run(data_dir, "rebuild") == 0
    assert "rebuilt" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("neighbors", "initech"), "no entity 'initech'"),
        (("neighbors", "acme-holdings", "--depth", "5"), "depth must be an integer from 1 to 3, got 5"),
        (("neighbors", "acme-holdings", "--relation", "owns"), "unknown relation 'owns'"),
        (("paths", "acme-holdings", "revenue", "--max-hops", "0"), "max_hops must be an integer from 1 to 6"),
        (("relations", "/no/such/file.csv"), "no such file: /no/such/file.csv"),
    ],
)
def test_errors_are_one_line(data_dir: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        run(data_dir, *args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ragspine: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_bad_relations_file(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "loop.csv"
    f.write_text("source,relation,target,provenance\nA,subsidiary_of,A,x\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        run(data_dir, "relations", str(f))
    assert "loop.csv row 2: 'A' subsidiary_of 'A' relates an entity to itself" in capsys.readouterr().err


def test_unknown_library(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--data-dir", str(data_dir), "graph", "entities", "x", "--library", "nope"])
    assert "unknown library 'nope'" in capsys.readouterr().err


def test_parser_imports_nothing_heavy() -> None:
    code = ("import sys; from ragspine.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('networkx', 'ragspine.engine', 'ragspine.graph._service', 'fastapi') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
