"""Backup and restore over REST (a real HTTP server), through the typed client and the CLI's
``--url``: streamed download and upload, keys allowed every library only, clear errors."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

_CLIENT = str(Path(__file__).resolve().parents[1] / "client")
if _CLIENT not in sys.path:  # ``import live_kit``
    sys.path.insert(0, _CLIENT)

from live_kit import KEY_A, KEY_STAR, LiveServer  # noqa: E402

from ragspine.cli.main import main  # noqa: E402
from ragspine.client import ApiError, AsyncClient, Client  # noqa: E402

TEXTS = {"r1": "Cloud revenue grew by zebracorn percent in Europe.",
         "r2": "Headcount at year end rose in China and fell in Europe.",
         "r3": "Dividend policy: a payout of forty percent of net income."}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("backup-api"), api_keys=f"{KEY_A}=liba;{KEY_STAR}=*",
                    max_restore_bytes=4 << 20) as srv:
        eng = srv.app.state.engine
        eng.create_library("liba")
        for doc_id, text in TEXTS.items():
            eng.ingest_text("liba", doc_id, text, title=doc_id.upper())
        eng.glossaries.upload("liba", b"term,synonyms\nrevenue,turnover\n", "g.csv")
        yield srv


def _hits(rs: Client, lib: str, q: str) -> list[tuple[object, ...]]:
    return [(h.doc_id, h.page, h.chunk_id, h.bbox, h.text, h.scores) for h in rs.search(q, [lib], mode="bm25").hits]


def test_only_a_key_allowed_every_library_may_back_up_or_restore(live: LiveServer, tmp_path: Path) -> None:
    assert httpx.get(f"{live.url}/v1/libraries/liba/backup").status_code == 401
    for path in ("/v1/libraries/liba/backup", "/v1/backup"):
        r = httpx.get(f"{live.url}{path}", headers={"Authorization": f"Bearer {KEY_A}"})
        assert r.status_code == 403 and "'*'" in r.json()["detail"]
    r = httpx.post(f"{live.url}/v1/restore", content=b"x", headers={"Authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 403
    with Client(live.url, api_key=KEY_A) as rs, pytest.raises(ApiError) as exc:
        rs.backup(tmp_path / "a.rsbak", "liba")
    assert exc.value.status == 403 and not (tmp_path / "a.rsbak").exists()
    assert not list(tmp_path.iterdir())  # no partial download left


def test_a_round_trip_through_the_client(live: LiveServer, tmp_path: Path) -> None:
    dest = tmp_path / "liba.rsbak"
    with Client(live.url, api_key=KEY_STAR) as rs:
        size = rs.backup(dest, "liba")
        assert size == dest.stat().st_size > 0
        out = rs.restore(dest, as_name="liba-copy")
        (lib,) = out.libraries
        assert (lib.name, lib.source, lib.documents) == ("liba-copy", "liba", len(TEXTS))
        for q in ("revenue Europe", "dividend payout", "turnover"):
            assert _hits(rs, "liba", q) == _hits(rs, "liba-copy", q)
        assert rs.glossary("liba-copy").model_dump(exclude={"library"}) == \
            rs.glossary("liba").model_dump(exclude={"library"})
        with pytest.raises(ApiError) as exc:  # the name is taken now
            rs.restore(dest, as_name="liba-copy")
        assert exc.value.status == 409 and "as=NAME" in exc.value.detail
        rs.delete_library("liba-copy")


def test_the_async_client_backs_up_every_library_and_restores(live: LiveServer, tmp_path: Path) -> None:
    dest = tmp_path / "all.rsbak"

    async def go() -> tuple[list[str], list[str]]:
        async with AsyncClient(live.url, api_key=KEY_STAR) as rs:
            libs = [lib.name for lib in await rs.libraries()]
            await rs.backup(dest)  # every library: here the one
            out = await rs.restore(dest, as_name="liba-async")
            names = [lib.name for lib in out.libraries]
            for n in names:
                await rs.delete_library(n)
            return libs, names

    assert asyncio.run(go()) == (["liba"], ["liba-async"])


def test_a_corrupt_or_oversized_upload_is_refused_and_changes_nothing(live: LiveServer, tmp_path: Path) -> None:
    good = tmp_path / "good.rsbak"
    with Client(live.url, api_key=KEY_STAR) as rs:
        rs.backup(good, "liba")
        before = [lib.name for lib in rs.libraries()]
        cut = tmp_path / "cut.rsbak"
        cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        with pytest.raises(ApiError) as exc:
            rs.restore(cut, as_name="cut")
        assert exc.value.status == 422 and exc.value.type == "invalid-backup"
        assert "the uploaded backup" in exc.value.detail and ("truncated" in exc.value.detail
                                                              or "corrupt" in exc.value.detail)
        big = tmp_path / "big.rsbak"
        big.write_bytes(b"\0" * (5 << 20))
        with pytest.raises(ApiError) as exc:
            rs.restore(big, as_name="big")
        assert exc.value.status == 413 and "RAGSPINE_MAX_RESTORE_BYTES" in exc.value.detail
        assert [lib.name for lib in rs.libraries()] == before
    r = httpx.post(f"{live.url}/v1/restore", headers={"Authorization": f"Bearer {KEY_STAR}"})
    assert r.status_code == 422 and "no body" in r.json()["detail"]
    r = httpx.post(f"{live.url}/v1/restore", content=b"%PDF-1.7 not a backup" * 100,
                   headers={"Authorization": f"Bearer {KEY_STAR}", "Content-Type": "application/x-tar"})
    assert r.status_code == 415 and r.json()["type"] == "/problems/not-a-backup"
    assert "the uploaded backup is not a ragspine backup" in r.json()["detail"]


def test_the_cli_goes_through_a_server_and_is_refused_its_data_dir(live: LiveServer, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "cli.rsbak"
    remote = ["--url", live.url, "--api-key", KEY_STAR]
    assert main(["backup", "liba", str(dest), *remote]) == 0
    assert "backed up liba through" in capsys.readouterr().out
    assert main(["restore", str(dest), "--as", "liba-cli", *remote]) == 0
    assert "restored liba as liba-cli: 3 documents" in capsys.readouterr().out
    with Client(live.url, api_key=KEY_STAR) as rs:
        assert _hits(rs, "liba", "dividend") == _hits(rs, "liba-cli", "dividend")
        rs.delete_library("liba-cli")
    with pytest.raises(SystemExit) as exc:
        main(["backup", "liba", str(dest), "--url", live.url, "--api-key", KEY_A])
    assert exc.value.code == 1 and "403 Forbidden" in capsys.readouterr().err
    # The server holds its data dir: the CLI says to go through it.
    monkeypatch.setenv("RAGSPINE_DATA_DIR", str(live.app.state.engine.settings.data_dir))
    with pytest.raises(SystemExit) as exc:
        main(["backup", "liba", str(tmp_path / "x.rsbak")])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and "--url http://HOST:PORT" in err and err.count("\n") == 1
