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
- a capitalised word of the question, not a sentence's first and no English word, one edit from
  a name's word counts as that word ("Neflix"; :mod:`ragspine.scoring.spelling`);
- plus ``YEAR`` when the question also holds one of the document's years;
- plus ``KIND`` when the question says which kind of document it is about ("in the slides",
  "this paper", "the guidebook", "the 10-K"; :data:`KIND_PHRASES`) and the document is of that
  kind (its ``doc_type``: the caller's, else the profile's); a kind alone, with no name, scores
  ``KIND`` (a question about "this paper" on a shelf of papers, decks and filings is about one
  of the papers, even if it does not say which).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragspine.catalog import Libraries
from ragspine.ocr.words import known_word
from ragspine.retrieval.channels.entries import EntryIndex
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.spelling import misspelt_names
from ragspine.scoring.tokenizer import tokenize

#: The score of a document its question names, what the question's naming its year adds, and
#: what its naming the document's kind adds (scores are capped at 1). A kind is weaker than a
#: name: the pages of the named company's filing stay above a peer's filing of the same kind.
NAMED = 0.7
YEAR = 0.3
KIND = 0.5
#: What questions call each kind of document (``DocumentProfile.doc_type``), in English and
#: Chinese. Narrow on purpose, as each word is also ordinary financial wording: "the slides" and
#: "this slide" but not "the slide in gross margin"; "in the paper" but not "the paper segment";
#: "the manual" at a phrase's end but not "manual journal entries"; "10-K" but not "$10K".
KIND_PHRASES: dict[str, re.Pattern[str]] = {
    kind: re.compile(pattern, re.IGNORECASE) for kind, pattern in {
        "slides": r"\b(?:the|these|those)\s+slides\b|\bthis\s+slide\b|\bslide\s+\d+\b|\bslide\s+deck\b|幻灯片|演示文稿",
        "research_paper": (r"\b(?:this|that)\s+(?:paper|article|study)\b"
                           r"|\b(?:in|of|from|by)\s+the\s+paper\b(?!\s+(?:products?|segment|mills?|industry|business|"
                           r"division|sales|packaging|prices?|costs?))|论文"),
        "manual": (r"\b(?:guidebook|handbook|user\s+guide|user\s+manual|owner'?s\s+manual)\b"
                   r"|\b(?:this|the)\s+manual\b(?!\s+[a-z])|手册|指南"),
        "10-K": r"(?<![$\w.])10-?K\b|\bannual\s+(?:report|filing)\b",
        "10-Q": r"(?<![$\w.])10-?Q\b|\bquarterly\s+report\b",
        "8-K": r"(?<![$\w.])8-K\b",
        "annual_report": r"\bannual\s+report\b|年报|年度报告",
        "earnings_release": r"\bearnings\s+(?:release|report|call)\b|业绩公告",
        "statistical_bulletin": r"\bstatistical\s+bulletin\b|\bthe\s+bulletin\b|统计公报",
        "brochure": r"\bbrochure\b|宣传册",
    }.items()
}

#: Words of a company's legal name that do not tell one company from another.
LEGAL_FORMS = frozenset(
    "inc incorporated corp corporation co company companies ltd limited plc llc lp llp sa ag nv se spa bv "
    "the and of com group 公司 有限公司 股份有限公司 集团".split()
)
#: Metadata and profile fields that name the document's issuer.
NAME_FIELDS = ("entity", "issuer")
#: Fields that hold its years.
YEAR_FIELDS = ("fiscal_year", "period")
#: The field that holds its kind.
KIND_FIELDS = ("doc_type",)
_YEAR_RE = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")


@dataclass(frozen=True)
class Naming:
    """How a document can be named: each name as the set of its distinctive words, and its years."""

    names: tuple[frozenset[str], ...]
    years: frozenset[str]
    kinds: frozenset[str] = frozenset()


