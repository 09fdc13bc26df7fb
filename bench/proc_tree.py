"""Run a command and report what it and every process it starts used: wall seconds, CPU seconds
and CPU % (100 % is one core busy), and the peak resident memory summed over the process tree.

    .venv/bin/python bench/proc_tree.py [--every 0.25] -- COMMAND [ARGS...]

``/usr/bin/time`` reports the largest single process only; ragspine's OCR workers are separate
processes, so the sum over the tree is what a machine must hold. Two sums are sampled: RSS
(counts a shared library once per process that maps it, so it overstates) and PSS (each shared
page divided among the processes sharing it: what the tree really holds). The load average at
start and end is printed beside the figures: on a shared 2-core machine other work inflates them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time


class TreeMemory:
    """Peak resident memory (RSS and PSS sums) of a process and all its descendants."""

    def __init__(self, pid: int | None = None, every: float = 0.1, pss: bool = False) -> None:
        import psutil

        self._root = psutil.Process(pid)
        self.every, self.pss = every, pss
        self.peak = self.peak_pss = 0
        #: Peak PSS of the root process alone and of its descendants together (where the memory is).
        self.peak_root_pss = self.peak_children_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int]:
        rss = pss = root_pss = 0
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except Exception:  # the root has exited
            return 0, 0
        for p in procs:
            try:
                if self.pss:
                    info = p.memory_full_info()
                    rss, pss = rss + info.rss, pss + info.pss
                    if p is self._root:
                        root_pss = info.pss
                else:
                    rss += p.memory_info().rss
            except Exception:  # gone meanwhile, or not ours to read
                pass
        self.peak_root_pss = max(self.peak_root_pss, root_pss)
        self.peak_children_pss = max(self.peak_children_pss, pss - root_pss)
        return rss, pss

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            rss, pss = self.sample()
            self.peak, self.peak_pss = max(self.peak, rss), max(self.peak_pss, pss)

    def __enter__(self) -> "TreeMemory":
        self.peak, self.peak_pss = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=0.25, help="seconds between memory samples")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command to run after --")
    if args.every <= 0:
        ap.error("--every must be positive")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    with TreeMemory(proc.pid, args.every, pss=True) as mem:
        code = proc.wait()
    wall = time.perf_counter() - t0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and everything it waited for
    cpu = kids.ru_utime + kids.ru_stime
    print(json.dumps({"exit": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                      "cpu_pct": round(100 * cpu / wall), "peak_tree_rss_mb": round(mem.peak / 2**20),
                      "peak_tree_pss_mb": round(mem.peak_pss / 2**20),
                      "peak_root_pss_mb": round(mem.peak_root_pss / 2**20),
                      "peak_children_pss_mb": round(mem.peak_children_pss / 2**20), "load_avg_start": round(load0, 2),
                      "load_avg_end": round(os.getloadavg()[0], 2)}), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
