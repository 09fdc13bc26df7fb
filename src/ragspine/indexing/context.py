"""The context a passage is indexed with: what its document is (title, issuer, period, from the
:class:`~ragspine.indexing.profile.DocumentProfile`) and where in it the passage stands (the
section path of its page in the outline, or else the nearest heading-like line above it).

On a shelf of filings the same boilerplate page ("Cash flows from investing activities ...")
appears in every company's 10-K, word for word; its words alone cannot tell 3M's from a
peer's. With the context, BM25 and the dense channel see "3M Form 10-K FY2018 | Item 8.
Financial Statements" with it. The context is indexed only: the stored passage ``text``,
``bbox``, ``start``/``end`` and page stay the passage's own, and the context sits beside them in
the payload (``ragspine.scoring.indexed_text``) so every later reader indexes the same words.

A part already present in the text it would be added to is left out (a plain-text document
whose text starts with its title, as the text evaluations index ``title + text``, does not
get the title twice), and the whole is capped at :data:`MAX_CONTEXT` characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragspine.indexing.pdf import PageContent
from ragspine.indexing.profile import DocumentProfile, sections_at

#: Longest context, in characters (the document's parts first, then the section path).
MAX_CONTEXT = 200
#: Between two parts of a context.
PART_SEP = " | "
#: Pages of a document get its title, issuer and period as context too (not its sections: a
#: page spans several). MMLongBench bm25, OCR off, one tree, same run: 0.3772 with it against
#: 0.3735 without, financial reports 0.4312 against 0.4032 (docs/measured.md, "Long reports").
PAGE_CONTEXT = True
#: Where the outline says nothing about a page, take the nearest heading-like line above a
#: passage for its section. Off: on MMLongBench (bm25, OCR off) it scored nDCG@10 0.3686 against
#: 0.3693 without, recall@100 0.5778 against 0.5809 (docs/measured.md, "Documents as wholes").
HEADING_LINES = False
#: A heading-like line: one line of the text layer, at most this many characters ...
HEADING_MAX_CHARS = 80
#: ... and words, not ending a sentence or a clause.
HEADING_MAX_WORDS = 12
_CLAUSE_END = re.compile(r"[.,;:!?。，；：]\s*$")



def heading_above(page: PageContent, start: int) -> str | None:
    """The nearest heading-like text-layer paragraph that ends before ``start`` on ``page``: one
    short line that ends no sentence, below the top band (a running header is no section)."""
    for b in reversed(page.blocks):
        if b.end > start or b.source != "pdf":
            continue
        t = b.text.strip()
        if (len(t) <= HEADING_MAX_CHARS and len(t.split()) <= HEADING_MAX_WORDS and not _CLAUSE_END.search(t)
                and re.search(r"[^\W\d_]", t) and b.bbox[1] > 0.1 * page.height
                and b.bbox[3] - b.bbox[1] < 2.5 * _line_height(page, b.bbox)):
            return t
    return None


def _line_height(page: PageContent, bbox: tuple[float, float, float, float]) -> float:
    """Height of the page's text line that lies in ``bbox`` (the block is one line if its height
    is about that)."""
    for _t, lb in page.lines:
        if lb[1] >= bbox[1] - 0.5 and lb[3] <= bbox[3] + 0.5:
            return max(lb[3] - lb[1], 1.0)
    return max(bbox[3] - bbox[1], 1.0)


def compose(parts: Sequence[str | None], text: str, limit: int = MAX_CONTEXT) -> str:
    """``parts`` joined, each once, without those ``text`` already holds, cut at ``limit``
    characters (at a word boundary)."""
    low = text.lower()
    kept: list[str] = []
    for p in parts:
        p = " ".join((p or "").split())
        if not p or p.lower() in low or any(p.lower() in k.lower() for k in kept):
            continue
        kept.append(p)
    out = PART_SEP.join(kept)
    if len(out) > limit:
        cut = out[:limit]
        out = cut[: cut.rfind(" ")] if " " in cut else cut
    return out.strip(" |")


class ContextBuilder:
    """Contexts of one document's passages and pages, from its profile."""

    def __init__(self, profile: DocumentProfile, *, headings: bool = HEADING_LINES,
                 pages: bool = PAGE_CONTEXT) -> None:
        self.profile = profile
        self.headings = headings
        self.pages = pages
        self.doc_parts = [profile.title, profile.issuer, profile.period]

    def passage(self, page: PageContent, start: int, end: int) -> str:
        """The context of the passage ``page.text[start:end]``."""
        path: list[str | None] = list(sections_at(self.profile.outline, page.number))
        if not path and self.headings:
            path = [heading_above(page, start)]
        return compose([*self.doc_parts, *path], page.text[start:end])

    def page(self, page: PageContent) -> str:
        """The context of a whole page: the document's parts (when :data:`PAGE_CONTEXT`)."""
        return compose(self.doc_parts, page.text) if self.pages else ""
