"""What this process may use of the machine: memory and cores, as a container's cgroup limits
them, not as the host has them (a pod of 4 GiB on a 256 GiB node must size itself for 4).

Defaults that scale with the machine are derived from here (``RAGSPINE_LEXICAL_MAX_POSTINGS``
unset). Every reader takes its paths as arguments so that tests can give it a cgroup of their
own.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
#: Above this a cgroup "limit" means none (cgroup v1 writes 2^63 rounded down to the page).
_UNLIMITED = 1 << 60


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().split()[0]
    except (OSError, IndexError):
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _UNLIMITED else None


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(cgroup: Path = CGROUP, physical: int | None = None) -> int | None:
    """Bytes this process may use: the cgroup's limit (v2 ``memory.max``, v1
    ``memory/memory.limit_in_bytes``) when there is one below the machine's RAM, else the RAM;
    ``None`` when neither can be read."""
    ram = physical if physical is not None else physical_memory()
    limits = [v for v in (_read_int(cgroup / "memory.max"), _read_int(cgroup / "memory" / "memory.limit_in_bytes"))
              if v is not None]
    if ram is not None:
        limits.append(ram)
    return min(limits) if limits else None


def usable_cpus(cgroup: Path = CGROUP, affinity: int | None = None) -> int:
    """Cores this process may run on: its CPU affinity, bounded by the cgroup's quota (v2
    ``cpu.max`` "QUOTA PERIOD", v1 ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), rounded
    up; at least 1."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    n = float(affinity)
    quota = period = None
    try:
        parts = (cgroup / "cpu.max").read_text().split()
        if len(parts) == 2 and parts[0] != "max":
            quota, period = int(parts[0]), int(parts[1])
    except (OSError, ValueError):
        pass
    if quota is None:
        q, p = _read_int(cgroup / "cpu" / "cpu.cfs_quota_us"), _read_int(cgroup / "cpu" / "cpu.cfs_period_us")
        if q is not None and p is not None:
            quota, period = q, p
    if quota is not None and period:
        n = min(n, quota / period)
    return max(1, int(-(-n // 1)))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (another user's counts as running:
    not ours to touch)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
