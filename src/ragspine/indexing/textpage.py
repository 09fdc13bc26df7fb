"""Plain text as a one-page document (evaluation on text corpora goes through the same ingest
path as a PDF)."""

from __future__ import annotations

import bisect
import re

from ragspine.indexing.pdf import PageContent, TextBlock


_PARAGRAPH_RE = re.compile(r"\S(?:.*?\S)??(?=\s*\n[ \t\r\f\v]*\n|\s*$)", re.DOTALL)


def text_page(text: str) -> PageContent:
    """Plain text as page 1: paragraphs are the runs between blank lines, text kept verbatim.

    Geometry is virtual (see :meth:`Indexer.ingest_text`): line ``i`` (0-based) spans
    ``y = i .. i + 1`` on a page as high as the text has lines, and 0 wide.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    height = float(len(line_starts))

    def line_of(pos: int) -> int:
        return bisect.bisect_right(line_starts, pos) - 1

    blocks = [
        TextBlock(m.group(), (0.0, float(line_of(m.start())), 0.0, float(line_of(m.end() - 1) + 1)), m.start(), m.end())
        for m in _PARAGRAPH_RE.finditer(text)
    ]
    # Header and footer for the RESTRICTED marker check: the first and the last non-blank
    # line, placed on the page's top and bottom edges (the lines in between are not given
    # to the policy, as prose in the middle of a PDF page is not).
    rows = [(i, ln) for i, ln in enumerate(text.split("\n")) if ln.strip()]
    edges = [rows[0], rows[-1]] if len(rows) > 1 else rows
    lines = [(ln, (0.0, float(i), 0.0, float(i + 1))) for i, ln in edges]
    if lines:
        lines[0] = (lines[0][0], (0.0, 0.0, 0.0, 0.0))
        lines[-1] = (lines[-1][0], (0.0, height, 0.0, height))
    return PageContent(number=1, width=0.0, height=height, text=text, blocks=blocks, lines=lines)
