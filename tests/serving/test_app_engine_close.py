"""Who closes an engine passed to the app: ``ragspine demo`` hands its engine to the server, and
uvicorn re-raises SIGTERM once the server has shut down, so only the app's shutdown can close
it (its store, its OCR workers, its queued phases)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import DataDirInUseError
from ragspine.serving.app import create_app


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data, dense_model="none", ocr="off")


def test_the_shutdown_closes_a_passed_engine_when_told_to(tmp_path: Path) -> None:
    engine = Engine(_settings(tmp_path))
    store_close = engine.store.close
    closes: list[int] = []
    engine.store.close = lambda: (closes.append(1), store_close())[1]  # type: ignore[method-assign]
    with TestClient(create_app(engine.settings, engine, close_engine=True)) as client:
        assert client.get("/v1/libraries").status_code == 200
    # The data dir is free again: only a closed engine gives it back.
    again = Engine(_settings(tmp_path))
    again.close()
    engine.close()  # the command's own close after the server's (Ctrl-C): nothing left to do
    assert closes == [1]


def test_a_passed_engine_stays_open_by_default(tmp_path: Path) -> None:
    engine = Engine(_settings(tmp_path))
    try:
        with TestClient(create_app(engine.settings, engine)) as client:
            assert client.get("/v1/libraries").status_code == 200
        with pytest.raises(DataDirInUseError):
            Engine(_settings(tmp_path))
        engine.create_library("still-open")  # its owner goes on using it
    finally:
        engine.close()
