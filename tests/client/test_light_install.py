"""``ragspine[client]`` is light: the client and the API models import with none of the server's
packages, and the command line says which extra it needs when they are missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: Packages of the server extra (and the model extras) that the client must never import.
SERVER_PACKAGES = ("numpy", "fastapi", "starlette", "uvicorn", "pydantic_settings", "fitz", "pymupdf",
                   "qdrant_edge", "qdrant_client", "networkx", "openvino", "rapidocr_onnxruntime", "torch",
                   "mcp", "watchdog", "tqdm", "prometheus_client")


def _run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which importing any server package fails, as it
    would where only ``ragspine[client]`` is installed."""
    prelude = textwrap.dedent(f"""
        import sys
        BLOCKED = {SERVER_PACKAGES!r}
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
                return None
        sys.meta_path.insert(0, Block())
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60)


def test_the_client_needs_none_of_the_servers_packages() -> None:
    r = _run_blocked("""
        import ragspine
        from ragspine import api
        from ragspine.client import AsyncClient, Client, ApiError
        with Client("http://127.0.0.1:9") as c:
            assert c.absolute("/v1/x") == "http://127.0.0.1:9/v1/x"
        api.SearchRequest(query="revenue", libraries=["reports"], top_k=5)
        print(ragspine.__version__, "ok")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "ok"


def test_the_blocker_does_stop_a_server_import() -> None:
    """The check above can fail: the server's app does need the blocked packages."""
    r = _run_blocked("import ragspine.serving.app")
    assert r.returncode != 0
    assert "(blocked)" in r.stderr


def test_the_command_line_names_the_server_extra(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from ragspine.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("fastapi", "fitz") else real(name, *a))
    with pytest.raises(SystemExit) as exit_:
        main(["libraries"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ragspine: error: ragspine libraries needs the server's packages (missing: fitz, fastapi): "
                   "pip install 'ragspine[server]'"]
