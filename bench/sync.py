"""Folder sync: a second ``ragspine sync`` of the MMLongBench dev PDFs with nothing changed.

    .venv/bin/python bench/sync.py [--data ../shared/data/mmlongbench_dev] [--keep]

Copies ``documents/*.pdf`` (48 PDFs) into a temporary folder (the shared data is never
changed) and runs the real command line, each run a fresh process, into a temporary data dir
with OCR off and no dense model (BM25 only; the ingest itself is not what is measured):

1. the first sync (every file ingested, search indexes built at the end);
2. the second sync with nothing changed (target: at most 5 s, nothing re-ingested; with OCR
   off the PDFs of scans only fail, and are not read again either);
3. one file's bytes rewritten (re-saved with PyMuPDF: same pages, new bytes) and another file
   deleted, then ``sync --delete``: exactly ``updated 1`` and ``deleted 1``.

Baselines in the same run: the first sync, hashing every file once (SHA-256, what a sync
without the size/mtime fingerprint would read at least), and a process that only imports
ragspine and opens the engine and library (the floor of any CLI command).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
LIB = "mmlb"
TARGET_S = 5.0


def cli(data_dir: Path, *args: str) -> tuple[float, list[str]]:
    """Run ``ragspine --data-dir D *args`` in a fresh process: (seconds, its stdout lines; the
    last is the summary). Exit status 1 (some file failed) is an answer, not an error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update(RAGSPINE_OCR="off", RAGSPINE_DENSE_MODEL="none")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ragspine.cli", "--data-dir", str(data_dir), *args],
                       capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    seconds = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise SystemExit(f"ragspine {' '.join(args)} exited {p.returncode}")
    return seconds, p.stdout.strip().splitlines()


def counts(summary: str) -> dict[str, int]:
    """``added 3, updated 1, ...`` -> ``{"added": 3, "updated": 1, ...}``."""
    return {k: int(v) for k, v in (part.split(" ") for part in summary.split(", "))}


def open_only(data_dir: Path) -> float:
    """Seconds for a process that imports ragspine and opens the engine and the library."""
    code = ("from ragspine.config import load_settings; from ragspine.engine import Engine; "
            f"e = Engine(load_settings(data_dir={str(data_dir)!r})); e.library({LIB!r}); e.close()")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update(RAGSPINE_OCR="off", RAGSPINE_DENSE_MODEL="none")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    args = ap.parse_args()

    import pymupdf

    src = sorted((args.data / "documents").glob("*.pdf"))
    if not src:
        print(f"no PDFs under {args.data / 'documents'}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ragspine-bench-sync-"))
    try:
        folder, data_dir = tmp / "documents", tmp / "data"
        folder.mkdir()
        for p in src:
            shutil.copy2(p, folder / p.name)
        pages = 0
        for p in src:
            with pymupdf.open(p) as doc:
                pages += doc.page_count
        size = sum(p.stat().st_size for p in src)
        print(f"{len(src)} PDFs, {pages} pages, {size / 1e6:.0f} MB; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")

        first_s, lines = cli(data_dir, "sync", str(folder), "--library", LIB, "-q")
        first = counts(lines[-1])
        failed = [line for line in lines[:-1] if ": failed: " in line]
        indexed = sorted(line.split(":")[0] for line in lines[:-1] if ": added: " in line)
        print(f"first sync:  {first_s:6.1f} s  {lines[-1]}")
        for line in failed:  # with OCR off, a PDF of scans only has no text to index
            print(f"  {line[:160]}")

        t0 = time.perf_counter()
        for p in sorted(folder.glob("*.pdf")):
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        hash_s = time.perf_counter() - t0
        floor_s = open_only(data_dir)

        second_s, lines = cli(data_dir, "sync", str(folder), "--library", LIB, "-q")
        second = lines[-1]
        verdict = "within" if second_s <= TARGET_S else "OVER"
        print(f"second sync: {second_s:6.2f} s  {second}  ({verdict} the {TARGET_S:.0f} s target)")
        print(f"  baselines: first sync {first_s:.1f} s (ratio {second_s / first_s:.3f}); hashing every file "
              f"{hash_s:.2f} s; a process that only opens the engine {floor_s:.2f} s "
              f"(the sync's own work {second_s - floor_s:+.2f} s)")
        n_ok, n_failed = first["added"], first["failed"]
        assert second == f"added 0, updated 0, unchanged {n_ok}, deleted 0, failed {n_failed}", second
        print(f"  re-ingested: none ({n_failed} files that cannot be indexed were not read again)")

        changed, removed = folder / indexed[0], folder / indexed[1]
        with pymupdf.open(changed) as doc:
            data = doc.tobytes(garbage=3, deflate=True)  # the same pages, written anew
        before = changed.read_bytes()
        changed.write_bytes(data)
        removed.unlink()
        print(f"rewrote {changed.name} ({len(before)} -> {len(data)} bytes, "
              f"{'new' if data != before else 'SAME'} bytes), deleted {removed.name}")
        third_s, lines = cli(data_dir, "sync", str(folder), "--library", LIB, "--delete", "-q")
        print(f"third sync (--delete): {third_s:.2f} s  {lines[-1]}")
        want = f"added 0, updated 1, unchanged {n_ok - 2}, deleted 1, failed {n_failed}"
        assert lines[-1] == want, (lines[-1], want)
        fourth_s, lines = cli(data_dir, "sync", str(folder), "--library", LIB, "--delete", "-q")
        print(f"fourth sync: {fourth_s:.2f} s  {lines[-1]}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
