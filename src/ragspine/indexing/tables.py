"""Tables read as tables: a financial statement's rows as paragraphs, label with its values.

PyMuPDF's text blocks often cut a statement's row in pieces (the label "Purchases of property,
plant and equipment (PP&E)" in one block, "(1,577)  (1,373)  (1,420)" in others) and its column
headers ("2018  2017  2016") sit far above, so no passage holds a row's label and values
together. Here a page's tables become one paragraph per row, ``label  v1  v2 ...``, in reading
order, with the header rows and the caption above kept on the :class:`PageTable` (a table passage's
headers and caption added to its indexed context measured no gain: docs/measured.md).

Two steps, both on what the parse already extracted:

1. :func:`table_regions`, the gate: from the page's text lines, runs of at least
   :data:`MIN_VALUE_ROWS` rows that hold numbers beside a label or several numbers side by
   side, plus the column-header lines right above them. Pure; under a millisecond a page.
2. :func:`read_tables` on the pages it passes: the region's words (from the same PyMuPDF text
   page) joined into phrases, rows as bands of phrases on one line, value columns as the
   x-ranges the numbers cover, the label column as what stands left of them, header rows and
   the caption above.

Written here rather than on PyMuPDF's ``Page.find_tables``, which was tried first and measured
(bench/tables.py ``--finder``): with its text strategy (10-K statements have no ruling lines,
and alternating row shading makes its lines strategy cut a statement into one-row tables) it
took 0.15-1.9 s a page on the 2 shared cores, most of it building its own character list and
cleaning the page's vector graphics, against a few ms here; its cells cut label words where a
guessed column edge runs through them ("Depreciati" | "on and amort" | "ization", "(383"), and
on a page of prose it returns the whole page as a table. Rows and columns of a statement need
only the word boxes the parse has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any


BBox = tuple[float, float, float, float]

#: ``RAGSPINE_TABLES`` values: ``auto`` reads the tables of pages the gate passes, ``off`` never.
TABLE_MODES = ("auto", "off")
#: Separator between a row's cells in its paragraph (two spaces: a cell may hold one space).
CELL_SEP = "  "
#: A region needs this many value rows: two numbers in a sentence's lines are not a table.
MIN_VALUE_ROWS = 3
#: Largest vertical gap between two value rows of one table, in line heights (section labels
#: such as "Cash Flows from Investing Activities" may sit between them).
MAX_ROW_GAP_LINES = 3.5
#: Header lines (years, "Year Ended December 31,") are looked for in the
#: :data:`MAX_HEADER_BANDS` bands above a region's first value row, each at most this many line
#: heights above the next.
HEADER_REACH_LINES = 2.5
MAX_HEADER_BANDS = 4
#: The caption is read from the lines at most this many points above a table, at most
#: :data:`MAX_CAPTION_LINES` of them.
CAPTION_REACH_PT = 48.0
MAX_CAPTION_LINES = 3

# A cell value: 1,577  (1,577)  -57  $5,363  5.4%  $ (0.12)  — (nil). Currency signs alone are
# layout, not values.
_CURRENCY = {"$", "€", "£", "¥", "₹", "Rs.", "Rs", "US$"}
_NUMBER_RE = re.compile(r"^[(\-–−]?(?:US\$|[$€£¥₹])?\(?\d[\d,]*(?:\.\d+)?%?\)?[*†]?$|^\d*\.\d+%?$")
_DASH_RE = re.compile(r"^[—–\-]+$")
_YEAR_RE = re.compile(r"^(?:FY|fy)?'?(?:19|20)\d\d[,.]?$")


def is_value(text: str) -> bool:
    """True when ``text`` is made of numbers (with their signs, currency, % and parentheses)
    or a nil dash, with at least one of them; currency signs alone are not values."""
    tokens = text.split()
    if not tokens:
        return False
    seen = False
    for t in tokens:
        if t in _CURRENCY:
            continue
        if _NUMBER_RE.match(t) or _DASH_RE.match(t):
            seen = True
            continue
        return False
    return seen


def is_header_value(text: str) -> bool:
    """A column header's text in a value column: a year (``2018``, ``FY2017``) or words
    (``Amount``, ``January 28,``), never an amount."""
    tokens = [t for t in text.split() if t not in _CURRENCY]
    if not tokens:
        return False
    if all(_YEAR_RE.match(t) for t in tokens):
        return True
    return not any(_NUMBER_RE.match(t) and not _YEAR_RE.match(t) and not t.rstrip(",").isdigit()
                   for t in tokens) and not is_value(text)


@dataclass(frozen=True)
class TableCell:
    """One cell: its row and column in the table (column :attr:`PageTable.label_col` holds the
    row labels), its text and bbox (PDF points)."""

    row: int
    col: int
    text: str
    bbox: BBox


@dataclass(frozen=True)
class PageTable:
    """A table read from a page: its cells, which rows are column headers, which column holds
    the row labels (``None`` when no column is text), the caption lines above it, and where
    each row's paragraph is in the page text (``row_spans[i]`` is row ``i``'s ``[start, end)``)."""

    bbox: BBox
    cells: tuple[TableCell, ...]
    n_rows: int
    n_cols: int
    header_rows: tuple[int, ...]
    label_col: int | None
    caption: str
    row_texts: tuple[str, ...]
    row_boxes: tuple[BBox, ...]
    row_spans: tuple[tuple[int, int], ...] = ()

    def header_text(self) -> str:
        """The column headers, one header row a line (``(Millions)  2018  2017  2016``)."""
        return "\n".join(self.row_texts[i] for i in self.header_rows)


# -- 1. the gate --------------------------------------------------------------------------


@dataclass
class _Band:
    """Lines that share a row: overlapping vertically."""

    lines: list[tuple[str, BBox]]
    y0: float
    y1: float

    @property
    def height(self) -> float:
        return self.y1 - self.y0


def _bands(lines: Sequence[tuple[str, BBox]]) -> list[_Band]:
    """Lines grouped into rows by vertical overlap (a line joins the band whose vertical middle
    lies inside it), top to bottom."""
    bands: list[_Band] = []
    for text, box in sorted(lines, key=lambda lb: ((lb[1][1] + lb[1][3]) / 2, lb[1][0])):
        mid = (box[1] + box[3]) / 2
        if bands and bands[-1].y0 <= mid <= bands[-1].y1:
            b = bands[-1]
            b.lines.append((text, box))
            b.y0, b.y1 = min(b.y0, box[1]), max(b.y1, box[3])
        else:
            bands.append(_Band([(text, box)], box[1], box[3]))
    return bands


def _value_row(band: _Band) -> bool:
    """A band holding at least two numbers, or a number right of a label."""
    values = [(t, b) for t, b in band.lines if is_value(t)]
    if not values:
        return False
    n = sum(1 for t, _ in values for tok in t.split() if tok not in _CURRENCY)
    if n >= 2:
        return True
    vx0 = min(b[0] for _t, b in values)
    return any(not is_value(t) and b[2] <= vx0 + 1 for t, b in band.lines)


def table_regions(lines: Sequence[tuple[str, BBox]]) -> list[BBox]:
    """The gate: areas of the page whose text lines look like a table's, each a run of at least
    :data:`MIN_VALUE_ROWS` value rows (no more than :data:`MAX_ROW_GAP_LINES` line heights
    apart) with the header lines right above it that sit over the value columns."""
    bands = _bands([(t, b) for t, b in lines if t.strip()])
    if len(bands) < MIN_VALUE_ROWS:
        return []
    heights = sorted(b.height for b in bands)
    line_h = max(heights[len(heights) // 2], 1.0)
    flags = [_value_row(b) for b in bands]
    runs: list[list[int]] = []
    cur: list[int] = []
    for i, f in enumerate(flags):
        if not f:
            continue
        if cur and bands[i].y0 - bands[cur[-1]].y1 > MAX_ROW_GAP_LINES * line_h:
            runs.append(cur)
            cur = []
        cur.append(i)
    if cur:
        runs.append(cur)
    regions: list[BBox] = []
    for run in runs:
        if len(run) < MIN_VALUE_ROWS:
            continue
        first, last = run[0], run[-1]
        value_x0 = min(b[0] for i in run for t, b in bands[i].lines if is_value(t))
        # Header bands: over the value columns, only column-header text. Label-only bands
        # between them and the values ("Assets", "Current assets") are passed over.
        top = nearest = first
        for j in range(first - 1, max(first - 1 - MAX_HEADER_BANDS, -1), -1):
            above = bands[j]
            if bands[nearest].y0 - above.y1 > HEADER_REACH_LINES * line_h:
                break
            nearest = j
            over = [t for t, b in above.lines if b[2] > value_x0]
            if not over:
                continue
            if not all(is_header_value(t) for t in over):
                break
            top = j
        members = [ln for k in range(top, last + 1) for ln in bands[k].lines]
        regions.append((min(b[0] for _t, b in members), bands[top].y0,
                        max(b[2] for _t, b in members), bands[last].y1))
    return regions


# -- 2. reading a region: rows, value columns, the label column ----------------------------

#: Words of one line closer than this many word heights belong to one cell ("Net", "income").
PHRASE_GAP_HEIGHTS = 0.6
#: How far left of the latest-starting row label (in line heights) the label column may start:
#: section titles and totals are indented differently from the items under them.
LABEL_INDENT_LINES = 3.0


@dataclass
class _Row:
    label: list[tuple[str, BBox]]
    cells: dict[int, list[tuple[str, BBox]]]
    bbox: BBox


def _text(parts: Sequence[tuple[str, BBox]]) -> str:
    return " ".join(t for t, _b in parts)


def _union(boxes: Sequence[BBox]) -> BBox:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _row(label: list[tuple[str, BBox]], cells: dict[int, list[tuple[str, BBox]]]) -> _Row:
    return _Row(label, cells, _union([b for _t, b in label] + [b for ps in cells.values() for _t, b in ps]))


def phrases(words: Sequence[tuple[Any, ...]]) -> list[tuple[str, BBox]]:
    """PyMuPDF ``words`` tuples ``(x0, y0, x1, y1, text, block, line, word)`` joined into the
    phrases of each line: words closer than :data:`PHRASE_GAP_HEIGHTS` word heights. Cells of
    a table row often share one PDF line ("Revenue $ 46,298 $ 51,761"): the wide gaps part them."""
    out: list[tuple[str, BBox]] = []
    key = None
    for w in sorted(words, key=lambda w: (w[5], w[6], w[0])):
        x0, y0, x1, y1, text = float(w[0]), float(w[1]), float(w[2]), float(w[3]), str(w[4])
        if out and key == (w[5], w[6]) and x0 - out[-1][1][2] <= PHRASE_GAP_HEIGHTS * (y1 - y0):
            t, b = out[-1]
            out[-1] = (f"{t} {text}", (b[0], min(b[1], y0), x1, max(b[3], y1)))
        else:
            out.append((text, (x0, y0, x1, y1)))
        key = (w[5], w[6])
    return out


def _strip_currency(text: str) -> str:
    return " ".join(t for t in text.split() if t not in _CURRENCY)


def read_table(parts: Sequence[tuple[str, BBox]]) -> PageTable | None:
    """One table from the phrases of a gated region (:func:`phrases`), pure.

    Rows are the bands of phrases sharing a line. Value columns are the x-ranges covered by the
    value phrases (numbers: right-, centre- or left-aligned, those of one column overlap); the
    label column is what stands left of the first of them. Other phrases over the value columns
    (header words, "n/a") go to the column they overlap most. Currency signs are dropped. Gives
    ``None`` without :data:`MIN_VALUE_ROWS` rows holding a label and a value."""
    parts = [(t, b) for t, b in ((_strip_currency(t), b) for t, b in parts) if t]
    numeric = {t for t, _b in parts if is_value(t)}  # the phrases that are values, by text
    cols: list[list[float]] = []
    for x0, x1 in sorted((b[0], b[2]) for t, b in parts if t in numeric):
        if cols and x0 <= cols[-1][1]:
            cols[-1][1] = max(cols[-1][1], x1)
        else:
            cols.append([x0, x1])
    if not cols:
        return None
    left = cols[0][0]
    mids = [(c0 + c1) / 2 for c0, c1 in cols]
    bands = _bands(parts)
    # Where the label column starts: at the latest by the label nearest the values in each row
    # that has values (less an indent). What stands further left is another text column beside
    # the table (prose of a two-column page), not part of it: it stays a text block.
    line_h = sorted(b.height for b in bands)[len(bands) // 2]
    nearest = []
    for band in bands:
        texts = [b[0] for t, b in band.lines if t not in numeric and b[0] < left - 1]
        if texts and any(t in numeric for t, _b in band.lines):
            nearest.append(max(texts))
    # Labels start there (or indented a little); text starting further right, short of the
    # values, is a column header over them ("January 28, 2023" is wider than "1,874").
    label_left = min(nearest) - LABEL_INDENT_LINES * line_h if nearest else float("-inf")
    label_end = min(left - 1, max(nearest) + line_h if nearest else left)
    rows: list[_Row] = []
    for band in bands:
        label: list[tuple[str, BBox]] = []
        cells: dict[int, list[tuple[str, BBox]]] = {}
        for t, b in sorted(band.lines, key=lambda tb: tb[1][0]):
            value = t in numeric
            if not value and b[0] < label_left:
                continue
            if not value and b[0] < label_end:
                label.append((t, b))
                continue
            # The column it overlaps most; on a tie, the one whose middle is nearest its own.
            mid = (b[0] + b[2]) / 2
            j = max(range(len(cols)), key=lambda k: (min(b[2], cols[k][1]) - max(b[0], cols[k][0]),
                                                     -abs(mid - mids[k])))
            cells.setdefault(j + 1, []).append((t, b))
        for ps in cells.values():
            ps.sort(key=lambda tb: (tb[1][1], tb[1][0]))
        if label or cells:
            rows.append(_row(label, cells))
    rows = _join_wrapped(rows)
    if sum(1 for r in rows if r.label and any(is_value(_text(ps)) for ps in r.cells.values())) < MIN_VALUE_ROWS:
        return None
    cells_out: list[TableCell] = []
    texts: list[str] = []
    for i, r in enumerate(rows):
        row_parts = []
        if r.label:
            cells_out.append(TableCell(i, 0, _text(r.label), _union([b for _t, b in r.label])))
            row_parts.append(_text(r.label))
        for j in sorted(r.cells):
            cells_out.append(TableCell(i, j, _text(r.cells[j]), _union([b for _t, b in r.cells[j]])))
            row_parts.append(_text(r.cells[j]))
        texts.append(CELL_SEP.join(row_parts))
    boxes = tuple(r.bbox for r in rows)
    return PageTable(bbox=_union(boxes), cells=tuple(cells_out), n_rows=len(rows), n_cols=len(cols) + 1,
                     header_rows=_header_rows(rows), label_col=0 if any(r.label for r in rows) else None,
                     caption="", row_texts=tuple(texts), row_boxes=boxes)


def _caption(lines: Sequence[tuple[str, BBox]], top: float, x0: float, x1: float) -> str:
    """The lines right above a table (at most :data:`CAPTION_REACH_PT` above its top and
    overlapping it horizontally), top to bottom, the last :data:`MAX_CAPTION_LINES` of them."""
    above = [(t.strip(), b) for t, b in lines
             if t.strip() and b[3] <= top + 1 and top - b[3] <= CAPTION_REACH_PT and b[2] > x0 and b[0] < x1]
    above.sort(key=lambda tb: (tb[1][1], tb[1][0]))
    return " ".join(t for t, _b in above[-MAX_CAPTION_LINES:])


def read_tables(
    words: Sequence[tuple[Any, ...]], regions: Sequence[BBox], lines: Sequence[tuple[str, BBox]],
) -> list[PageTable]:
    """The tables in the gated ``regions`` of a page, from its PyMuPDF ``words`` (those whose
    middle lies in a region), each with its caption from the page's ``lines``. ``row_spans`` is
    left empty: the caller places the rows in the page text."""
    out: list[PageTable] = []
    for x0, y0, x1, y1 in regions:
        inside = [w for w in words
                  if x0 - 1 <= (w[0] + w[2]) / 2 <= x1 + 1 and y0 - 1 <= (w[1] + w[3]) / 2 <= y1 + 1]
        table = read_table(phrases(inside))
        if table is not None:
            out.append(replace(table, caption=_caption(lines, table.bbox[1], table.bbox[0], table.bbox[2])))
    return out


def _join_wrapped(rows: list[_Row]) -> list[_Row]:
    """A label wrapped over two rows becomes one: a label-only row followed by a row whose
    label goes on in lower case ("Adjustments to reconcile ... to net cash" / "provided by
    operating activities"), or a row with values followed by a label-only lower-case row."""
    out: list[_Row] = []
    for r in rows:
        prev = out[-1] if out else None
        goes_on = bool(r.label) and _text(r.label)[:1].islower()
        if prev is not None and goes_on and prev.label and (not prev.cells or not r.cells):
            out[-1] = _row(prev.label + r.label, prev.cells or r.cells)
        else:
            out.append(r)
    return out


def _header_rows(rows: Sequence[_Row]) -> tuple[int, ...]:
    """Rows above the first row with a label and an amount whose value cells are all column
    headers (years, periods, words such as "Amount")."""
    out = []
    for i, r in enumerate(rows):
        texts = [_text(ws) for ws in r.cells.values()]
        if r.label and any(is_value(t) and not is_header_value(t) for t in texts):
            break
        if texts and all(is_header_value(t) for t in texts):
            out.append(i)
    return tuple(out)
