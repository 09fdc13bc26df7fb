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

The datasets on disk are read by :mod:`ragspine.evaluation.datasets`, indexed by
:mod:`ragspine.evaluation.corpus`; the queries and metrics are here.
"""

from __future__ import annotations

import logging
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragspine.chain import QueryChain
from ragspine.config import Settings
from ragspine.errors import InvalidRequestError, MissingExtraError
from ragspine.evaluation.corpus import _bar, _ingest_beir, _ingest_pdfs, _workspace
from ragspine.evaluation.datasets import Dataset, detect_layout, load_dataset, load_qrels, qrels_file
from ragspine.retrieval.search import MODES, SearchRequest
from ragspine.scoring.tokenizer import tokenize

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS", "QUERY_TIME_SETTINGS", "ChainFlags", "Dataset", "Indexed", "clean_query", "detect_layout", "evaluate",
    "evaluate_variants", "indexed", "load_dataset", "load_qrels", "qrels_file",
]

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


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


def clean_query(text: str, max_chars: int) -> str:
    """A query the API accepts: control characters become spaces, over-long text is cut."""
    text = "".join(" " if unicodedata.category(c) == "Cc" and c not in "\t\n\r" else c for c in text)
    return text.replace("\ufffd", " ")[:max_chars]


@dataclass(frozen=True)
class Indexed:
    """A dataset indexed into a throwaway library (:func:`indexed`)."""

    engine: Any
    library: str
    dataset: Dataset
    #: ragspine doc_id -> the dataset's corpus id (BEIR) or PDF file name (page ids ``<file>#p<n>``)
    names: dict[str, str]
    counts: dict[str, Any]


@contextmanager
def indexed(settings: Settings, root: Path, *, split: str = "dev", with_title: bool = True,
            reweight: bool = True, progress: bool = False) -> Iterator[Indexed]:
    """Index ``root`` as :func:`evaluate` does (BM25 weights rebuilt with the final average
    lengths, ``reweight``), for a benchmark that searches it its own way; the index goes away
    afterwards."""
    ds = load_dataset(Path(root), split)
    with _workspace(settings, ds.name, None) as (engine, library):
        names, counts = _index(engine, library, ds, with_title, reweight, progress)
        yield Indexed(engine, library, ds, names, counts)


def _index(engine: Any, library: str, ds: Dataset, with_title: bool, reweight: bool,
           progress: bool) -> tuple[dict[str, str], dict[str, Any]]:
    if ds.layout == "pdf":
        names, counts = _ingest_pdfs(engine, library, ds, progress)
    else:
        names, counts = _ingest_beir(engine, library, ds, with_title, progress)
    if reweight:
        engine.reweight(library)
    return names, counts


def _ranx() -> Any:
    try:
        import ranx
    except ImportError:
        raise MissingExtraError("ranx", "eval", "ragspine eval") from None
    return ranx


#: Settings that act at query time only: variants may change them over one index.
QUERY_TIME_SETTINGS = frozenset(
    {"bm25_chunk_weight", "bm25_page_weight", "bm25_query_counts", "bm25_drop_question_words", "rrf_k", "rrf_k_dense",
     "max_top_k", "max_query_chars",
     "dense_weight", "dense_fusion", "convex_passage_weight", "convex_page_weight", "convex_dense_weight",
     "visual_weight", "rerank_depth", "prefetch_limit", "rewrite", "rewrite_max_queries",
     "corrective_min_coverage", "corrective_depth", "corrective_min_similarity",
     "corrective_rescue_similarity", "mmr_lambda", "mmr_pool_factor", "reranker_languages",
     "dense_languages", "document_prior_weight", "drop_answer_instructions",
     "line_item_weight", "neighbour_weight", "page_number_weight", "spelling_corrections", "miss_check", "miss_margin", "miss_stds"}
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
        names, counts = _index(engine, library, ds, with_title, reweight, progress)
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
            by_type = _by_group(ds, judged, run, ranx, ds.evidence.get)
            if by_type:
                out["by_evidence_type"] = by_type
            by_doc = _by_group(ds, judged, run, ranx, ds.document_types)
            if by_doc:
                out["by_document_type"] = by_doc
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


def _by_group(ds: Dataset, judged: list[str], run: dict[str, dict[str, float]],
              ranx: Any, groups_of: Callable[[str], list[str] | None]) -> dict[str, dict[str, Any]]:
    """nDCG@10 over the judged queries of each group: evidence type, document type (a query
    citing a chart and a table counts in both)."""
    types: dict[str, list[str]] = {}
    for q in judged:
        for t in groups_of(q) or []:
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
