"""Library format versions: a library of an older format is refused with the command that
upgrades it, the upgrade brings it to today's format (atomic, resumable) and leaves it answering
as a library built today, and a library of a newer format is refused without a change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.library_formats import build

from ragspine.catalog.formats import LIBRARY_FORMAT, LibraryFormatError
from ragspine.catalog.upgrade import STEPS, Step, upgrade
from ragspine.catalog.libraries import LIBRARY_POINT
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.store.base import PointData

QUERIES = ("revenue growth 2023", "retail margins", "operating margin")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=tmp_path / "data", ocr="off"))
    yield eng
    eng.close()


def _ranking(engine: Engine, library: str) -> list[list[tuple[str, int, str, float]]]:
    out = []
    for q in QUERIES:
        res = engine.search({"query": q, "libraries": [library], "mode": "bm25"})
        out.append([(h.doc_id, h.page, h.chunk_id, round(h.scores["fused"] or 0.0, 12)) for h in res.hits])
    return out


def _format_of(engine: Engine, library: str) -> Any:
    return engine.store.retrieve(library, [LIBRARY_POINT])[0].payload.get("format_version")


def test_todays_libraries_are_written_in_todays_format(engine: Engine) -> None:
    build(engine, "today", LIBRARY_FORMAT)
    assert _format_of(engine, "today") == LIBRARY_FORMAT == 2
    assert engine.library("today").format_version == 2


def test_an_older_library_is_refused_with_the_command_that_upgrades_it(engine: Engine) -> None:
    build(engine, "old", 1)
    assert _format_of(engine, "old") is None
    with pytest.raises(LibraryFormatError) as err:
        engine.search({"query": "revenue", "libraries": ["old"]})
    assert err.value.status == 409
    assert "ragspine libraries --upgrade old" in err.value.detail
    assert "format 1; this ragspine reads format 2" in err.value.detail


def test_the_upgrade_makes_it_answer_as_a_library_built_today(engine: Engine) -> None:
    build(engine, "old", 1)
    build(engine, "today", LIBRARY_FORMAT)
    up = upgrade(engine.libraries, "old")
    assert (up.source, up.target, up.steps) == (1, 2, ["1 -> 2: the library record names its format"])
    assert _format_of(engine, "old") == 2
    assert _ranking(engine, "old") == _ranking(engine, "today")
    assert _ranking(engine, "old")[0][0][:2] == ("acme-2023", 1)
    again = engine.upgrade_library("old")  # nothing left to do
    assert (again.source, again.target, again.steps) == (2, 2, [])


def test_without_its_migration_an_older_library_cannot_be_upgraded(engine: Engine) -> None:
    build(engine, "old", 1)
    with pytest.raises(LibraryFormatError, match="has no upgrade from it"):
        upgrade(engine.libraries, "old", steps={})
    assert _format_of(engine, "old") is None  # untouched


def test_an_interrupted_upgrade_finishes_when_run_again(engine: Engine) -> None:
    build(engine, "old", 1)
    calls = []

    def dies_once(libraries: Any, name: str) -> None:
        calls.append(name)
        STEPS[1].run(libraries, name)  # the step's own writes...
        if len(calls) == 1:
            raise KeyboardInterrupt  # ...then the process is stopped before the record moves

    steps = {1: Step(1, "the library record names its format", dies_once)}
    with pytest.raises(KeyboardInterrupt):
        upgrade(engine.libraries, "old", steps=steps)
    assert _format_of(engine, "old") is None  # still format 1: the step runs again
    with pytest.raises(LibraryFormatError):
        engine.library("old")
    up = upgrade(engine.libraries, "old", steps=steps)
    assert (up.source, up.target, calls) == (1, 2, ["old", "old"])
    assert engine.library("old").format_version == 2


def test_a_newer_library_is_refused_and_left_alone(engine: Engine) -> None:
    build(engine, "new", LIBRARY_FORMAT)
    payload = {**engine.store.retrieve("new", [LIBRARY_POINT])[0].payload, "format_version": LIBRARY_FORMAT + 1}
    engine.store.upsert("new", [PointData(LIBRARY_POINT, payload)])
    engine.libraries._records.pop("new", None)
    for attempt in (lambda: engine.library("new"), lambda: engine.upgrade_library("new")):
        with pytest.raises(LibraryFormatError, match="written by a newer ragspine"):
            attempt()
    assert _format_of(engine, "new") == LIBRARY_FORMAT + 1


def test_rest_and_cli_say_what_to_run(tmp_path: Path, capsys: Any) -> None:
    from fastapi.testclient import TestClient

    from ragspine.cli import main
    from ragspine.serving.app import create_app

    data = tmp_path / "data"
    eng = Engine(Settings(data_dir=data, ocr="off"))
    try:
        build(eng, "old", 1)
    finally:
        eng.close()
    with TestClient(create_app(Settings(data_dir=data, ocr="off"))) as c:
        r = c.post("/v1/search", json={"query": "revenue", "libraries": ["old"]})
        assert r.status_code == 409 and r.json()["type"] == "/problems/library-format"
        assert "ragspine libraries --upgrade old" in r.json()["detail"]
        [lib] = c.get("/v1/libraries").json()["libraries"]
        assert (lib["name"], lib["documents"]) == ("old", None) and "--upgrade old" in lib["problem"]
    assert main(["--data-dir", str(data), "libraries", "--upgrade", "old"]) == 0
    assert capsys.readouterr().out.strip() == (
        "library 'old': format 1 -> 2 (1 -> 2: the library record names its format)")
    assert main(["--data-dir", str(data), "libraries"]) == 0
    assert capsys.readouterr().out.strip() == "old\t2 documents\t3 pages"