def _values(entry: Mapping[str, Any], fields: Iterable[str], *, aliases: bool = True) -> list[str]:
    meta = entry.get("meta") or {}
    profile = entry.get("profile") or {}
    out: list[str] = []
    for f in fields:
        for src in (meta, profile):
            v = src.get(f)
            for x in v if isinstance(v, list) else [v]:
                if x is not None and not isinstance(x, bool) and str(x).strip():
                    out.append(str(x))
    if aliases:
        out.extend(str(a) for a in profile.get("aliases") or [] if str(a).strip())
    return out


def naming(entry: Mapping[str, Any]) -> Naming:
    """How the manifest entry's document can be named."""
    names = []
    for name in _values(entry, NAME_FIELDS):
        words = frozenset(t for t in tokenize(name) if t not in LEGAL_FORMS)
        if words:
            names.append(words)
    years = {y for v in _values(entry, YEAR_FIELDS) for y in _YEAR_RE.findall(v)}
    # The caller's doc_type wins over the profile's; the first value is the one in force.
    kinds = _values(entry, KIND_FIELDS, aliases=False)[:1]
    return Naming(tuple(dict.fromkeys(names)), frozenset(years), frozenset(k for k in kinds if k in KIND_PHRASES))


def kinds_named(text: str) -> frozenset[str]:
    """The kinds of document a question says it is about (:data:`KIND_PHRASES`)."""
    return frozenset(kind for kind, pattern in KIND_PHRASES.items() if pattern.search(text))


def named_score(question: set[str], doc: Naming, kinds: frozenset[str] = frozenset()) -> float:
    """``NAMED (+ YEAR)`` when the question names the document, ``+ KIND`` when it names the
    document's kind (``kinds``: :func:`kinds_named`), at most 1; else 0."""
    named = any(name <= question for name in doc.names)
    score = (NAMED + (YEAR if doc.years & question else 0.0)) if named else 0.0
    if doc.kinds & kinds:
        score += KIND
    return min(1.0, score)



def _nameable(entry: Mapping[str, Any]) -> Naming | None:
    n = naming(entry)
    return n if n.names or n.kinds else None


class DocumentChannel:
    """``scores(library, question, active)``: ``doc_id -> score`` in (0, 1] for the documents
    the question names; the others are left out."""

    name = "document"

    def __init__(self, libraries: Libraries) -> None:
        self._docs = EntryIndex(libraries, _nameable)
        #: library -> (the docs dict they were read from, the words of its documents' names)
        self._words: dict[str, tuple[dict[str, Naming], frozenset[str]]] = {}

    def respelt(self, library: str, text: str, active: Mapping[str, int]) -> dict[str, str]:
        """``word -> name word`` for the question's names misspelt by one edit
        (:func:`ragspine.scoring.spelling.misspelt_names`), for BM25 to search as well."""
        docs = self._docs.get(library, active) if active else {}
        return misspelt_names(text, self._name_words(library, docs), known_word) if docs else {}

    def _name_words(self, library: str, docs: dict[str, Naming]) -> frozenset[str]:
        cached = self._words.get(library)
        if cached is None or cached[0] is not docs:  # rebuilt with the entries (a benign race)
            cached = (docs, frozenset(w for n in docs.values() for name in n.names for w in name))
            self._words[library] = cached
        return cached[1]

    def scores(self, library: str, text: str, active: Mapping[str, int]) -> dict[str, float]:
        if not active:
            return {}
        docs = self._docs.get(library, active)
        if not docs:
            return {}
        # Question words kept: "Who" is not a company, but dropping them costs nothing here.
        question = set(query_tokens(text, drop_question_words=True))
        question.update(misspelt_names(text, self._name_words(library, docs), known_word).values())  # "Neflix"
        kinds = kinds_named(text)
        out = {d: named_score(question, n, kinds) for d, n in docs.items()}
        return {d: s for d, s in out.items() if s > 0}
