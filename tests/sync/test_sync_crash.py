"""Crash safety: a sync killed anywhere, then run again, ends where one clean run ends.

The kill is an exception injected at the k-th ingest: after the file's claim and before the
engine's ingest (``claimed``), inside the ingest's replace with the in-process cleanup switched
off as a killed process would skip it (``staged_entry``, ``written``, ``committed``), after the
commit and before the record is settled (``settled``), or as a gone file's document is
deleted: before the engine's delete (``deleting``) or after it, before its record is
forgotten (``deleted``). The crashed engine is closed, a new one
reopens the data dir (its recovery runs), the sync runs again, and the end state (documents,
their content keys, page and passage counts, metadata, and the sync record) must equal that of
a clean run over the same folder in another data dir.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from sync_kit import A_ID, B_ID, TOP_ID, doc_ids, found, state, sync, write_pdf, write_sidecar

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.sync import doc_id_for

STEPS = ("staged_entry", "written", "committed")


class Boom(Exception):
    """The kill (neither a RagspineError nor an OSError: a sync does not catch it per file)."""


def arm(engine: Engine, step: str, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    real_ingest, real_delete = engine.ingest, engine.delete_document

    def hook(name: str) -> None:
        if name == step:
            raise Boom(step)

    def ingest(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] != k:
            return real_ingest(*a, **kw)
        if step == "claimed":
            raise Boom(step)
        engine.indexer.step_hook = hook if step in STEPS else None
        r = real_ingest(*a, **kw)
        if step == "settled":
            raise Boom(step)
        return r

    def delete_document(*a: Any, **kw: Any) -> None:
        if step == "deleted":
            real_delete(*a, **kw)
        raise Boom(step)

    monkeypatch.setattr(engine, "ingest", ingest)
    if step in ("deleting", "deleted"):
        monkeypatch.setattr(engine, "delete_document", delete_document)
    monkeypatch.setattr(engine.indexer.versions, "abort", lambda *a, **kw: None)  # killed: no cleanup


def to_v2(folder: Path) -> None:
    """Changed bytes, a file marked RESTRICTED, a new file, a file removed."""
    write_pdf(folder / "a" / "report.pdf", "Acme now sells submarines.")
    write_sidecar(folder / "b" / "report.pdf", {"sensitivity": "RESTRICTED"})
    write_pdf(folder / "c" / "new.pdf", "A brand new file about lighthouses.")
    (folder / "top.pdf").unlink()


CASES = [
    # A first sync (three adds) killed at the second ingest, at every step.
    *(("fresh", step, 2) for step in ("claimed", *STEPS, "settled")),
    # A sync of changes (update, RESTRICTED drop, add, delete) killed at each kind of write.
    ("changes", "claimed", 1), ("changes", "committed", 1), ("changes", "settled", 1),
    ("changes", "claimed", 2), ("changes", "settled", 2),  # the RESTRICTED drop: before / after the engine's
    ("changes", "written", 3), ("changes", "deleting", 0), ("changes", "deleted", 0),
]


@pytest.mark.parametrize(("scenario", "step", "k"), CASES, ids=[f"{s}-{t}-{k}" for s, t, k in CASES])
def test_a_killed_sync_run_again_equals_a_clean_run(tmp_path: Path, folder: Path, scenario: str, step: str, k: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clean = Engine(Settings(data_dir=tmp_path / "clean"))
    crashed = Engine(Settings(data_dir=tmp_path / "crashed"))
    try:
        if scenario == "changes":
            for eng in (clean, crashed):
                assert sync(eng, folder).summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
            to_v2(folder)
        first = sync(clean, folder, delete=True)
        want = state(clean)
        arm(crashed, step, k, monkeypatch)
        with pytest.raises(Boom):
            sync(crashed, folder, delete=True)
    finally:
        clean.close()
        crashed.close()
    monkeypatch.undo()
    again = Engine(Settings(data_dir=tmp_path / "crashed"))
    try:
        rerun = sync(again, folder, delete=True)
        assert rerun.failed == 0
        assert state(again) == want
        assert sync(again, folder, delete=True).summary() == (
            f"added 0, updated 0, unchanged {len(want['docs']) + (scenario == 'changes')}, deleted 0, failed 0")
        if scenario == "fresh":
            assert first.summary() == "added 3, updated 0, unchanged 0, deleted 0, failed 0"
            assert doc_ids(again) == {A_ID, B_ID, TOP_ID}
        else:
            assert first.summary() == "added 1, updated 2, unchanged 0, deleted 1, failed 0"
            assert doc_ids(again) == {A_ID, doc_id_for("c/new.pdf")}
            assert found(again, "submarines") == {A_ID} and found(again, "flood") == set()
    finally:
        again.close()


def test_the_clean_states_differ_where_they_should(tmp_path: Path, folder: Path) -> None:
    """``state`` is not blind: a run that left out one file's update is told apart."""
    a = Engine(Settings(data_dir=tmp_path / "a"))
    b = Engine(Settings(data_dir=tmp_path / "b"))
    try:
        sync(a, folder)
        sync(b, folder)
        assert state(a) == state(b)
        shutil.copy(folder / "top.pdf", tmp_path / "top.bak")
        write_pdf(folder / "top.pdf", "Different words.")
        sync(a, folder)
        assert state(a) != state(b)
    finally:
        a.close()
        b.close()
