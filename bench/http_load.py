"""HTTP load benchmark: BM25 searches against a real ``ragspine serve`` process.

    .venv/bin/python bench/http_load.py [--data ../shared/data/mmlongbench_dev] [--docs N]
                                        [--clients 8] [--requests 2000] [--duration 60]
                                        [--ingest api|cli] [--data-dir DIR]

1. Start ``ragspine serve`` on a free 127.0.0.1 port with ``RAGSPINE_DATA_DIR`` set to a
   fresh temporary folder (or ``--data-dir``), and wait for ``/healthz``.
2. Ingest the dataset's PDFs (all 48 of mmlongbench_dev, or the first ``--docs N``) into
   library ``bench``: through the API (``POST .../documents?wait=true``, one at a time), or
   with ``--ingest cli`` through ``ragspine ingest`` before the server starts (the embedded
   store is single-process).
3. Drive ``--clients`` concurrent clients (threads, one keep-alive ``httpx.Client`` each)
   issuing ``POST /v1/search`` in BM25 mode with the dataset's questions (queries.jsonl,
   cycled), until ``--requests`` are done or ``--duration`` seconds have passed. Also one
   client alone, for the HTTP cost of a single request.
4. Baseline in the same run: with the server stopped, open the same data dir with ``Engine``
   in this process and run the same questions through ``Engine.search`` single-threaded,
   once before and once after the HTTP runs (the embedded store is single-process). Print
   queries/s, p50/p99 latency, errors, and the ratios against both runs together; check on a
   sample that HTTP and in-process answers rank the same pages.

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
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
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[i]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def ragspine_command() -> list[str]:
    script = Path(sys.executable).with_name("ragspine")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ragspine.cli"]


def clean_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env["RAGSPINE_DATA_DIR"] = str(data_dir)
    return env


@contextlib.contextmanager
def serve(data_dir: Path, log_path: Path, timeout: float = 120.0) -> Iterator[str]:
    """``ragspine serve`` on a free port; yields the base URL; always terminates it."""
    port = free_port()
    log = open(log_path, "ab")
    proc = subprocess.Popen([*ragspine_command(), "serve", "--host", HOST, "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=clean_env(data_dir))
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"ragspine serve exited with {proc.returncode}; see {log_path}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"ragspine serve did not answer /healthz in {timeout:.0f}s; see {log_path}")
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        log.close()


def load_queries(data: Path) -> list[str]:
    out = []
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = str(json.loads(line)["text"]).strip()
                if q:
                    out.append(q)
    return out


def ingest_api(base: str, files: list[Path]) -> tuple[int, int, float]:
    """Upload every file with wait=true; returns (pages indexed, failures, seconds)."""
    pages = failed = 0
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, timeout=900) as c:
        r = c.post("/v1/libraries", json={"name": LIBRARY})
        if r.status_code not in (201, 409):
            raise SystemExit(f"cannot create library: {r.status_code} {r.text}")
        for n, path in enumerate(files, 1):
            with open(path, "rb") as fh:
                r = c.post(f"/v1/libraries/{LIBRARY}/documents", params={"wait": "true"},
                           files={"file": (path.name, fh, "application/pdf")})
            if r.status_code == 201:
                pages += int(r.json()["result"]["pages_indexed"])
            else:
                failed += 1
                print(f"  {path.name}: {r.status_code} {r.text[:200]}", file=sys.stderr)
            print(f"\r  ingested {n}/{len(files)} PDFs, {pages} pages", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return pages, failed, time.perf_counter() - t0


def ingest_cli(data_dir: Path, files: list[Path]) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    r = subprocess.run([*ragspine_command(), "ingest", *map(str, files), "--library", LIBRARY, "-q"],
                       capture_output=True, text=True, env=clean_env(data_dir))
    seconds = time.perf_counter() - t0
    pages = sum(int(line.split(": ", 2)[2].split(" pages")[0].split()[-1])
                for line in r.stdout.splitlines() if ": indexed " in line)
    failed = sum(1 for line in r.stdout.splitlines() if ": error: " in line)
    if r.returncode not in (0, 1):
        raise SystemExit(f"ragspine ingest failed: {r.stderr.strip()}")
    return pages, failed, seconds


@dataclass
class LoadResult:
    clients: int
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def done(self) -> int:
        return len(self.latencies) + sum(self.errors.values())


def drive(base: str, queries: list[str], clients: int, max_requests: int, max_seconds: float,
          top_k: int) -> LoadResult:
    """``clients`` threads, each with its own keep-alive client, pull the next query from a
    shared counter until ``max_requests`` were issued or ``max_seconds`` passed."""
    res = LoadResult(clients)
    lock = threading.Lock()
    counter = itertools.count()
    start = time.perf_counter()
    deadline = start + max_seconds

    def worker() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            while True:
                i = next(counter)
                if i >= max_requests or time.perf_counter() > deadline:
                    return
                body = {"query": queries[i % len(queries)], "libraries": [LIBRARY], "mode": "bm25",
                        "top_k": top_k}
                t0 = time.perf_counter()
                try:
                    r = c.post("/v1/search", json=body)
                    dt = time.perf_counter() - t0
                    ok = r.status_code == 200
                    err = None if ok else f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    dt, err = time.perf_counter() - t0, type(exc).__name__
                with lock:
                    if err is None:
                        res.latencies.append(dt)
                    else:
                        res.errors[err] += 1

    threads = [threading.Thread(target=worker, name=f"client-{k}") for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res.seconds = time.perf_counter() - start
    return res


def http_answers(base: str, queries: list[str], top_k: int) -> list[list[tuple[str, int]]]:
    with httpx.Client(base_url=base, timeout=60) as c:
        out = []
        for q in queries:
            r = c.post("/v1/search", json={"query": q, "libraries": [LIBRARY], "mode": "bm25", "top_k": top_k})
            r.raise_for_status()
            out.append([(h["doc_id"], h["page"]) for h in r.json()["hits"]])
        return out


def in_process(data_dir: Path, queries: list[str], n: int, top_k: int, sample: int
               ) -> tuple[list[float], float, list[list[tuple[str, int]]]]:
    """The same questions through ``Engine.search``, one at a time, in this process."""
    from ragspine.config import Settings
    from ragspine.engine import Engine
    from ragspine.retrieval.search import SearchRequest

    with contextlib.ExitStack() as stack:
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("RAGSPINE_")}
        stack.callback(os.environ.update, saved)
        engine = Engine(Settings(data_dir=data_dir))
        stack.callback(engine.close)
        reqs = [SearchRequest(query=queries[i % len(queries)], libraries=[LIBRARY], mode="bm25", top_k=top_k)
                for i in range(n)]
        for r in reqs[:20]:  # warm-up, as the HTTP runs had
            engine.search(r)
        lat = []
        t_all = time.perf_counter()
        for r in reqs:
            t0 = time.perf_counter()
            engine.search(r)
            lat.append(time.perf_counter() - t0)
        total = time.perf_counter() - t_all
        answers = [[(h.doc_id, h.page) for h in engine.search(
            SearchRequest(query=q, libraries=[LIBRARY], mode="bm25", top_k=top_k)).hits] for q in queries[:sample]]
        return lat, total, answers


def row(name: str, lat: list[float], seconds: float, errors: int) -> str:
    n = len(lat)
    qps = n / seconds if seconds > 0 else float("nan")
    mean = 1000 * statistics.fmean(lat) if lat else float("nan")
    return (f"{name:44s} {n:7d} {qps:9.1f} {1000 * pct(lat, 50):8.2f} {1000 * pct(lat, 99):8.2f} "
            f"{mean:8.2f} {errors:7d}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="dataset with documents/*.pdf and queries.jsonl")
    ap.add_argument("--docs", type=int, default=None, help="ingest only the first N PDFs (default: all)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    ap.add_argument("--requests", type=int, default=2000, help="search requests in the concurrent run")
    ap.add_argument("--duration", type=float, default=60.0, help="stop the concurrent run after this many s")
    ap.add_argument("--single-requests", type=int, default=300, help="requests of the one-client run")
    ap.add_argument("--baseline-requests", type=int, default=1000,
                    help="queries of each in-process baseline run (before and after)")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--ingest", choices=["api", "cli"], default="api")
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the index here (default: a temp dir)")
    ap.add_argument("--sample", type=int, default=50, help="queries whose HTTP and in-process answers are compared")
    args = ap.parse_args()
    if not (args.data / "documents").is_dir() or not (args.data / "queries.jsonl").is_file():
        print(f"no dataset at {args.data} (expected documents/*.pdf and queries.jsonl); pass --data",
              file=sys.stderr)
        return 2
    if min(args.clients, args.requests, args.single_requests, args.baseline_requests) < 1 or args.duration <= 0:
        print("--clients, --requests, --single-requests, --baseline-requests and --duration must be positive",
              file=sys.stderr)
        return 2

    files = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    queries = load_queries(args.data)
    tmp = None
    if args.data_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="ragspine-http-load-"))
        data_dir = tmp / "data"
    else:
        data_dir = args.data_dir
    log_path = (tmp or data_dir.parent) / "serve.log"
    n_inproc = args.baseline_requests
    try:
        if args.ingest == "cli":
            pages, failed, ingest_s = ingest_cli(data_dir, files)
        else:
            with serve(data_dir, log_path) as base:
                pages, failed, ingest_s = ingest_api(base, files)
        # The in-process baseline runs before and after the HTTP runs (the embedded store is
        # single-process, so never at the same time): both are printed, so drift shows.
        lat_a, total_a, inproc_sample = in_process(data_dir, queries, n_inproc, args.top_k, args.sample)
        with serve(data_dir, log_path) as base:
            http_sample = http_answers(base, queries[: args.sample], args.top_k)  # also warms up
            single = drive(base, queries, 1, args.single_requests, args.duration, args.top_k)
            many = drive(base, queries, args.clients, args.requests, args.duration, args.top_k)
        lat_b, total_b, _ = in_process(data_dir, queries, n_inproc, args.top_k, 0)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    lat, total = lat_a + lat_b, total_a + total_b

    same = sum(a == b for a, b in zip(http_sample, inproc_sample))
    print(f"dataset: {args.data}  ({len(files)} PDFs, {pages} pages indexed, {failed} failed; "
          f"{len(queries)} distinct questions, BM25 mode, top {args.top_k})")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; server: ragspine serve "
          f"(uvicorn, 1 process) on {HOST}")
    print(f"ingest via {args.ingest}: {pages} pages in {ingest_s:.1f} s = {pages / ingest_s:.1f} pages/s")
    print()
    print(f"{'search path':44s} {'ok':>7s} {'q/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'errors':>7s}")
    print(row("in-process Engine.search, 1 thread, before", lat_a, total_a, 0))
    print(row("in-process Engine.search, 1 thread, after", lat_b, total_b, 0))
    print(row("in-process Engine.search, 1 thread, both", lat, total, 0))
    print(row("HTTP, 1 client", single.latencies, single.seconds, sum(single.errors.values())))
    print(row(f"HTTP, {args.clients} concurrent clients", many.latencies, many.seconds, sum(many.errors.values())))
    in_qps = len(lat) / total
    many_qps = len(many.latencies) / many.seconds if many.seconds else float("nan")
    single_qps = len(single.latencies) / single.seconds if single.seconds else float("nan")
    print()
    print(f"ratio HTTP {args.clients} clients / in-process, q/s:   {many_qps / in_qps:6.2f}")
    print(f"ratio HTTP 1 client / in-process, q/s:    {single_qps / in_qps:6.2f}")
    print(f"ratio HTTP {args.clients} clients / in-process, p50:   {pct(many.latencies, 50) / pct(lat, 50):6.2f}")
    print(f"HTTP cost per request (1 client p50 - in-process p50): "
          f"{1000 * (pct(single.latencies, 50) - pct(lat, 50)):.2f} ms")
    if many.done < args.requests:
        print(f"(the concurrent run stopped at the {args.duration:.0f} s limit after {many.done} requests)")
    if many.errors or single.errors:
        print(f"errors: {dict(single.errors + many.errors)}")
    print(f"same top-{args.top_k} pages over HTTP and in process: {same}/{len(http_sample)} sampled questions")
    return 0 if not (many.errors or single.errors) and same == len(http_sample) else 1


if __name__ == "__main__":
    sys.exit(main())
