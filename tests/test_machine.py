"""What the process may use of the machine (``ragspine.config.machine``), read from cgroup files
of the test's own making, and the in-memory BM25 budget sized from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ragspine.config import LEXICAL_FALLBACK_POSTINGS, Settings
from ragspine.config import machine

GIB = 1 << 30


def cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


@pytest.mark.parametrize("files, ram, want", [
    ({}, 16 * GIB, 16 * GIB),                                                  # no cgroup: the RAM
    ({"memory.max": f"{4 * GIB}\n"}, 16 * GIB, 4 * GIB),                        # v2 limit
    ({"memory.max": "max\n"}, 16 * GIB, 16 * GIB),                              # v2, unlimited
    ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 8 * GIB, 8 * GIB),  # v1 "unlimited"
    ({"memory/memory.limit_in_bytes": f"{2 * GIB}\n"}, 8 * GIB, 2 * GIB),       # v1 limit
    ({"memory.max": f"{64 * GIB}\n"}, 16 * GIB, 16 * GIB),                       # a limit above the RAM
    ({"memory.max": "garbage\n"}, 16 * GIB, 16 * GIB),
])
def test_memory_limit(tmp_path: Path, files: dict[str, str], ram: int, want: int) -> None:
    assert machine.memory_limit(cgroup(tmp_path, files), physical=ram) == want


@pytest.mark.parametrize("files, affinity, want", [
    ({}, 8, 8),
    ({"cpu.max": "200000 100000\n"}, 8, 2),      # v2: 2 cores of quota
    ({"cpu.max": "150000 100000\n"}, 8, 2),      # 1.5 rounds up
    ({"cpu.max": "max 100000\n"}, 8, 8),
    ({"cpu.max": "400000 100000\n"}, 2, 2),      # affinity is the tighter bound
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4, 1),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4, 4),     # v1 unlimited
])
def test_usable_cpus(tmp_path: Path, files: dict[str, str], affinity: int, want: int) -> None:
    assert machine.usable_cpus(cgroup(tmp_path, files), affinity=affinity) == want


def test_the_lexical_budget_follows_the_memory_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    # 1/8 of the memory at 115 bytes a posting at the build's peak (docs/capacity.md).
    assert s.lexical_postings_budget(memory=4 * GIB) == int(4 * GIB / 8 / 115) == 4_668_442
    assert s.lexical_postings_budget(memory=24 * GIB) == 28_010_656  # the 74 filings' 10.8M fit
    assert Settings(lexical_max_postings=123).lexical_postings_budget(memory=24 * GIB) == 123
    assert Settings(lexical_max_postings=0).lexical_postings_budget() == 0  # 0: always the store
    monkeypatch.setattr("ragspine.config.memory_limit", lambda: None)
    assert s.lexical_postings_budget() == LEXICAL_FALLBACK_POSTINGS
    monkeypatch.setattr("ragspine.config.memory_limit", lambda: 2 * GIB)
    assert s.lexical_postings_budget() == int(2 * GIB / 8 / 115)
