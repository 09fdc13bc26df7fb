"""The formats of API keys (``RAGSPINE_API_KEYS``, ``RAGSPINE_API_KEYS_FILE``): libraries with
filters, keys stored as digests, errors that name the entry and never the secret, and a keys
file followed without a restart."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from ragspine.config import Settings
from ragspine.config.api_keys import parse_api_keys, read_keys_file
from ragspine.serving.app import create_app
from ragspine.serving.auth import Auth, Grant, KeysFile
from serving_kit import assert_problem, clean_settings

SECRET = "s3cret-key-value"


def grant_of(text: str) -> dict[str, list]:
    (entry,) = parse_api_keys(text).values()
    return {lib: list(f) for lib, f in Grant.of(entry).libraries.items()}


def test_libraries_with_and_without_filters() -> None:
    assert grant_of(f"{SECRET}=a,b") == {"a": [], "b": []}
    assert grant_of(f"{SECRET}=*") == {"*": []}
    assert grant_of(f"{SECRET}=filings(region in [emea, apac] & fiscal_year gte 2020),public") == {
        "filings": [{"field": "region", "op": "in", "value": ["emea", "apac"]},
                    {"field": "fiscal_year", "op": "gte", "value": 2020}],
        "public": [],
    }
    assert grant_of(f"{SECRET}=*(project eq atlas)") == {"*": [{"field": "project", "op": "eq", "value": "atlas"}]}
    keys = parse_api_keys(f"{SECRET}=a;other-key-1234=b")
    assert set(keys) == {hashlib.sha256(SECRET.encode()).hexdigest(), hashlib.sha256(b"other-key-1234").hexdigest()}
    assert all(SECRET not in repr(e) for e in keys.values())  # only the digest is kept


@pytest.mark.parametrize("text, says", [
    ("short=a", "8+ characters"),
    (f"{SECRET}=", "at least one library"),
    (f"{SECRET}=filings(region eq emea", "unbalanced"),
    (f"{SECRET}=filings()", "not '(FIELD OP VALUE"),
    (f"{SECRET}=filings(region eq emea & )", "empty condition"),
    (f"{SECRET}=a,a", "listed twice"),
    (f"ok-key-1234=a;{SECRET}=b(x eq 1", "entry 2"),
])
def test_bad_entries_are_named_without_their_secret(text: str, says: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_api_keys(text)
    assert says in str(exc.value) and SECRET not in str(exc.value)


@pytest.mark.parametrize("cond, says", [
    ("region approx emea", "unknown filter operator"),
    ("page lte 3", "'page' cannot be part of it"),
    ("region", "is not 'FIELD OP VALUE'"),
    ("year between [2020]", "needs [low, high]"),
])
def test_a_bad_condition_stops_the_server_at_start(cond: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as exc:
        Auth(parse_api_keys(f"{SECRET}=filings({cond})"))
    assert says in str(exc.value) and "library 'filings'" in str(exc.value) and SECRET not in str(exc.value)
    settings = clean_settings(data_dir=tmp_path, api_keys=f"{SECRET}=filings({cond})")
    with pytest.raises(ValueError, match="library 'filings'"):
        create_app(settings)


def write(path: Path, keys: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": keys}))
    os.replace(tmp, path)  # as an operator's tooling should: readers never see half a file


def test_keys_file_entries(tmp_path: Path) -> None:
    f = tmp_path / "keys.json"
    digest = hashlib.sha256(b"from-a-digest-1").hexdigest()
    write(f, [{"name": "sales", "sha256": digest.upper(), "libraries": {"filings": ["region in [emea]"]}},
              {"key": SECRET, "libraries": {"*": [{"field": "project", "op": "eq", "value": "atlas"}], "x": None}}])
    keys = read_keys_file(f)
    assert keys[digest].name == "sales" and keys[digest].libraries == {"filings": ("region in [emea]",)}
    other = keys[hashlib.sha256(SECRET.encode()).hexdigest()]
    assert other.name.startswith("key-") and other.libraries["x"] == ()
    for bad, says in [
        ({"keys": [{"libraries": {"a": []}}]}, "exactly one of 'key' and 'sha256'"),
        ({"keys": [{"sha256": "abc", "libraries": {"a": []}}]}, "64 hexadecimal digits"),
        ({"keys": [{"key": "short", "libraries": {"a": []}}]}, "8+ characters"),
        ({"keys": [{"key": SECRET, "libraries": {}}]}, "at least one library"),
        ({"keys": [{"key": SECRET, "libraries": {"a": "region eq x"}}]}, "list of conditions"),
        ({"keys": [{"key": SECRET, "libraries": {"a": []}, "role": "x"}]}, "must be an object"),
        ({"keys": [{"key": SECRET, "libraries": {"a": []}}, {"key": SECRET, "libraries": {"b": []}}]}, "twice"),
        ({"key": []}, "must be an object {\"keys\""),
    ]:
        f.write_text(json.dumps(bad))
        with pytest.raises(ValueError) as exc:
            read_keys_file(f)
        assert says in str(exc.value) and SECRET not in str(exc.value), bad
    f.write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        read_keys_file(f)
    with pytest.raises(ValueError, match="does not exist"):
        read_keys_file(tmp_path / "nope.json")
    with pytest.raises(ValidationError, match="does not exist"):
        Settings(api_keys_file=tmp_path / "nope.json")


def test_the_keys_file_is_followed_without_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "keys.json"
    write(f, [{"name": "first", "key": "first-key-111", "libraries": {"*": []}}])
    settings = clean_settings(data_dir=tmp_path / "data", api_keys_file=f)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        def status(key: str) -> int:
            return c.get("/v1/libraries", headers={"X-API-Key": key}).status_code

        assert (status("first-key-111"), status("second-key-22")) == (200, 401)
        # Added and revoked: the next request sees it.
        write(f, [{"name": "second", "sha256": hashlib.sha256(b"second-key-22").hexdigest(), "libraries": {"*": []}}])
        assert (status("first-key-111"), status("second-key-22")) == (401, 200)
        # A broken file keeps the keys read before, and says why (naming no secret).
        with caplog.at_level(logging.ERROR, logger="ragspine.serving.auth"):
            f.write_text(json.dumps({"keys": [{"key": "third-key-333", "libraries": {"a": ["page eq 1"]}}]}))
            assert (status("second-key-22"), status("third-key-333")) == (200, 401)
        assert "'page' cannot be part of it" in caplog.text and "third-key-333" not in caplog.text
        # Gone: every key of the file is revoked, and auth stays on.
        f.unlink()
        assert status("second-key-22") == 401
        assert_problem(c.get("/v1/libraries"), 401)


def test_keys_from_both_places_are_valid(tmp_path: Path) -> None:
    f = tmp_path / "keys.json"
    write(f, [{"key": "file-key-4444", "libraries": {"a": []}}])
    auth = Auth(parse_api_keys("env-key-55555=b"), f)
    assert isinstance(auth.file, KeysFile) and auth.enabled
    settings = clean_settings(data_dir=tmp_path / "data", api_keys="env-key-55555=*", api_keys_file=f)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for key in ("env-key-55555", "file-key-4444"):
            assert c.get("/v1/libraries", headers={"X-API-Key": key}).status_code == 200
        assert c.post("/v1/libraries", json={"name": "b"}, headers={"X-API-Key": "file-key-4444"}).status_code == 403


def test_ragspine_serve_refuses_a_bad_filter_in_one_line(tmp_path: Path) -> None:
    import subprocess

    from serving_kit import ragspine_command

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update(RAGSPINE_DATA_DIR=str(tmp_path), RAGSPINE_API_KEYS=f"{SECRET}=a(page eq 1)")
    p = subprocess.run([*ragspine_command(), "serve", "--port", "1"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert lines[-1] == ("ragspine: error: bad API keys (RAGSPINE_API_KEYS or RAGSPINE_API_KEYS_FILE): API key "
                         f"'key-{hashlib.sha256(SECRET.encode()).hexdigest()[:8]}', library 'a': a key's filter "
                         "chooses documents: 'page' cannot be part of it"), p.stderr
    assert "Traceback" not in p.stderr and SECRET not in p.stderr
