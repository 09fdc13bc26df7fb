"""Which page each numbered figure and table of a document is on, from its captions.

"What are the axes of Figure 3?", "the items compared in Table 1-1": a figure's page holds the
figure in pixels and its number once, in the caption, among many mentions of other figures in
the prose. :func:`caption_pages` reads the caption lines of the kept pages (text layer, else
OCR): a line that begins with the label and its number, followed by the caption's punctuation
or its capitalised title ("Figure 3: Accuracy by model", "Fig. 2.", "Table 1-1 Compared items",
"图3 营业收入", "表 2：分部收入"); a line of prose that begins with a mention ("Figure 3 shows
that ...") is not a caption. The keys are what :func:`ragspine.scoring.page_refs.figure_refs`
reads from a question: ``figure:3``, ``table:1-1`` (:func:`~ragspine.scoring.page_refs.caption_key`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragspine.indexing.pdf import PageContent
from ragspine.scoring.page_refs import caption_key

#: Most caption keys kept per document (a manifest entry stays small).
MAX_CAPTIONS = 2000
#: Longest line read as a caption's first line, in characters.
MAX_LINE = 300

_CAPTION = re.compile(
    r"^(?P<label>(?i:figure|fig\.?|table|tab\.|exhibit|chart)|图|圖|表)\s*"
    r"(?P<num>\d{1,3}(?:[-.–]\d{1,3})?|[A-Z](?:[-.–]?\d{1,2})?)"
    # then the caption's punctuation, its capitalised title, or its end: not "Figure 3 shows"
    r"(?=\s*$|\s*[:.：|–—-]|\s+[A-Z\u3400-\u9fff(\"“]|[\u3400-\u9fff])",
)
def caption_of(line: str) -> str | None:
    """The key of the figure or table whose caption ``line`` begins; None for any other line.
    An English label must start with a capital ("Figure", "FIGURE", "Fig."): a line that
    begins "figure 3" is prose wrapped there."""
    line = line.strip()
    if not line or len(line) > MAX_LINE or (line[0].isascii() and not line[0].isupper()):
        return None
    m = _CAPTION.match(line)
    return caption_key(m.group("label"), m.group("num")) if m else None


def caption_pages(pages: Sequence[PageContent]) -> dict[str, list[int]]:
    """``figure:3 -> [pages whose caption lines begin "Figure 3"]`` over ``pages``."""
    out: dict[str, list[int]] = {}
    for p in pages:
        for text, _box in p.lines or p.ocr_lines:
            key = caption_of(text)
            if key is None:
                continue
            found = out.setdefault(key, [])
            if p.number not in found:
                found.append(p.number)
            if len(out) >= MAX_CAPTIONS:
                return out
    return out
