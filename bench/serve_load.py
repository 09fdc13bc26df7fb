"""Serving overhead of Ray Serve: the same concurrent load against ``ragspine serve --engine
local`` and ``--engine ray``, on the same index.

    .venv/bin/python bench/serve_load.py [--data ../shared/data/mmlongbench_dev] [--docs 8]
                                         [--mode bm25|hybrid] [--clients 8] [--duration 30]

1. Index the first ``--docs`` PDFs of the dataset once with ``ragspine ingest`` into a fresh
   data dir. ``--mode hybrid`` also builds a tiny random-weight page model
   (:mod:`ragspine.models.testing`) and indexes page images with it, so every search crosses to
   a model: in-process locally, the QueryEncoder deployment under Ray (the hop being measured;
   the tiny model's own cost is a few ms on CPU).
2. For each engine in turn (the embedded store is single-process): start ``ragspine serve
   --engine ENGINE`` on a free 127.0.0.1 port, warm up, then drive ``--clients`` concurrent
   clients (threads with keep-alive connections) over the dataset's questions for
   ``--duration`` seconds, then one client alone; stop the server (SIGTERM: Ray shuts down).
3. Print queries/s, p50/p99 latency and errors per run, the ray/local ratios, and whether both
   engines ranked a sample of questions identically.

Only 127.0.0.1 is ever contacted; every server started is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
LIBRARY = "bench"
HOST = "127.0.0.1"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def ragspine() -> list[str]:
    return [sys.executable, "-m", "ragspine.cli"]


def env_for(data_dir: Path, page_model: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update({"RAGSPINE_DATA_DIR": str(data_dir), "RAGSPINE_RERANKER": "none",
                "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    if page_model is not None:
        env.update({"RAGSPINE_PAGE_MODEL": str(page_model), "RAGSPINE_DEVICE": "cpu"})
    return env


@contextlib.contextmanager
def server(engine: str, env: dict[str, str], log_path: Path, timeout: float = 240.0) -> Iterator[str]:
    """``ragspine serve --engine ENGINE``; yields the base URL once /readyz answers 200."""
    port = free_port()
    log = open(log_path, "ab")
    proc = subprocess.Popen([*ragspine(), "serve", "--engine", engine, "--host", HOST, "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"ragspine serve --engine {engine} exited ({proc.returncode}); see {log_path}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/readyz", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"--engine {engine} not ready after {timeout:.0f}s; see {log_path}")
            time.sleep(0.25)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # our own process group only
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def load_queries(data: Path) -> list[str]:
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        return [q for line in fh if line.strip() and (q := str(json.loads(line)["text"]).strip())]


@dataclass
class Run:
    name: str
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    degraded: int = 0
    seconds: float = 0.0

    @property
    def qps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")

    def line(self) -> str:
        lat = self.latencies
        mean = 1000 * statistics.fmean(lat) if lat else float("nan")
        return (f"{self.name:34s} {len(lat):6d} {self.qps:8.1f} {1000 * pct(lat, 50):8.2f} "
                f"{1000 * pct(lat, 99):8.2f} {mean:8.2f} {self.errors:6d} {self.degraded:6d}")


def drive(base: str, name: str, queries: list[str], mode: str, clients: int, seconds: float,
          top_k: int) -> Run:
    run = Run(name)
    lock = threading.Lock()
    counter = itertools.count()
    start = time.perf_counter()
    deadline = start + seconds

    def worker() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            while time.perf_counter() < deadline:
                q = queries[next(counter) % len(queries)]
                t0 = time.perf_counter()
                try:
                    r = c.post("/v1/search", json={"query": q, "libraries": [LIBRARY], "mode": mode,
                                                    "top_k": top_k})
                    ok, degraded = r.status_code == 200, r.status_code == 200 and r.json()["degraded"]
                except httpx.HTTPError:
                    ok, degraded = False, False
                dt = time.perf_counter() - t0
                with lock:
                    if ok:
                        run.latencies.append(dt)
                        run.degraded += int(degraded)
                    else:
                        run.errors += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.seconds = time.perf_counter() - start
    return run


def rankings(base: str, queries: list[str], mode: str, top_k: int) -> list[list[tuple[str, int, str]]]:
    with httpx.Client(base_url=base, timeout=60) as c:
        out = []
        for q in queries:
            r = c.post("/v1/search", json={"query": q, "libraries": [LIBRARY], "mode": mode, "top_k": top_k})
            r.raise_for_status()
            out.append([(h["doc_id"], h["page"], h["chunk_id"]) for h in r.json()["hits"]])
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="documents/*.pdf and queries.jsonl")
    ap.add_argument("--docs", type=int, default=8, help="index the first N PDFs (default 8)")
    ap.add_argument("--mode", choices=["bm25", "hybrid"], default="bm25",
                    help="bm25: CPU path only; hybrid: + visual channel with a tiny page model")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of the concurrent run")
    ap.add_argument("--single-duration", type=float, default=10.0, help="seconds of the one-client run")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=30, help="questions whose rankings are compared")
    args = ap.parse_args()

    files = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    if not files:
        raise SystemExit(f"no PDFs under {args.data / 'documents'}")
    queries = load_queries(args.data)
    work = Path(tempfile.mkdtemp(prefix="ragspine-serve-load-"))
    try:
        page_model = None
        if args.mode == "hybrid":
            from ragspine.models import testing

            page_model = testing.build("colpali", work / "tiny-colpali")
        env = env_for(work / "data", page_model)
        t0 = time.perf_counter()
        r = subprocess.run([*ragspine(), "ingest", *map(str, files), "--library", LIBRARY, "-q"],
                           env=env, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit(f"ingest failed: {r.stderr.strip()[-500:]}")
        print(f"indexed {len(files)} PDFs in {time.perf_counter() - t0:.1f}s "
              f"({sum(1 for ln in r.stdout.splitlines() if ': indexed ' in ln)} ok); mode {args.mode}; "
              f"{os.cpu_count()} CPUs", file=sys.stderr)

        runs: dict[str, list[Run]] = {}
        answers: dict[str, list] = {}
        for engine in ("local", "ray"):
            t0 = time.perf_counter()
            with server(engine, env, work / f"serve-{engine}.log") as base:
                print(f"--engine {engine} ready in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
                drive(base, "warm-up", queries, args.mode, args.clients, 3.0, args.top_k)
                runs[engine] = [
                    drive(base, f"{engine}: {args.clients} clients", queries, args.mode, args.clients,
                          args.duration, args.top_k),
                    drive(base, f"{engine}: 1 client", queries, args.mode, 1, args.single_duration, args.top_k),
                ]
                answers[engine] = rankings(base, queries[: args.sample], args.mode, args.top_k)

        print(f"\n{'run':34s} {'ok':>6s} {'q/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} "
              f"{'errors':>6s} {'degr.':>6s}")
        for engine in ("local", "ray"):
            for run in runs[engine]:
                print(run.line())
        print()
        for i, label in enumerate((f"{args.clients} clients", "1 client")):
            lo, ra = runs["local"][i], runs["ray"][i]
            p50r, p50l = pct(ra.latencies, 50), pct(lo.latencies, 50)
            print(f"ray/local, {label:11s}: q/s x{ra.qps / lo.qps:.2f}, p50 x{p50r / p50l:.2f}, "
                  f"p99 x{pct(ra.latencies, 99) / pct(lo.latencies, 99):.2f}; "
                  f"added p50 {1000 * (p50r - p50l):+.1f} ms")
        same = sum(a == b for a, b in zip(answers["local"], answers["ray"]))
        print(f"identical rankings on {same}/{len(answers['local'])} sampled questions")
        return 0 if same == len(answers["local"]) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
