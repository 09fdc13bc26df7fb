"""Indexing an evaluation dataset into a throwaway workspace (:mod:`ragspine.evaluation`).

PDFs go through the real :meth:`Engine.ingest <ragspine.engine.Engine.ingest>` in two phases,
as a user's upload does; text corpora through
:meth:`Indexer.ingest_text <ragspine.indexing.pipeline.Indexer.ingest_text>`.

Everything is indexed into a fresh temporary data dir that is deleted afterwards (in
``/dev/shm`` when ``TMPDIR`` is unset and it has room: a throwaway index needs no fsync), so
the user's libraries are never touched; with a Qdrant server configured
(``RAGSPINE_QDRANT_URL``) a uniquely named library is created on it and dropped afterwards.
Pass ``keep_dir`` to keep the index (embedded store only).
"""


from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragspine.config import Settings
from ragspine.config.machine import pid_alive
from ragspine.errors import DocumentError, RagspineError

logger = logging.getLogger(__name__)
from ragspine.evaluation.datasets import Dataset, _jsonl

_DOC_ID_BAD = re.compile(r"[^A-Za-z0-9._-]")
_DOC_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, of its children that have exited and been
    waited for, and of its live descendants (read from ``/proc``: the OCR workers are live
    until the engine closes). Written here because the standard library counts only the first
    two, and psutil is not a dependency; off Linux the live descendants are left out."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in _descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15)
    return total


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for e in entries:
        try:
            ppid = int(Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(e))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _safe_doc_id(wanted: str, taken: set[str]) -> str:
    """``wanted`` if it is a valid, unused doc id, else a slug of it made unique."""
    if _DOC_ID_OK.match(wanted) and ".." not in wanted and wanted not in taken:
        return wanted
    slug = _DOC_ID_BAD.sub("-", wanted).replace("..", "-").strip("-._")[:100] or "doc"
    if not slug[0].isalnum():
        slug = "d" + slug
    cand, n = slug, 1
    while cand in taken:
        n += 1
        cand = f"{slug}-{n}"
    return cand


def _bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="doc" if desc == "ingest" else "q", leave=False)


def _ingest_beir(
    engine: Any, library: str, ds: Dataset, with_title: bool, progress: bool
) -> tuple[dict[str, str], dict[str, Any]]:
    """Index the corpus; returns ``doc_id → corpus id`` and counts."""
    docs = list(_jsonl(ds.root / "corpus.jsonl"))
    to_corpus: dict[str, str] = {}
    taken: set[str] = set()
    empty = dropped = 0
    bar = _bar(len(docs), "ingest", progress)
    for d in docs:
        cid = str(d["_id"])
        title = str(d.get("title") or "").strip()
        body = str(d.get("text") or "")
        text = f"{title}\n\n{body}" if with_title and title else body
        doc_id = _safe_doc_id(cid, taken)
        taken.add(doc_id)
        if not text.strip():
            empty += 1
        else:
            # Without titles the title is not given at all: a document's title is also indexed as
            # the context of its passages and its page (ragspine.indexing.context).
            res = engine.ingest_text(library, doc_id, text, title=(title or None) if with_title else None)
            if res.status == "dropped_by_policy":
                dropped += 1
            else:
                to_corpus[doc_id] = cid
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return to_corpus, {"documents": len(docs), "documents_empty": empty, "documents_dropped": dropped}


