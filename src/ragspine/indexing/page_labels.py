"""The page numbers printed on a document's pages, which are often not their places in the file.

A question says "the chart on page 14" or "the table on page 8" and means the number printed
on the page; a report's cover, contents and front matter shift that number from the page's
place in the PDF (MMLongBench's product description prints "8" on its 12th page, an ACL paper
"6985" on its 5th, a brochure of two-page spreads "16" and "17" on its 10th). Two sources, in
this order:

- the PDF's page labels (``/PageLabels``, as a viewer shows them), when they are numbers;
- otherwise a number alone at the edge of one of the page's outermost lines, in its top or
  bottom band ("12", "- 12 -", "Page 12 of 40", "第12页", "16  Graduate Studies", "Annual
  Report | 12"), kept only when a page near it carries the next numbers: a running header's
  year ("Annual Report 2023") or section number repeats, a page number climbs.

Only the pages the RESTRICTED policy kept are read, and only their text layer (a scanned page's
OCR runs later, apart from the parse). A page whose printed number equals its place records
nothing: the place already answers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from ragspine.indexing.pdf import PageContent

logger = logging.getLogger(__name__)

#: Share of the page height, from the top and from the bottom, where a header or footer line is
#: read; a line that is a number and nothing else is read further in (a 10-K prints its page
#: number under the text, often above the last fifth of a short page).
BAND = 0.2
BARE_BAND = 0.35
#: Lines read at each edge (a footnote or a header's second line sits inside them).
EDGE_LINES = 2
#: Longest line read as a header or footer, in characters.
MAX_LINE = 80
#: How far (in pages) a page looks for the neighbours that confirm its number.
REACH = 2
#: Largest printed number read (a journal's pages run into the thousands; more is a year or an id).
MAX_NUMBER = 99_999

_DECORATED = re.compile(
    r"^\s*(?:page|p\.|pg\.?|第)?\s*[-–—]?\s*(\d{1,5})\s*[-–—]?\s*(?:页|頁|of\s+\d{1,5}|/\s*\d{1,5})?\s*$",
    re.IGNORECASE,
)
#: A number at a line's start or end, set apart from the header text beside it by a separator
#: or by two or more spaces: "16  Graduate Studies", "Annual Report | 12", "12 • Contents".
_LEADING = re.compile(r"^\s*(\d{1,5})(?:\s{2,}|\s*[|•·]\s*|\t)\S")
_TRAILING = re.compile(r"\S(?:\s{2,}|\s*[|•·]\s*|\t)(\d{1,5})\s*$")
#: The same with one space, read only where the neighbours confirm it ("Annual Report 2023"
#: on every page does not climb; "Graduate Studies 17", "18", ... does).
_LEADING_ONE = re.compile(r"^\s*(\d{1,5})\s\S")
_TRAILING_ONE = re.compile(r"\S\s(\d{1,5})\s*$")


def pdf_page_labels(doc: Any, numbers: Sequence[int]) -> list[str]:
    """The PDF's page label (``/PageLabels``) of each of ``numbers`` (1-based), ``""`` where it
    has none; all ``""`` when the PDF has no labels or they cannot be read."""
    try:
        if not doc.get_page_labels():
            return [""] * len(numbers)
        return [doc[n - 1].get_label() or "" for n in numbers]
    except Exception as exc:  # a damaged label tree is no reason to refuse a readable PDF
        logger.info("page labels unreadable (%s); printed numbers read from the pages", exc)
        return [""] * len(numbers)


def pdf_label_number(label: str) -> int | None:
    """A page label that is a number (``"12"``, ``"A-12"`` is not); ``None`` otherwise."""
    label = label.strip()
    if label.isdigit() and len(label) <= 5 and 0 < int(label) <= MAX_NUMBER:
        return int(label)
    return None


def line_numbers(text: str) -> list[int]:
    """The numbers a header or footer line may print as its page's number."""
    text = text.strip()
    if not text or len(text) > MAX_LINE:
        return []
    m = _DECORATED.match(text)
    if m:
        return [int(m.group(1))] if 0 < int(m.group(1)) <= MAX_NUMBER else []
    out = []
    for pattern in (_LEADING, _TRAILING, _LEADING_ONE, _TRAILING_ONE):
        m = pattern.search(text)
        if m:
            out.append(int(m.group(1)))
    return [n for n in dict.fromkeys(out) if 0 < n <= MAX_NUMBER]


def edge_candidates(page: PageContent) -> set[int]:
    """The numbers printed alone at the edge of the page's outermost lines, in its bands."""
    lines = page.lines or page.ocr_lines  # a scanned page's lines are its OCR's
    if not lines or page.height <= 0:
        return set()
    rows = sorted(lines, key=lambda ln: (ln[1][1], ln[1][0]))
    out: set[int] = set()
    for text, box in {*rows[:EDGE_LINES], *rows[-EDGE_LINES:]}:
        edge = min(box[3] / page.height, 1 - box[1] / page.height)  # how far in from the nearer edge
        if edge <= BAND or (edge <= BARE_BAND and _DECORATED.match(text.strip())):
            out.update(line_numbers(text))
    return out


def _confirmed(n: int, i: int, cands: dict[int, set[int]]) -> bool:
    """Whether a page within :data:`REACH` of page ``i`` carries a number that climbs from ``n``
    as the pages do: one or two printed pages per page (a spread prints two)."""
    for j in range(i - REACH, i + REACH + 1):
        if j == i or j not in cands:
            continue
        step = j - i
        for m in cands[j]:
            if step <= m - n <= 2 * step if step > 0 else 2 * step <= m - n <= step:
                return True
    return False


def printed_pages(pages: Sequence[PageContent], pdf_labels: Sequence[str] = ()) -> dict[int, list[int]]:
    """``physical page -> the numbers printed on it``, for the pages whose printed number is not
    their place. ``pdf_labels``: the PDF's page label of each page (``pages[k]``'s is
    ``pdf_labels[k]``); when any is a number, the labels are the answer and the text is not read."""
    if pdf_labels and len(pdf_labels) == len(pages):
        labelled = {p.number: pdf_label_number(lbl) for p, lbl in zip(pages, pdf_labels, strict=True)}
        if any(v is not None for v in labelled.values()):
            return {k: [v] for k, v in labelled.items() if v is not None and v != k}
    cands = {p.number: edge_candidates(p) for p in pages}
    cands = {k: v for k, v in cands.items() if v}
    out: dict[int, list[int]] = {}
    for number, found in cands.items():
        kept = sorted(n for n in found if _confirmed(n, number, cands))
        if kept and kept != [number]:
            out[number] = kept
    return out
