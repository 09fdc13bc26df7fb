"""Resident memory of ``ragspine serve`` with no model configured: idle, and after a first
ingest and search (OCR off), with whatever extras this venv has installed (the GPU extra's
torch among them).

    .venv/bin/python bench/idle_memory.py [--src DIR]   # --src: run another tree's code (a baseline)

Prints VmRSS and the heavy packages the server process has imported (read from its
/proc/PID/maps: which shared libraries are mapped).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "serving"))
sys.path.insert(0, str(ROOT / "tests"))

import pdfs  # noqa: E402
from serving_kit import serve_process  # noqa: E402

#: Shared libraries whose mapping says a stack was imported.
MARKERS = {"torch": "libtorch", "openvino": "libopenvino", "onnxruntime": "onnxruntime", "cuda": "libcudart"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def mapped(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted(name for name, marker in MARKERS.items() if marker in maps)


def server_pid(port: int) -> int:
    """The pid listening on ``port`` (the serve process, not a wrapper)."""
    import psutil

    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == "LISTEN" and conn.pid:
            return conn.pid
    raise RuntimeError(f"nothing listens on {port}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=None, help="PYTHONPATH of the code to run (default: this tree)")
    args = ap.parse_args()
    env = {"RAGSPINE_DENSE_MODEL": "none", "RAGSPINE_OCR": "off"}
    if args.src:
        env["PYTHONPATH"] = args.src
    with tempfile.TemporaryDirectory(prefix="ragspine-idle-") as tmp, serve_process(Path(tmp) / "data", env=env) as url:
        pid = server_pid(int(url.rsplit(":", 1)[1]))
        idle = rss_mb(pid)
        idle_maps = mapped(pid)
        httpx.post(f"{url}/v1/libraries", json={"name": "idle"}).raise_for_status()
        pdf = pdfs.make_pdf(["Revenue grew by twelve percent.", "Operating margin improved."])
        httpx.post(f"{url}/v1/libraries/idle/documents", params={"wait": "true"},
                   files={"file": ("a.pdf", pdf, "application/pdf")}, timeout=120).raise_for_status()
        httpx.post(f"{url}/v1/search", json={"query": "revenue", "libraries": ["idle"]}).raise_for_status()
        used = rss_mb(pid)
        print(f"code: {args.src or ROOT / 'src'}")
        print(f"idle (after /healthz):          {idle:7.1f} MB RSS   stacks mapped: {', '.join(idle_maps) or 'none'}")
        print(f"after one ingest and a search:  {used:7.1f} MB RSS   stacks mapped: {', '.join(mapped(pid)) or 'none'}")
        print(f"target: idle <= 250 MB with no model configured; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