def _ingest_pdfs(engine: Any, library: str, ds: Dataset, progress: bool,
                 jobs: int | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """Ingest every PDF in two phases, as a user's upload is (ragspine.indexing.ocr_phase): the
    pages that need no content OCR first, the OCR of the rest in the background while the next
    files are read. ``jobs`` first phases run at once (default:
    :meth:`Engine.ingest_jobs <ragspine.engine.Engine.ingest_jobs>`, as ``ragspine ingest``). Returns
    ``doc_id → pdf file name`` and counts, with the time until every first phase was live
    (``first_phase_s``) and until every OCR was done (``ingest_s``)."""
    t0, cpu0 = time.perf_counter(), tree_cpu_seconds()
    files = sorted((ds.root / "documents").glob("*.pdf"))
    if jobs is None:
        jobs = engine.ingest_jobs(len(files))
    to_file: dict[str, str] = {}
    pages = indexed = ocr_pages = stamp_pages = 0
    stamp_s = 0.0
    failed: list[str] = []
    owed: list[tuple[str, Any, Any]] = []  # (file name, first-phase result, future of its OCR)
    bar = _bar(len(files), "ingest", progress)
    ids: list[str] = []
    taken: set[str] = set()
    for f in files:
        ids.append(_safe_doc_id(f.stem, taken))
        taken.add(ids[-1])

    def first_phase(f: Path, doc_id: str) -> tuple[Any, Any]:
        """One document's first phase, and its second queued at once (not when its turn in
        file order comes: the OCR workers start on it while the next files are read)."""
        res = engine.ingest(library, f, {"doc_id": doc_id}, defer_ocr=True)
        return res, engine.finish_ocr_later(library, doc_id) if res.ocr in ("pending", "failed") else None

    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="ragspine-eval-ingest")
    try:
        futures = [pool.submit(first_phase, f, doc_id) for f, doc_id in zip(files, ids)]
        for f, doc_id, fut in zip(files, ids, futures):  # in file order: the same counts whatever finishes first
            try:
                res, later = fut.result()
            except DocumentError as exc:
                logger.warning("%s was not indexed: %s", f.name, exc.detail)
                failed.append(f.name)
            else:
                to_file[doc_id] = f.name
                pages += res.pages_total
                stamp_pages += res.ocr_pages_read if res.ocr == "pending" else 0
                stamp_s += res.ocr_seconds if res.ocr == "pending" else 0.0
                if later is not None:
                    owed.append((f.name, res, later))
                else:
                    indexed += res.pages_indexed
                    ocr_pages += res.pages_ocr
            if bar is not None:
                bar.set_postfix(pages=pages, ocr_owed=len(owed), refresh=False)
                bar.update()
    finally:
        # A Ctrl-C (or an error) mid-way drops the files not started and waits only for those being
        # read, as `ragspine ingest` does; the executor's own exit waited for every file (48
        # MMLongBench documents: Ctrl-C went unheeded for minutes).
        pool.shutdown(wait=True, cancel_futures=True)
    if bar is not None:
        bar.close()
    first_phase_s = time.perf_counter() - t0
    first_pages = indexed + sum(r.pages_indexed for _, r, _ in owed)
    bar = _bar(len(owed), "ocr", progress)
    for name, first, fut in owed:
        try:
            res = fut.result()
        except RagspineError as exc:
            logger.warning("the OCR of %s failed: %s", name, exc.detail)
            failed.append(name)
            res = None
        res = res or first
        indexed += res.pages_indexed
        ocr_pages += res.pages_ocr
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    # With RAGSPINE_DENSE_PHASE=background the first phases went live before their dense
    # vectors (ragspine.indexing.dense_phase): the evaluation scores them with every vector in.
    engine.dense_queue.join()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    return to_file, {
        "documents": len(files), "documents_failed": failed, "pages": pages, "pages_indexed": indexed,
        "pages_ocr": ocr_pages, "ocr": engine.settings.ocr,
        "first_phase_s": round(first_phase_s, 2), "first_phase_pages": first_pages,
        # The stamp-sized images the first phases read (ragspine.indexing.ocr_phase), and the
        # seconds they waited for them in all.
        "first_phase_stamp_pages": stamp_pages, "first_phase_stamp_s": round(stamp_s, 2),
        "documents_ocr_deferred": len(owed),
        # CPU over the ingest alone, this process and its OCR workers: 100 is one core busy.
        "ingest_cpu_pct": round(100 * cpu / wall) if wall > 0 else 0,
    }


#: A throwaway index needs no durability: when ``TMPDIR`` is not set and ``/dev/shm`` has this
#: much room, the index is built there. Every document commit flushes the store, and on a
#: disk that costs ~135 ms of fsync per document (TAT-QA: 35 s on disk, 5 s in RAM).
_SHM_MIN_FREE = 4 << 30


def _scratch_root() -> str | None:
    if os.environ.get("TMPDIR"):
        return None
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= _SHM_MIN_FREE:
            return str(shm)
    except OSError:
        pass
    return None


#: A scratch folder's name: the prefix, then the pid of the eval that made it.
_SCRATCH_PREFIX = "ragspine-eval-"


def sweep_scratch(root: Path, prefix: str = _SCRATCH_PREFIX) -> list[Path]:
    """Remove the folders ``<prefix><pid>-*`` under ``root`` whose process is gone; the ones removed.

    An eval removes its folder when it ends, even on Ctrl-C, but not when it is killed (SIGKILL,
    the OOM killer, a SIGTERM from ``timeout`` or a CI job's cancel): its index then stayed,
    often in ``/dev/shm``, which is memory (100-200 MB for MMLongBench). Each folder carries its
    eval's pid, so the next eval removes those whose process no longer runs. (The test suite
    names and sweeps its own folders in ``/dev/shm`` the same way.)"""
    gone: list[Path] = []
    for folder in root.glob(f"{prefix}*-*"):
        pid = folder.name[len(prefix):].split("-", 1)[0]
        # A link is never followed (anyone can plant one in /tmp): only real folders go.
        if not pid.isdigit() or folder.is_symlink() or not folder.is_dir() or pid_alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        gone.append(folder)
    if gone:
        logger.info("removed %d scratch folders of processes that were killed", len(gone))
    return gone


@contextmanager
def _workspace(settings: Settings, name: str, keep_dir: Path | None) -> Iterator[tuple[Any, str]]:
    """An engine on a fresh data dir and a new library in it; both go away afterwards."""
    from ragspine.engine import Engine

    tmp = None
    if keep_dir is None:
        root = _scratch_root()
        sweep_scratch(Path(root or tempfile.gettempdir()))
        tmp = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=root))
        data_dir = tmp
    else:
        data_dir = Path(keep_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:40] or "dataset"
    library = f"eval-{slug}-{uuid.uuid4().hex[:8]}"
    engine = Engine(settings.model_copy(update={"data_dir": data_dir}))
    created = interrupted = False
    try:
        engine.create_library(library)
        created = True
        yield engine, library
    except KeyboardInterrupt:  # Ctrl-C: owed OCR stops at its next page, not at its end
        interrupted = True
        raise
    finally:
        try:
            if created and keep_dir is None and not interrupted:  # interrupted: the folder goes below
                engine.delete_library(library)
        except Exception:
            logger.exception("could not drop evaluation library %s", library)
        finally:
            try:
                engine.close(drain=0.0 if interrupted else None)
            finally:
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)


# -- searching ---------------------------------------------------------------------------------
