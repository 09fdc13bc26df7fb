"""The document channel: which documents of a library a question names.

Analysts name the report they mean: "What is the FY2018 capital expenditure for 3M?", "Acme
Robotics revenue 2023". On a shelf of many companies' filings the pages that answer look alike
(the same cash-flow boilerplate in thirty companies' words), so page-level BM25 cannot tell 3M's
page from a peer's, and the issuer's name is usually on the cover and in the running header,
not on the page. The channel reads each committed document's manifest entry - the issuer (the
user's ``entity`` or ``issuer``, else the one the profile derived), its other names, and its
years (``fiscal_year``, ``period``) - and scores a question:

- ``NAMED`` when every distinctive word of one of the document's names is a word of the
  question ("3M" for "3M Company"; "Acme Robotics" needs both words, so "Acme Holdings" is not
  named by a question about Acme Robotics);
- plus ``YEAR`` when the question also holds one of the document's years.

Page ranking uses it as a prior (:func:`ragspine.scoring.priors.document_prior`): the pages of
the named document come first, the year deciding between two of its filings. A question that
names no document leaves the ranking exactly as it was.

Why a rule and not BM25 over the documents' descriptions: measured on MMLongBench
(docs/measured.md, "Documents as wholes"), a BM25 document score used as a prior lifted the
financial reports but cost the other documents more than it gave (nDCG@10 0.366 -> 0.316),
because a description's generic words (report, annual, survey) match any question. A name is
either in the question or not.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragspine.catalog import Libraries
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.tokenizer import tokenize

#: The score of a document its question names, and what the question's naming its year adds.
NAMED = 0.7
YEAR = 0.3
#: Words of a company's legal name that do not tell one company from another.
LEGAL_FORMS = frozenset(
    "inc incorporated corp corporation co company companies ltd limited plc llc lp llp sa ag nv se spa bv "
    "the and of com group 公司 有限公司 股份有限公司 集团".split()
)
#: Metadata and profile fields that name the document's issuer.
NAME_FIELDS = ("entity", "issuer")
#: Fields that hold its years.
YEAR_FIELDS = ("fiscal_year", "period")
_YEAR_RE = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")


@dataclass(frozen=True)
class Naming:
    """How a document can be named: each name as the set of its distinctive words, and its years."""

    names: tuple[frozenset[str], ...]
    years: frozenset[str]


def _values(entry: Mapping[str, Any], fields: Iterable[str]) -> list[str]:
    meta = entry.get("meta") or {}
    profile = entry.get("profile") or {}
    out: list[str] = []
    for f in fields:
        for src in (meta, profile):
            v = src.get(f)
            for x in v if isinstance(v, list) else [v]:
                if x is not None and not isinstance(x, bool) and str(x).strip():
                    out.append(str(x))
    aliases = profile.get("aliases") or []
    out.extend(str(a) for a in aliases if str(a).strip())
    return out


def naming(entry: Mapping[str, Any]) -> Naming:
    """How the manifest entry's document can be named."""
    names = []
    for name in _values(entry, NAME_FIELDS):
        words = frozenset(t for t in tokenize(name) if t not in LEGAL_FORMS)
        if words:
            names.append(words)
    years = {y for v in _values(entry, YEAR_FIELDS) for y in _YEAR_RE.findall(v)}
    return Naming(tuple(dict.fromkeys(names)), frozenset(years))


def named_score(question: set[str], doc: Naming) -> float:
    """``NAMED (+ YEAR)`` when the question names the document, else 0."""
    if not any(name <= question for name in doc.names):
        return 0.0
    return NAMED + (YEAR if doc.years & question else 0.0)



@dataclass
class _Index:
    active: Mapping[str, int]  # the active-versions dict it was built for (compared by identity)
    docs: dict[str, Naming]


class DocumentChannel:
    """``scores(library, question, active)``: ``doc_id -> score`` in (0, 1] for the documents
    the question names; the others are left out."""

    name = "document"

    def __init__(self, libraries: Libraries) -> None:
        self.libraries = libraries
        self._indexes: dict[str, _Index] = {}
        self._lock = threading.Lock()

    def _index(self, library: str, active: Mapping[str, int]) -> _Index:
        with self._lock:
            ix = self._indexes.get(library)
        if ix is not None and ix.active is active:
            return ix
        docs = {e["doc_id"]: naming(e) for e in self.libraries.doc_entries(library)
                if e.get("doc_id") in active and e.get("active_version")}
        ix = _Index(active, {d: n for d, n in docs.items() if n.names})
        with self._lock:
            self._indexes[library] = ix
        return ix

    def scores(self, library: str, text: str, active: Mapping[str, int]) -> dict[str, float]:
        if not active:
            return {}
        ix = self._index(library, active)
        if not ix.docs:
            return {}
        # Question words kept: "Who" is not a company, but dropping them costs nothing here.
        question = set(query_tokens(text, drop_question_words=True))
        out = {d: named_score(question, n) for d, n in ix.docs.items()}
        return {d: s for d, s in out.items() if s > 0}
