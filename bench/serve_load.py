"""Serving overhead of Ray Serve: the same concurrent load against ``ragspine serve --engine
local`` and ``--engine ray``, on the same index.

    .venv/bin/python bench/serve_load.py [--data ../shared/data/mmlongbench_dev] [--docs 8]
                                         [--mode bm25|hybrid] [--clients 8] [--duration 30]

1. Index the first ``--docs`` PDFs of the dataset once with ``ragspine ingest`` into a fresh
   data dir. ``--mode hybrid`` also builds a tiny random-weight page model
   (:mod:`ragspine.models.testing`) and indexes page images with it, so every search crosses to
   a model: in-process locally, the QueryEncoder deployment under Ray (the hop being measured;
   the tiny model's own cost is a few ms on CPU). ``--page-size full --device cuda`` builds the
   real architecture of ``--page-family`` instead (random weights, bf16) and runs it on the GPU:
   with ``--threads "plain=RAGSPINE_QUERY_GRAPHS=off,graphs=auto"`` that measures queries a
   second through the server with and without CUDA graphs (``bench/gpu_checks.sh``).
2. For each engine in turn (the embedded store is single-process): start ``ragspine serve
   --engine ENGINE`` on a free 127.0.0.1 port, warm up, then drive ``--clients`` concurrent
   clients (threads with keep-alive connections) over the dataset's questions for
   ``--duration`` seconds, then one client alone; stop the server (SIGTERM: Ray shuts down).
3. Print queries/s, p50/p99 latency and errors per run, the ray/local ratios, and whether both
   engines ranked a sample of questions identically.

With ``--replicas 1,2`` it measures cluster mode instead: Ray Serve with 1, then 2, Ingress
replicas over one shared Qdrant (``bench/qdrant_actor.py``: the client's in-process double in a
Ray actor, since no Qdrant server runs on the development machines; it applies one call at a
time, so it is the bottleneck a real server is not), writer leases on. Per replica count: a
fresh library, the first ``--docs`` PDFs ingested, then ``--clients`` search clients *and* one
ingest client uploading the next PDFs (job polls spread over the replicas) for ``--duration``
seconds. Printed per count: search q/s, p50/p99, 5xx answers (must be 0), uploads and their
outcome, and documents lost (must be 0: every succeeded upload is listed with all its pages
and found by a search for its own words).

With ``--ocr-uploads N`` it measures searches while OCR runs, on ``--engine local`` only: the
same search load twice on one server, first alone, then while one client uploads the N PDFs of
the dataset that need the most OCR (not among the indexed ones), one after another, each under a
fresh document id, until the run ends. The server runs with its defaults (OCR worker processes,
niced, one per core; ``--ocr-workers N`` sets ``RAGSPINE_OCR_WORKERS``). Printed: search q/s,
p50/p99 of both runs and their p99 ratio (the target is at most 2), the uploads finished, and
the pages OCR read during the run (with those of an upload still in flight at its end).
``--trace FILE`` also writes every search's start and latency and the uploads' job states as
JSON lines, and the server's log beside it: what lines a slow search up with (docs/measured.md,
"OCR workers niced against the whole machine").

With ``--threads RULES`` it compares thread settings of ``ragspine serve --engine local`` on one
index: RULES is ``name=BLAS:RUNTIME`` items separated by commas (``auto`` for ragspine's rule,
RAGSPINE_BLAS_THREADS / RAGSPINE_RUNTIME_THREADS unset), e.g. ``today=2:2,rule=auto``, or any
settings as ``name=RAGSPINE_X=1+RAGSPINE_Y=2`` (``one=RAGSPINE_QUERY_BATCH_SIZE=1,batched=auto``)
(numpy's and torch's own defaults on 2 cores are 2 and 2). Each rule's server runs
``--clients-list`` (default 1,4,16) concurrent clients for ``--duration`` seconds each, and the
rules take turns for ``--rounds`` rounds (ABBA...), so drift on a shared machine falls on
both. The server's environment has no ``OMP_NUM_THREADS`` here (the other runs pin it to 1),
so the rules are what set the pools. Printed per rule and client count: q/s, p50, p99 over
the rounds, and each rule's ratios to the first.

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
from typing import Any

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


def env_for(data_dir: Path, page_model: Path | None, device: str = "cpu") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSPINE_")}
    env.update({"RAGSPINE_DATA_DIR": str(data_dir), "RAGSPINE_RERANKER": "none",
                "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    if page_model is not None:
        env.update({"RAGSPINE_PAGE_MODEL": str(page_model), "RAGSPINE_DEVICE": device})
    return env


def page_model_for(args: argparse.Namespace, work: Path) -> Path:
    """The random page model a hybrid run searches with (tiny, or the full architecture)."""
    from ragspine.models import testing

    dtype = None
    if args.page_size == "full" and args.device.startswith("cuda"):
        import torch

        dtype = torch.bfloat16
    t0 = time.perf_counter()
    folder = testing.build_page_model(args.page_family, work / f"{args.page_size}-{args.page_family}",
                                      size=args.page_size, device=args.device, dtype=dtype)
    print(f"built a random {args.page_size} {args.page_family} in {time.perf_counter() - t0:.1f}s "
          f"({args.device})", file=sys.stderr)
    if dtype is not None:  # the servers load their own copy: give the device memory back
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
    return folder


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
            # Interrupted (a time limit's SIGINT, Ctrl-C): whoever interrupted may kill this process
            # soon (gpu_checks.sh: 10 s later), and the server, in its own session, would outlive
            # it holding its model: give it 5 s, not 60.
            interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
            try:
                proc.wait(timeout=5 if interrupted else 60)
            except subprocess.TimeoutExpired:  # our own process group only
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def threads_run(env: dict[str, str], work: Path, queries: list[str], mode: str, rules: str, clients: list[int],
                duration: float, rounds: int, top_k: int, json_path: Path | None = None,
                about: dict[str, str] | None = None) -> int:
    """``--threads``: see the module docstring."""
    parsed: dict[str, dict[str, str]] = {}
    for item in (x.strip() for x in rules.split(",") if x.strip()):
        name, _, spec = item.partition("=")
        if spec == "auto":
            parsed[name] = {}
        elif spec.startswith("RAGSPINE_"):  # any settings: name=RAGSPINE_X=1+RAGSPINE_Y=2
            parsed[name] = dict(kv.split("=", 1) for kv in spec.split("+"))
        else:
            blas, _, runtime = spec.partition(":")
            parsed[name] = {"RAGSPINE_BLAS_THREADS": blas, "RAGSPINE_RUNTIME_THREADS": runtime}
    base_env = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}
    runs: dict[tuple[str, int], list[Run]] = {}
    names = list(parsed)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            with server("local", {**base_env, **parsed[name]}, work / f"serve-threads-{name}.log") as base:
                drive(base, "warm-up", queries, mode, max(clients), 3.0, top_k)
                for n in clients:
                    runs.setdefault((name, n), []).append(
                        drive(base, f"{name}: {n} clients", queries, mode, n, duration, top_k))
                    if json_path is not None:  # after each run: one cut off by a time limit keeps the rest
                        write_json(json_path, {**(about or {}), "rows": rows_of(merge(runs))})
    print(f"\n{'rule':10s} {'clients':>7s} {'ok':>6s} {'q/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>6s}")
    merged = merge(runs)
    for row in rows_of(merged):
        print(f"{row['rule']:10s} {row['clients']:7d} {row['ok']:6d} {row['qps']:8.1f} {row['p50_ms']:8.2f} "
              f"{row['p99_ms']:8.2f} {row['errors']:6d}")
    first = names[0]
    for name in names[1:]:
        for n in clients:
            a, b = merged[(name, n)], merged[(first, n)]
            print(f"{name}/{first}, {n:2d} clients: q/s x{a.qps / b.qps:.3f}, p50 x{pct(a.latencies, 50) / pct(b.latencies, 50):.3f}, "
                  f"p99 x{pct(a.latencies, 99) / pct(b.latencies, 99):.3f}")
    return 0


def merge(runs: dict[tuple[str, int], list[Run]]) -> dict[tuple[str, int], Run]:
    """The rounds of each (rule, clients) as one run."""
    merged = {}
    for (name, n), rs in runs.items():
        m = Run(f"{name}: {n} clients")
        for x in rs:
            m.latencies += x.latencies
            m.errors += x.errors
            m.seconds += x.seconds
        merged[(name, n)] = m
    return merged


def rows_of(merged: dict[tuple[str, int], Run]) -> list[dict[str, Any]]:
    return [{"rule": name, "clients": n, "ok": len(m.latencies), "qps": round(m.qps, 1),
             "p50_ms": round(1000 * pct(m.latencies, 50), 2), "p99_ms": round(1000 * pct(m.latencies, 99), 2),
             "errors": m.errors} for (name, n), m in merged.items()]


def write_json(path: Path, data: Any) -> None:
    """Whole or not at all: a run killed mid-write leaves the previous file (bench/gpu_table.py reads it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


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
    #: (start, seconds) of every answered search, start on time.time()'s clock (--trace)
    stamps: list[tuple[float, float]] = field(default_factory=list)

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
    start, wall0 = time.perf_counter(), time.time()
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
                        run.stamps.append((wall0 + (t0 - start), dt))
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


def replicas_run(data: Path, files: list[Path], queries: list[str], counts: list[int], clients: int,
                 seconds: float, top_k: int) -> int:
    """The ``--replicas`` mode (see the module docstring)."""
    import ray
    from ray import serve

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import qdrant_actor

    from ragspine.config import Settings
    from ragspine.serving import ray_app as ra

    preload, stream = files[: max(1, len(files) // 2)], files[max(1, len(files) // 2):]
    bad_total = 0
    rows = []
    for n in counts:
        work = Path(tempfile.mkdtemp(prefix="ragspine-replicas-"))
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, namespace=qdrant_actor.NAMESPACE,
                 runtime_env={"worker_process_setup_hook": "qdrant_actor.setup",
                              "env_vars": {"PYTHONPATH": os.pathsep.join(
                                  [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])}})
        try:
            actor = qdrant_actor.QdrantDouble.options(name=qdrant_actor.ACTOR, lifetime="detached").remote()
            port = free_port()
            settings = Settings(data_dir=work, qdrant_url=":memory:", reranker="none", ocr="off")
            t0 = time.perf_counter()
            ra.start_local(settings, HOST, port, name="bench", deployments={"Ingress": {"num_replicas": n}})
            base = f"http://{HOST}:{port}"
            print(f"{n} Ingress replica(s) ready in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            with httpx.Client(base_url=base, timeout=600) as c:
                c.post("/v1/libraries", json={"name": LIBRARY}).raise_for_status()
                for f in preload:
                    r = c.post(f"/v1/libraries/{LIBRARY}/documents", params={"wait": "true"},
                               files={"file": (f.name, f.read_bytes(), "application/pdf")})
                    if r.status_code != 201:
                        print(f"  preload {f.name}: {r.status_code} {r.text[:200]}", file=sys.stderr)
            uploads: list[tuple[Path, dict]] = []
            server_errors = 0
            stop = threading.Event()

            def ingest_client() -> None:
                nonlocal server_errors
                with httpx.Client(base_url=base, timeout=600) as c:
                    for f in stream:
                        if stop.is_set():
                            return
                        r = c.post(f"/v1/libraries/{LIBRARY}/documents",
                                   files={"file": (f.name, f.read_bytes(), "application/pdf")})
                        if r.status_code >= 500:
                            server_errors += 1
                            continue
                        job = r.json()
                        while job.get("state") not in ("succeeded", "failed"):
                            time.sleep(0.2)
                            jr = c.get(f"/v1/jobs/{job['id']}")
                            server_errors += int(jr.status_code >= 500)
                            if jr.status_code == 200:
                                job = jr.json()
                        uploads.append((f, job))

            ing = threading.Thread(target=ingest_client)
            ing.start()
            drive(base, "warm-up", queries, "bm25", clients, 3.0, top_k)
            run = drive(base, f"{n} replica(s): {clients} clients + ingest", queries, "bm25", clients,
                        seconds, top_k)
            stop.set()
            ing.join()
            # Lost: a succeeded upload that is not listed whole, or not found by its own words.
            lost = 0
            with httpx.Client(base_url=base, timeout=120) as c:
                listed = {d["doc_id"]: d for d in c.get(f"/v1/libraries/{LIBRARY}/documents").json()["documents"]}
                for f, job in uploads:
                    if job["state"] != "succeeded":
                        continue
                    d = listed.get(job["doc_id"])
                    if d is None or d["pages_indexed"] != job["result"]["pages_indexed"]:
                        lost += 1
            ok = sum(1 for _, j in uploads if j["state"] == "succeeded")
            replicas_seen = len({j.get("replica") for _, j in uploads if j.get("replica")})
            rows.append((n, run, server_errors + run.errors, len(uploads), ok, replicas_seen, lost))
            bad_total += server_errors + run.errors + lost
            ray.kill(actor)
        finally:
            try:
                serve.shutdown()
            finally:
                ray.shutdown()
                shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'replicas':>8s} {'q/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>7s} {'uploads':>8s} "
          f"{'ok':>4s} {'ran on':>7s} {'lost':>5s}")
    for n, run, errors, up, ok, seen, lost in rows:
        print(f"{n:8d} {run.qps:8.1f} {1000 * pct(run.latencies, 50):8.2f} {1000 * pct(run.latencies, 99):8.2f} "
              f"{errors:7d} {up:8d} {ok:4d} {seen:7d} {lost:5d}")
    if len(rows) > 1:
        a, b = rows[0][1], rows[-1][1]
        print(f"{rows[-1][0]} vs {rows[0][0]} replicas: q/s x{b.qps / a.qps:.2f}, "
              f"p50 x{pct(b.latencies, 50) / pct(a.latencies, 50):.2f}")
    return 0 if bad_total == 0 else 1


def ocr_heavy(files: list[Path], n: int) -> list[Path]:
    """The ``n`` PDFs with the most pages that need OCR (the plan's rules, auto mode)."""
    import pymupdf

    from ragspine.config import Settings
    from ragspine.ocr import plan_page

    s = Settings()
    counted = []
    for f in files:
        with pymupdf.open(f) as doc:
            if doc.page_count > 60:  # long manuals: one upload would outlast the run
                continue
            k = sum(1 for page in doc if plan_page(page, "auto", s.ocr_min_text_chars, s.ocr_min_image_fraction,
                                                   s.marker_band))
        counted.append((-k, f.name, f))
    return [f for k, _, f in sorted(counted)[:n] if k < 0]


def ocr_run(env: dict[str, str], work: Path, queries: list[str], uploads: list[Path], mode: str,
            clients: int, seconds: float, top_k: int, trace: Path | None = None) -> int:
    """Searches alone, then searches while OCR-heavy PDFs are uploaded (see the module doc)."""
    events: list[tuple[float, str]] = []  # (time.time(), what the uploader saw), for --trace
    with server("local", env, work / "serve-ocr.log") as base:
        drive(base, "warm-up", queries, mode, clients, 3.0, top_k)
        alone = drive(base, f"search alone, {clients} clients", queries, mode, clients, seconds, top_k)
        stop = threading.Event()
        done: list[dict] = []
        unfinished: list[dict] = []  # the upload the run ended in: its pages read so far count too

        def uploader() -> None:
            with httpx.Client(base_url=base, timeout=120) as c:
                for i in itertools.count():
                    if stop.is_set():
                        return
                    f = uploads[i % len(uploads)]
                    r = c.post(f"/v1/libraries/{LIBRARY}/documents",
                               files={"file": (f.name, f.read_bytes(), "application/pdf")},
                               data={"metadata": json.dumps({"doc_id": f"ocr-{i}"})})
                    r.raise_for_status()
                    job = r.json()
                    events.append((time.time(), f"uploaded {f.name} as ocr-{i}"))
                    seen = None
                    while not stop.is_set():
                        job = c.get(f"/v1/jobs/{job['id']}").json()
                        if (job["state"], job.get("ocr")) != seen:
                            seen = (job["state"], job.get("ocr"))
                            events.append((time.time(), f"ocr-{i}: {seen[0]}, ocr {seen[1]}"))
                        if job["state"] in ("succeeded", "failed") and job.get("ocr") != "pending":
                            done.append(job)
                            break
                        time.sleep(0.2)
                    else:
                        unfinished.append(job)

        up = threading.Thread(target=uploader)
        up.start()
        time.sleep(2.0)  # the first upload's OCR is under way
        busy = drive(base, f"search during OCR, {clients} clients", queries, mode, clients, seconds, top_k)
        stop.set()
        up.join()
    if trace is not None:
        shutil.copy(work / "serve-ocr.log", trace.with_suffix(".server.log"))
        with open(trace, "w", encoding="utf-8") as fh:
            for name, run in (("alone", alone), ("busy", busy)):
                for t, dt in run.stamps:
                    fh.write(json.dumps({"run": name, "t": t, "ms": round(1000 * dt, 3)}) + "\n")
            for t, what in events:
                fh.write(json.dumps({"run": "event", "t": t, "what": what}) + "\n")
    pages = sum((j.get("ocr_result") or j.get("result") or {}).get("pages_ocr", 0) for j in done)
    # On a slower CPU the first upload can outlast the run: the pages read of the one in flight.
    partial = sum(j.get("ocr_pages_done", 0) for j in unfinished)
    print(f"\n{'run':34s} {'ok':>6s} {'q/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} "
          f"{'errors':>6s} {'degr.':>6s}")
    print(alone.line())
    print(busy.line())
    ratio = pct(busy.latencies, 99) / pct(alone.latencies, 99)
    print(f"\nduring OCR / alone: p99 x{ratio:.2f} (target <= 2), p50 x"
          f"{pct(busy.latencies, 50) / pct(alone.latencies, 50):.2f}, q/s x{busy.qps / alone.qps:.2f}; "
          f"{len(done)} uploads finished with {pages} pages read by OCR, {partial} pages read of the upload "
          f"in flight at the end; load average {os.getloadavg()[0]:.2f}")
    return 0 if alone.errors == busy.errors == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="documents/*.pdf and queries.jsonl")
    ap.add_argument("--docs", type=int, default=8, help="index the first N PDFs (default 8)")
    ap.add_argument("--mode", choices=["bm25", "hybrid"], default="bm25",
                    help="bm25: CPU path only; hybrid: + visual channel with a random page model")
    ap.add_argument("--page-family", default="colpali",
                    choices=("colpali", "colqwen2", "colqwen2_5", "colidefics3"))
    ap.add_argument("--page-size", choices=("tiny", "full"), default="tiny",
                    help="the random page model: the tests' tiny one, or the real architecture")
    ap.add_argument("--device", default="cpu", help="the page model's device (RAGSPINE_DEVICE)")
    ap.add_argument("--server-env", action="append", default=[], metavar="RAGSPINE_X=VALUE",
                    help="a setting for the ingest and every server (repeatable); the environment's "
                    "own RAGSPINE_* settings are not passed on")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of the concurrent run")
    ap.add_argument("--single-duration", type=float, default=10.0, help="seconds of the one-client run")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=30, help="questions whose rankings are compared")
    ap.add_argument("--replicas", default=None,
                    help="e.g. 1,2: cluster mode with that many Ingress replicas over one shared Qdrant "
                         "double, mixed ingest + search (see the module docstring)")
    ap.add_argument("--ocr-uploads", type=int, default=0, metavar="N",
                    help="local engine only: search alone, then while the N most OCR-heavy PDFs are uploaded")
    ap.add_argument("--ocr-workers", type=int, default=None, metavar="N",
                    help="with --ocr-uploads: the server's RAGSPINE_OCR_WORKERS (default: the server's own)")
    ap.add_argument("--threads", default=None, metavar="RULES",
                    help="compare thread settings: name=BLAS:RUNTIME or name=auto, comma-separated")
    ap.add_argument("--clients-list", default="1,4,16", help="client counts of a --threads run")
    ap.add_argument("--rounds", type=int, default=2, help="turns of each rule in a --threads run")
    ap.add_argument("--json", type=Path, default=None, help="a --threads run's rows, also as JSON here")
    ap.add_argument("--trace", type=Path, default=None, metavar="FILE",
                    help="with --ocr-uploads: write every search's start and latency, and the uploads' "
                         "job states, as JSON lines (and the server's log beside it)")
    args = ap.parse_args()

    every = sorted((args.data / "documents").glob("*.pdf"))
    files = every[: args.docs]
    if not files:
        raise SystemExit(f"no PDFs under {args.data / 'documents'}")
    queries = load_queries(args.data)
    if args.replicas:
        counts = [int(x) for x in args.replicas.split(",") if x.strip()]
        return replicas_run(args.data, files, queries, counts, args.clients, args.duration, args.top_k)
    work = Path(tempfile.mkdtemp(prefix="ragspine-serve-load-"))
    try:
        page_model = page_model_for(args, work) if args.mode == "hybrid" else None
        env = env_for(work / "data", page_model, args.device)
        env.update(kv.split("=", 1) for kv in args.server_env)
        t0 = time.perf_counter()
        # The ingest encodes no query: it need not capture query graphs.
        r = subprocess.run([*ragspine(), "ingest", *map(str, files), "--library", LIBRARY, "-q"],
                           env={**env, "RAGSPINE_QUERY_GRAPHS": "off"}, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit(f"ingest failed: {r.stderr.strip()[-500:]}")
        print(f"indexed {len(files)} PDFs in {time.perf_counter() - t0:.1f}s "
              f"({sum(1 for ln in r.stdout.splitlines() if ': indexed ' in ln)} ok); mode {args.mode}; "
              f"{os.cpu_count()} CPUs", file=sys.stderr)

        if args.threads:
            return threads_run(env, work, queries, args.mode, args.threads,
                               [int(x) for x in args.clients_list.split(",") if x.strip()], args.duration,
                               args.rounds, args.top_k, args.json,
                               {"mode": args.mode, "page_family": args.page_family, "page_size": args.page_size,
                                "device": args.device})
        if args.ocr_uploads:
            heavy = ocr_heavy([f for f in every if f not in files], args.ocr_uploads)
            print(f"uploading during the run: {', '.join(f.name for f in heavy)}", file=sys.stderr)
            if args.ocr_workers is not None:
                env["RAGSPINE_OCR_WORKERS"] = str(args.ocr_workers)
            return ocr_run(env, work, queries, heavy, args.mode, args.clients, args.duration, args.top_k,
                           args.trace)
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
