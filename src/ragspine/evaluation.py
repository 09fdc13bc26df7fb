"""Retrieval quality on a labelled dataset: nDCG@10, Recall@10/100 and MRR@10 with ranx.

Two dataset layouts are recognised from the folder's content:

``pdf`` (page-level, e.g. ``mmlongbench_dev``)
    ``documents/*.pdf``, ``queries.jsonl`` and ``qrels/<split>.tsv`` whose corpus ids are
    ``<pdf file name>#p<1-based page>``. Every PDF goes through the real
    :meth:`Engine.ingest <ragspine.engine.Engine.ingest>` (parse, policy, chunks, thumbnails,
    BM25, store), and each hit counts as the page it cites. Queries without judgments are
    left out of the metrics (they exist to test abstention) and counted as ``unjudged``.

``beir`` (text)
    ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
    ``qrels/<split>.tsv``. Each corpus document becomes a one-page document through
    :meth:`Indexer.ingest_text <ragspine.indexing.pipeline.Indexer.ingest_text>` (same policy,
    chunking, BM25 and versioned write as a PDF, without the PDF), indexed as
    ``title + "\\n\\n" + text`` when it has a title (``with_title``).

Qrels files have a ``query-id corpus-id score`` header line; a score above 0 is relevant and
graded scores are gains for nDCG. When ``qrels/<split>.tsv`` does not exist but the folder has
exactly one qrels file, that one is used and the result names it under ``split`` (the text
sets ship a single ``test.tsv``).

Everything is indexed into a fresh temporary data dir that is deleted afterwards (in
``/dev/shm`` when ``TMPDIR`` is unset and it has room: a throwaway index needs no fsync), so
the user's libraries are never touched; with a Qdrant server configured
(``RAGSPINE_QDRANT_URL``) a uniquely named library is created on it and dropped afterwards.
Pass ``keep_dir`` to keep the index (embedded store only).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
import unicodedata
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragspine.chain import QueryChain
from ragspine.config import Settings
from ragspine.errors import DocumentError, InvalidRequestError, MissingExtraError, RagspineError
from ragspine.retrieval.search import MODES, SearchRequest
from ragspine.scoring.tokenizer import tokenize

logger = logging.getLogger(__name__)

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
_DOC_ID_BAD = re.compile(r"[^A-Za-z0-9._-]")
_DOC_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class ChainFlags:
    """The query chain's per-request switches, the same for every query of a run."""

    rewrite: bool | None = None
    corrective: bool = False
    postprocess: tuple[str, ...] = ()

    def request(self, query: str, library: str, mode: str, top_k: int) -> SearchRequest:
        return SearchRequest(query=query, libraries=[library], mode=mode, top_k=top_k,  # type: ignore[arg-type]
                             rewrite=self.rewrite, corrective=self.corrective,
                             postprocess=list(self.postprocess))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {"rewrite": self.rewrite, "corrective": self.corrective, "postprocess": list(self.postprocess)}


@dataclass
class Dataset:
    name: str
    layout: str  # "beir" or "pdf"
    root: Path
    split: str
    queries: dict[str, str]  # in file order
    qrels: dict[str, dict[str, int]]  # relevant judgments only (score > 0)
    #: Query -> the evidence types its answer cites (``metadata.evidence_sources``: Chart,
    #: Figure, Table, ...), where the dataset says so.
    evidence: dict[str, list[str]] = field(default_factory=dict)


# -- loading -----------------------------------------------------------------------------------


def detect_layout(root: Path) -> str:
    if (root / "documents").is_dir() and any((root / "documents").glob("*.pdf")):
        return "pdf"
    if (root / "corpus.jsonl").is_file():
        return "beir"
    raise InvalidRequestError(
        f"{root} is not an evaluation dataset: expected corpus.jsonl (BEIR text layout) or "
        "documents/*.pdf (page-level PDF layout), with queries.jsonl and qrels/<split>.tsv"
    )


