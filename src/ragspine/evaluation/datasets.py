"""Evaluation datasets on disk: which layout a folder holds, its qrels, queries and corpus.

Two dataset layouts are recognised from the folder's content:

``pdf`` (page-level, e.g. ``mmlongbench_dev``)
    ``documents/*.pdf``, ``queries.jsonl`` and ``qrels/<split>.tsv`` whose corpus ids are
    ``<pdf file name>#p<1-based page>``.

``beir`` (text)
    ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
    ``qrels/<split>.tsv``.

Qrels files have a ``query-id corpus-id score`` header line; a score above 0 is relevant and
graded scores are gains for nDCG. When ``qrels/<split>.tsv`` does not exist but the folder has
exactly one qrels file, that one is used and the result names it under ``split`` (the text
sets ship a single ``test.tsv``).
"""


from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ragspine.errors import InvalidRequestError

logger = logging.getLogger(__name__)


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
    #: Document file -> its type (``documents.tsv``'s ``doc_type``: Financial report, Academic
    #: paper, ...), where the dataset says so.
    doc_types: dict[str, str] = field(default_factory=dict)

    def document_types(self, qid: str) -> list[str]:
        """The types of the documents whose pages answer ``qid`` (page ids ``<file>#p<n>``)."""
        docs = {cid.rsplit("#p", 1)[0] for cid in self.qrels.get(qid, {})}
        return sorted({self.doc_types[d] for d in docs if d in self.doc_types})


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
    return Dataset(root.name, layout, root, used, queries, qrels, {q: t for q, t in evidence.items() if t},
                   _doc_types(root / "documents.tsv"))


def _doc_types(path: Path) -> dict[str, str]:
    """``documents.tsv`` (header ``doc_id  doc_type ...``) -> {file: type}; {} without one."""
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as fh:
        rows = [line.rstrip("\r\n").split("\t") for line in fh if line.strip()]
    if not rows or rows[0][:2] != ["doc_id", "doc_type"]:
        return {}
    return {r[0]: r[1] for r in rows[1:] if len(r) > 1 and r[1]}


# -- indexing ----------------------------------------------------------------------------------
