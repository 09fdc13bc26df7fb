"""bench/serve_load.py: the servers it starts do not outlive it, and its rows come out as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_kit import load_bench

sl = load_bench("serve_load")

#: A stand-in for ``ragspine serve``: answers every GET with 200; ignores SIGTERM when told to.
SERVER = """
import http.server, os, signal, sys
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.fixture()
def waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[subprocess.Popen, float | None]]:
    """The stand-in server in place of ragspine's, and every ``wait`` on a process, recorded."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    monkeypatch.setattr(sl, "ragspine", lambda: [sys.executable, str(script)])
    seen: list[tuple[subprocess.Popen, float | None]] = []
    real = subprocess.Popen.wait

    def wait(self: subprocess.Popen, timeout: float | None = None) -> int:
        seen.append((self, timeout))
        return real(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    return seen


def test_an_interrupted_run_gives_its_server_seconds_then_kills_it(tmp_path: Path, waits: list) -> None:
    env = {**os.environ, "IGNORE_TERM": "1"}
    with pytest.raises(KeyboardInterrupt), sl.server("local", env, tmp_path / "log"):
        raise KeyboardInterrupt  # as a time limit's SIGINT lands
    proc, first = waits[0]
    # 5 s, not the 60 a finished run allows: gpu_checks.sh kills this process 10 s after its SIGINT.
    assert first == 5
    assert proc.poll() == -9  # it ignored SIGTERM, so its group was killed


def test_a_finished_run_lets_its_server_stop_on_its_own(tmp_path: Path, waits: list) -> None:
    with sl.server("local", dict(os.environ), tmp_path / "log"):
        pass
    proc, first = waits[0]
    assert first == 60 and proc.poll() == -15  # stopped by the SIGTERM


def test_the_rows_of_each_rule_and_client_count_merge_their_rounds(tmp_path: Path) -> None:
    a, b = sl.Run("graphs: 8 clients"), sl.Run("graphs: 8 clients")
    a.latencies, a.seconds, a.errors = [0.010, 0.030], 1.0, 0
    b.latencies, b.seconds, b.errors = [0.020], 2.0, 1
    rows = sl.rows_of(sl.merge({("graphs", 8): [a, b]}))
    # 3 answers in 3 s; p50 of 10, 20, 30 ms is 20 ms; p99 rounds to the last of three.
    assert rows == [{"rule": "graphs", "clients": 8, "ok": 3, "qps": 1.0, "p50_ms": 20.0, "p99_ms": 30.0,
                     "errors": 1}]
    out = tmp_path / "serve.json"
    sl.write_json(out, {"device": "cuda", "rows": rows})
    assert json.loads(out.read_text())["rows"] == rows and not (tmp_path / "serve.json.tmp").exists()