def qrels_file(root: Path, split: str) -> tuple[Path, str]:
    path = root / "qrels" / f"{split}.tsv"
    if path.is_file():
        return path, split
    have = sorted((root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
    if len(have) == 1:
        logger.warning("no qrels/%s.tsv in %s; using the only split there, %s", split, root, have[0].stem)
        return have[0], have[0].stem
    names = ", ".join(p.stem for p in have) or "none"
    raise InvalidRequestError(f"no qrels/{split}.tsv in {root} (splits there: {names})")


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id → {corpus-id: grade}`` for every judgment with a grade above 0."""
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.rstrip("\r\n").split("\t")
            if not line.strip():
                continue
            if n == 1 and parts[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue  # header
            if len(parts) < 3:
                raise InvalidRequestError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qid, cid, score = parts[0].strip(), parts[1].strip(), parts[2].strip()
            try:
                grade = int(float(score))
            except ValueError:
                raise InvalidRequestError(f"{path}:{n}: score {score!r} is not a number") from None
            if grade > 0:
                out.setdefault(qid, {})[cid] = grade
    return out


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidRequestError(f"{path}:{n}: not valid JSON ({exc.msg})") from None


def load_dataset(root: Path, split: str = "dev") -> Dataset:
    root = Path(root)
    if not root.is_dir():
        raise InvalidRequestError(f"no such dataset folder: {root}")
    layout = detect_layout(root)
    if not (root / "queries.jsonl").is_file():
        raise InvalidRequestError(f"{root} has no queries.jsonl")
    path, used = qrels_file(root, split)
    rows = list(_jsonl(root / "queries.jsonl"))
    queries = {str(q["_id"]): str(q.get("text", "")) for q in rows}
    evidence = {str(q["_id"]): [str(t) for t in (q.get("metadata") or {}).get("evidence_sources") or []]
                for q in rows if isinstance(q.get("metadata"), dict)}
    qrels = load_qrels(path)
    unknown = [q for q in qrels if q not in queries]
    if unknown:
        raise InvalidRequestError(
            f"{path} judges {len(unknown)} queries missing from queries.jsonl (e.g. {unknown[0]!r})"
        )
    return Dataset(root.name, layout, root, used, queries, qrels, {q: t for q, t in evidence.items() if t})


# -- indexing ----------------------------------------------------------------------------------


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
            res = engine.ingest_text(library, doc_id, text, title=title or None)
            if res.status == "dropped_by_policy":
                dropped += 1
            else:
                to_corpus[doc_id] = cid
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return to_corpus, {"documents": len(docs), "documents_empty": empty, "documents_dropped": dropped}


def _ingest_pdfs(engine: Any, library: str, ds: Dataset, progress: bool) -> tuple[dict[str, str], dict[str, Any]]:
    """Ingest every PDF in two phases, as a user's upload is (ragspine.indexing.ocr_phase): the
    pages that need no content OCR first, the OCR of the rest in the background while the next
    files are read. Returns ``doc_id → pdf file name`` and counts, with the time until every
    first phase was live (``first_phase_s``) and until every OCR was done (``ingest_s``)."""
    t0 = time.perf_counter()
    files = sorted((ds.root / "documents").glob("*.pdf"))
    to_file: dict[str, str] = {}
    pages = indexed = ocr_pages = stamp_pages = 0
    stamp_s = 0.0
    failed: list[str] = []
    owed: list[tuple[str, Any, Any]] = []  # (file name, first-phase result, future of its OCR)
    bar = _bar(len(files), "ingest", progress)
    taken: set[str] = set()
    for f in files:
        doc_id = _safe_doc_id(f.stem, taken)
        taken.add(doc_id)
        try:
            res = engine.ingest(library, f, {"doc_id": doc_id}, defer_ocr=True)
        except DocumentError as exc:
            logger.warning("%s was not indexed: %s", f.name, exc.detail)
            failed.append(f.name)
        else:
            to_file[doc_id] = f.name
            pages += res.pages_total
            stamp_pages += res.ocr_pages_read if res.ocr == "pending" else 0
            stamp_s += res.ocr_seconds if res.ocr == "pending" else 0.0
            if res.ocr in ("pending", "failed"):
                owed.append((f.name, res, engine.finish_ocr_later(library, doc_id)))
            else:
                indexed += res.pages_indexed
                ocr_pages += res.pages_ocr
        if bar is not None:
            bar.set_postfix(pages=pages, ocr_owed=len(owed), refresh=False)
            bar.update()
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
    return to_file, {
        "documents": len(files), "documents_failed": failed, "pages": pages, "pages_indexed": indexed,
        "pages_ocr": ocr_pages, "ocr": engine.settings.ocr,
        "first_phase_s": round(first_phase_s, 2), "first_phase_pages": first_pages,
        # The stamp-sized images the first phases read (ragspine.indexing.ocr_phase), and the
        # seconds they waited for them in all.
        "first_phase_stamp_pages": stamp_pages, "first_phase_stamp_s": round(stamp_s, 2),
        "documents_ocr_deferred": len(owed),
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


@contextmanager
def _workspace(settings: Settings, name: str, keep_dir: Path | None) -> Iterator[tuple[Any, str]]:
    """An engine on a fresh data dir and a new library in it; both go away afterwards."""
    from ragspine.engine import Engine

    tmp = None
    if keep_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="ragspine-eval-", dir=_scratch_root()))
        data_dir = tmp
    else:
        data_dir = Path(keep_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:40] or "dataset"
    library = f"eval-{slug}-{uuid.uuid4().hex[:8]}"
    engine = Engine(settings.model_copy(update={"data_dir": data_dir}))
    created = False
    try:
        engine.create_library(library)
        created = True
        yield engine, library
    finally:
        try:
            if created and keep_dir is None:
                engine.delete_library(library)
        except Exception:
            logger.exception("could not drop evaluation library %s", library)
        finally:
            try:
                engine.close()
            finally:
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)


# -- searching ---------------------------------------------------------------------------------


def clean_query(text: str, max_chars: int) -> str:
    """A query the API accepts: control characters become spaces, over-long text is cut."""
    text = "".join(" " if unicodedata.category(c) == "Cc" and c not in "\t\n\r" else c for c in text)
    return text.replace("\ufffd", " ")[:max_chars]


def _ranx() -> Any:
    try:
        import ranx
    except ImportError:
        raise MissingExtraError("ranx", "eval", "ragspine eval") from None
    return ranx


#: Settings that act at query time only: variants may change them over one index.
QUERY_TIME_SETTINGS = frozenset(
    {"bm25_chunk_weight", "bm25_page_weight", "bm25_query_counts", "rrf_k", "max_top_k", "max_query_chars",
     "dense_weight", "visual_weight", "rerank_depth", "prefetch_limit", "rewrite", "rewrite_max_queries",
     "corrective_min_coverage", "corrective_depth", "mmr_lambda", "mmr_pool_factor", "reranker_languages",
     "dense_languages"}
)


def evaluate(
    settings: Settings,
    dataset_dir: Path,
    split: str = "dev",
    mode: str = "bm25",
    top_k: int = 100,
    progress: bool = False,
    limit_queries: int | None = None,
    *,
    with_title: bool = True,
    reweight: bool = True,
    keep_dir: Path | None = None,
    chain: ChainFlags | None = None,
) -> dict[str, Any]:
    """Index a dataset into a fresh library, run every judged query, and score the rankings.

    ``top_k`` hits are kept per query (Recall@100 needs 100). ``limit_queries`` keeps the
    first N judged queries in file order. ``with_title`` indexes BEIR titles with the text.
    ``reweight`` rebuilds the BM25 vectors with the final average lengths once everything is
    in (the engine re-weights only when they drift by more than 20%), so the figures measure
    the ranking function, not the order documents arrived in. Returns the metrics plus
    ``dataset``, ``layout``, ``split``, ``mode``, ``queries`` (judged queries scored),
    ``ingest_seconds``, ``search_ms_per_query`` and the counts of what was indexed
    (``documents``; ``pages`` for PDF sets).

    ``chain`` runs every query through the query chain (rewrite, corrective loop, post-chain;
    no gap log). With the corrective loop the queries without judgments (unanswerable ones)
    run too, and ``abstention`` says how often it abstained on each kind.
    """
    return evaluate_variants(
        settings, dataset_dir, {"": {}}, split=split, mode=mode, top_k=top_k, progress=progress,
        limit_queries=limit_queries, with_title=with_title, reweight=reweight, keep_dir=keep_dir, chain=chain,
    )[""]


def evaluate_variants(
    settings: Settings,
    dataset_dir: Path,
    variants: Mapping[str, Mapping[str, Any]],
    split: str = "dev",
    mode: str = "bm25",
    top_k: int = 100,
    progress: bool = False,
    limit_queries: int | None = None,
    *,
    with_title: bool = True,
    reweight: bool = True,
    keep_dir: Path | None = None,
    chain: ChainFlags | Mapping[str, ChainFlags] | None = None,
) -> dict[str, dict[str, Any]]:
    """Like :func:`evaluate`, but index once and score several query-time settings on it:
    ``variants`` maps a name to setting overrides (only :data:`QUERY_TIME_SETTINGS`), e.g.
    ``{"page only": {"bm25_chunk_weight": 0}}``. ``chain``: the query chain's switches for every
    variant, or per variant name (a name not listed runs the plain search). Returns one result
    per name."""
    ranx = _ranx()
    if mode not in MODES:
        raise InvalidRequestError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if limit_queries is not None and limit_queries < 1:
        raise InvalidRequestError(f"limit_queries must be at least 1, got {limit_queries}")
    resolved: dict[str, Settings] = {}
    for name, over in variants.items():
        bad = sorted(set(over) - QUERY_TIME_SETTINGS)
        if bad:
            raise InvalidRequestError(
                f"variant {name!r} changes {bad}; only query-time settings can vary over one index "
                f"({', '.join(sorted(QUERY_TIME_SETTINGS))})"
            )
        try:
            resolved[name] = type(settings).model_validate({**settings.model_dump(), **over})
        except ValidationError as exc:
            raise InvalidRequestError(f"variant {name!r}: {exc.errors()[0]['msg']}") from None
    ds = load_dataset(Path(dataset_dir), split)
    judged = [q for q in ds.queries if q in ds.qrels]
    unjudged_ids = [q for q in ds.queries if q not in ds.qrels]
    unjudged = len(unjudged_ids)
    if limit_queries is not None:
        judged = judged[:limit_queries]
        unjudged_ids = unjudged_ids[:limit_queries]

    def flags_for(name: str) -> ChainFlags:
        if isinstance(chain, Mapping):
            return chain.get(name, ChainFlags())
        return chain or ChainFlags()

    if not judged:
        raise InvalidRequestError(f"{ds.root} has no judged queries in split '{ds.split}'")

    results: dict[str, dict[str, Any]] = {}
    with _workspace(settings, ds.name, keep_dir) as (engine, library):
        chains = {name: engine.chain_for(vs, record_gaps=False) for name, vs in resolved.items()}
        # Refuse a bad mode or top_k now, before spending minutes on indexing.
        for name, qc in chains.items():
            qc.search(flags_for(name).request("probe", library, mode, top_k))
        t0 = time.perf_counter()
        if ds.layout == "pdf":
            names, counts = _ingest_pdfs(engine, library, ds, progress)
        else:
            names, counts = _ingest_beir(engine, library, ds, with_title, progress)
        if reweight:
            engine.reweight(library)
        ingest_seconds = time.perf_counter() - t0
        engine.library(library)

        for name, qc in chains.items():
            flags = flags_for(name)
            run, empty, search_seconds, abstained = _run_queries(
                qc, flags, library, ds, names, judged, mode, top_k, progress
            )
            if any(run.values()):
                qrels = ranx.Qrels({q: dict(ds.qrels[q]) for q in judged})
                scores = ranx.evaluate(qrels, ranx.Run(run), list(METRICS), make_comparable=True)
            else:  # ranx cannot build a run without a single hit; every metric is 0 then
                scores = {m: 0.0 for m in METRICS}
            out: dict[str, Any] = {
                "dataset": ds.name,
                "layout": ds.layout,
                "split": ds.split,
                "mode": mode,
                **{m: float(scores[m]) for m in METRICS},
                "queries": len(judged),
                "queries_unjudged": unjudged,
                "queries_without_tokens": empty,
                "ingest_seconds": round(ingest_seconds, 3),
                "search_ms_per_query": round(1000 * search_seconds / len(judged), 3),
                **counts,
            }
            if ds.layout == "beir":
                out["with_title"] = with_title
            by_type = _by_evidence_type(ds, judged, run, ranx)
            if by_type:
                out["by_evidence_type"] = by_type
            if variants[name]:
                out["variant"] = dict(variants[name])
            if flags != ChainFlags():
                out["chain"] = flags.to_json()
            if flags.corrective:
                _, _, _, abstained_unjudged = _run_queries(
                    qc, flags, library, ds, names, unjudged_ids, mode, top_k, progress
                )
                out["abstention"] = {
                    "answerable": _rate(abstained, len(judged)),
                    "unanswerable": _rate(abstained_unjudged, len(unjudged_ids)),
                }
            results[name] = out
    return results


def _by_evidence_type(ds: Dataset, judged: list[str], run: dict[str, dict[str, float]],
                      ranx: Any) -> dict[str, dict[str, Any]]:
    """nDCG@10 over the judged queries of each evidence type (a query citing a chart and a table
    counts in both)."""
    types: dict[str, list[str]] = {}
    for q in judged:
        for t in ds.evidence.get(q, []):
            types.setdefault(t, []).append(q)
    out: dict[str, dict[str, Any]] = {}
    for t, qs in sorted(types.items()):
        sub = {q: run[q] for q in qs}
        if any(sub.values()):
            score = ranx.evaluate(ranx.Qrels({q: dict(ds.qrels[q]) for q in qs}), ranx.Run(sub), "ndcg@10",
                                  make_comparable=True)
        else:
            score = 0.0
        out[t] = {"queries": len(qs), "ndcg@10": round(float(score), 4)}
    return out


def _rate(n: int, total: int) -> dict[str, Any]:
    return {"queries": total, "abstained": n, "rate": round(n / total, 4) if total else None}


def _run_queries(
    qc: QueryChain,
    flags: ChainFlags,
    library: str,
    ds: Dataset,
    names: dict[str, str],
    judged: list[str],
    mode: str,
    top_k: int,
    progress: bool,
) -> tuple[dict[str, dict[str, float]], int, float, int]:
    """The run (``query → {corpus id: score}``), the number of queries without a token, the
    seconds spent searching, and the number of answers the corrective loop abstained on."""
    max_chars = qc.settings.max_query_chars
    run: dict[str, dict[str, float]] = {}
    empty = 0
    abstained = 0
    bar = _bar(len(judged), "search", progress)
    t1 = time.perf_counter()
    for qid in judged:
        query = clean_query(ds.queries[qid], max_chars)
        ranked: dict[str, float] = {}
        if not tokenize(query):
            empty += 1  # nothing to match: an empty ranking, scored as a miss
        else:
            resp = qc.search(flags.request(query, library, mode, top_k))
            abstained += resp.abstained
            for i, h in enumerate(resp.hits):
                name = names.get(h.doc_id)
                if name is None:
                    continue
                cid = f"{name}#p{h.page}" if ds.layout == "pdf" else name
                # Scores strictly decreasing with rank: ranx keeps the engine's order.
                ranked.setdefault(cid, float(top_k - i))
        run[qid] = ranked
        if bar is not None:
            bar.update()
    seconds = time.perf_counter() - t1
    if bar is not None:
        bar.close()
    return run, empty, seconds, abstained
