"""bench/proc_tree.py: memory summed over a process tree counts a child's memory (what
/usr/bin/time misses), the command's exit code comes back, and bad arguments are usage errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_kit import BENCH

#: A parent that starts a child holding 200 MB (touched, so resident) for a second.
CHILD = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
         "\"b = bytearray(200 * 2**20); [b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; "
         "import time; time.sleep(1.0)\"]); sys.exit(3)")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "proc_tree.py"), *args], capture_output=True, text=True,
                          timeout=120)


def test_a_childs_memory_is_counted_and_the_exit_code_returned() -> None:
    r = _run("--every", "0.05", "--", sys.executable, "-c", CHILD)
    assert r.returncode == 3
    got = json.loads(r.stderr.strip().splitlines()[-1])
    assert got["exit"] == 3
    # The child's 200 MB are resident at once with the parent's interpreter (~10 MB).
    assert got["peak_tree_rss_mb"] >= 200 and got["peak_tree_pss_mb"] >= 200
    assert got["wall_s"] >= 1.0 and got["cpu_s"] > 0


@pytest.mark.parametrize("args", [["--"], ["--every", "0", "--", "true"]])
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    r = _run(*args)
    assert r.returncode == 2 and "error:" in r.stderr
