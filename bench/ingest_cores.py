"""How much of the machine a `ragspine ingest` of a folder uses, for settings side by side.

    .venv/bin/python bench/ingest_cores.py [--data ../shared/data/mmlongbench_dev] [--ocr off]
        [--variants "thread=RAGSPINE_RENDER_WORKERS=1,auto=RAGSPINE_RENDER_WORKERS=0"] [--rounds 2]

Each variant runs the real command (``ragspine ingest --library bench <data>/documents``, no
dense model unless a variant names one) in a fresh data dir, in turns (A B A B: these machines
are noisy), and prints its wall time, the CPU its process tree used (user + system of the
command and every worker it reaped, over wall time: 100 % is one core busy) and its ratio to
the first variant of the same round. A variant is ``name=VAR=value+VAR=value``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """``"a=X=1+Y=2,b=X=0"`` -> ``{"a": {"X": "1", "Y": "2"}, "b": {"X": "0"}}``."""
    out: dict[str, dict[str, str]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, env = part.partition("=")
        pairs = [kv.split("=", 1) for kv in env.split("+") if kv]
        if not name or any(len(kv) != 2 for kv in pairs):
            raise SystemExit(f"bad variant {part!r}: write name=VAR=value+VAR=value")
        out[name] = dict(pairs)  # type: ignore[arg-type]
    if not out:
        raise SystemExit("no variants")
    return out


def run_once(data: Path, ocr: str, env_over: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU share (1.0 = one core) and the stage summary line of one ingest."""
    tmp = Path(tempfile.mkdtemp(prefix="ragspine-cores-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update({"RAGSPINE_DATA_DIR": str(tmp), "RAGSPINE_OCR": ocr, "RAGSPINE_DENSE_MODEL": "none", **env_over})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([str(Path(sys.executable).parent / "ragspine"), "ingest", "--library", "bench",
                            str(data / "documents")], env=env, capture_output=True, text=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stages = next((ln.strip() for ln in r.stdout.splitlines() + r.stderr.splitlines()
                   if "time by stage" in ln), "")
    if "indexed" not in r.stdout:
        raise SystemExit(f"the ingest indexed nothing (exit {r.returncode}): {r.stderr[-1000:]}")
    return wall, cpu / wall, stages.rsplit("time by stage:", 1)[-1].strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--ocr", default="off", choices=["off", "auto", "full"])
    ap.add_argument("--variants", default="thread=RAGSPINE_RENDER_WORKERS=1,auto=RAGSPINE_RENDER_WORKERS=0")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    files = sorted((args.data / "documents").glob("*.pdf"))
    print(f"{len(files)} PDFs under {args.data / 'documents'}, OCR {args.ocr}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    walls: dict[str, list[float]] = {n: [] for n in variants}
    first = next(iter(variants))
    for rnd in range(args.rounds):
        order = list(variants) if rnd % 2 == 0 else list(reversed(variants))
        got = {}
        for name in order:
            wall, share, stages = run_once(args.data, args.ocr, variants[name])
            got[name] = wall
            walls[name].append(wall)
            print(f"round {rnd + 1} {name}: {wall:.1f} s, CPU {100 * share:.0f}%  [{stages}]", flush=True)
        for name in variants:
            if name != first:
                print(f"round {rnd + 1}: {name} / {first} wall x{got[name] / got[first]:.2f}")
    for name in variants:
        med = statistics.median(walls[name])
        print(f"{name}: median {med:.1f} s over {len(walls[name])} rounds "
              f"(x{med / statistics.median(walls[first]):.2f} of {first})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
