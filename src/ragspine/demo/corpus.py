"""A deterministic demo corpus: five chart-heavy report PDFs about a fictional company group.

``build_demo_corpus(out_dir)`` writes the PDFs and returns, for each, the metadata to ingest it
with and the *canaries*: tokens that appear only on RESTRICTED pages (or in the RESTRICTED
document). A canary found in any index, log or response is a leak.

The corpus:

==============================  ====  =====  ================================================
document                        lang  pages  RESTRICTED
==============================  ====  =====  ================================================
acme-holdings-ar-2023           en    6      page 5: ``RESTRICTED`` header in the top band
acme-robotics-ar-2023           en    4      page 3: metadata ``page_sensitivity`` only
acme-energy-bulletin-2023       zh    4      page 4: ``受限`` footer in the bottom band
globex-corp-ar-2022             en    3      none (US Letter pages)
acme-board-memo-2023            en    3      the whole document (``sensitivity``)
==============================  ====  =====  ================================================

Every page is laid out by hand with PyMuPDF: paragraphs as wrapped text, tables as text
cells with rules, charts drawn by matplotlib (Agg, no pyplot) and inserted as PNG with a text
caption under each. Chinese text uses PyMuPDF's built-in ``china-s`` font, which is not
embedded, so the corpus stays small (about 0.3 MB).

Same bytes on every run: fixed PDF dates, no new file ``/ID``, matplotlib rc defaults with no
PNG ``Software`` tag, and the only random series drawn from ``np.random.default_rng(SEED)``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf

DEMO_LIBRARY = "demo"
#: Seed of the only random data in the corpus (monthly power generation).
SEED = 20240328
#: Creation and modification date written into every PDF.
PDF_DATE = "D:20240328000000Z"
PRODUCER = "ragspine demo corpus"

A4 = (595.0, 842.0)
LETTER = (612.0, 792.0)
CHART_DPI = 110

# Canaries: one per RESTRICTED page, one for the RESTRICTED document. Unique tokens for the
# BM25 tokenizer (one ASCII word each) and, for Chinese, a phrase found nowhere else.
CANARY_HOLDINGS_P5 = "zqxcanaryhold5"
CANARY_ROBOTICS_P3 = "zqxcanaryrobo3"
CANARY_ENERGY_P4 = "zqxcanaryzh4"
CANARY_ENERGY_P4_ZH = "紫檀蜂鸟协议"
CANARY_MEMO = "zqxcanaryboard7"

_BLUE, _ORANGE, _GREEN, _GREY, _RED = "#1f5a96", "#e07b28", "#3c8d5a", "#8a8f98", "#b23a48"


@dataclass
class DemoDocument:
    """One PDF of the demo corpus and what ingesting it must do.

    ``metadata`` is what to pass to ``Engine.ingest``. ``canaries`` are words that occur only on
    RESTRICTED pages (or in the RESTRICTED document); ``canary_pages`` says on which 1-based
    pages each occurs, and ``restricted_pages`` which pages the policy must drop (every page for
    a RESTRICTED document)."""

    path: Path
    metadata: dict[str, Any]
    canaries: list[str]
    page_count: int = 0
    restricted_pages: list[int] = field(default_factory=list)
    canary_pages: dict[str, list[int]] = field(default_factory=dict)

    @property
    def doc_id(self) -> str:
        return str(self.metadata["doc_id"])

    @property
    def restricted(self) -> bool:
        """The whole document is RESTRICTED."""
        return str(self.metadata.get("sensitivity", "")).strip().upper() == "RESTRICTED"


# -- layout -----------------------------------------------------------------------------------

_EN_FONT, _EN_BOLD, _EN_ITALIC = "helv", "hebo", "heit"
_ZH_FONT = "china-s"
_ZH_NO_LINE_START = set("，。、；：？！）》」』％”’·")
_ZH_NO_LINE_END = set("（《「『“‘")
#: Runs a Chinese line break may not split: ASCII words and numbers, and the Chinese canary.
_ZH_UNIT_RE = re.compile(rf"{CANARY_ENERGY_P4_ZH}|[A-Za-z0-9][A-Za-z0-9.,%/+\-]*|.", re.S)
_ADVANCES: dict[str, dict[str, float]] = {}
#: Widths written for the ``china-s`` CID font: ASCII half an em (CIDs 1-95 proportional and
#: 814-939 half-width roman in Adobe-GB1), everything else the CID default of a full em.
#: PyMuPDF writes no /W array, which would render every digit and Latin letter full width.
_ZH_WIDTHS = "[1 95 500 814 939 500]"


def _text_len(text: str, font: str, size: float) -> float:
    """Advance width of ``text`` in points, as the PDF will lay it out."""
    if font == _ZH_FONT:
        return sum(0.5 if ch.isascii() else 1.0 for ch in text) * size
    adv = _ADVANCES.get(font)
    if adv is None:
        adv = _ADVANCES[font] = {}
    f = None
    total = 0.0
    for ch in text:
        w = adv.get(ch)
        if w is None:
            f = f or pymupdf.Font(font)
            w = adv[ch] = float(f.glyph_advance(ord(ch)))
        total += w
    return total * size


class _Report:
    """Lays out one report top to bottom, page by page."""

    def __init__(self, *, size: tuple[float, float], lang: str, running_head: str, footer: str) -> None:
        self.doc = pymupdf.open()
        self.w, self.h = size
        self.lang = lang
        self.running_head = running_head
        self.footer = footer  # format string with {n} and {total}
        self.margin = 56.0
        self.page: pymupdf.Page | None = None
        self.y = 0.0
        self._pending_footers: list[int] = []  # page numbers whose footer is written at the end

    # text primitives ------------------------------------------------------------------------

    @property
    def font(self) -> str:
        return _ZH_FONT if self.lang == "zh" else _EN_FONT

    def _len(self, text: str, font: str, size: float) -> float:
        return _text_len(text, font, size)

    def _check(self, text: str, font: str) -> None:
        if font != _ZH_FONT and not text.isascii():
            raise ValueError(f"Base-14 fonts only render ASCII reliably here: {text!r}")

    def _wrap(self, text: str, width: float, font: str, size: float) -> list[str]:
        self._check(text, font)
        if font != _ZH_FONT:
            lines: list[str] = []
            cur = ""
            for word in text.split():
                cand = f"{cur} {word}" if cur else word
                if cur and self._len(cand, font, size) > width:
                    lines.append(cur)
                    cur = word
                else:
                    cur = cand
            if cur:
                lines.append(cur)
            return lines
        units = _ZH_UNIT_RE.findall(text)
        zlines: list[str] = []
        cur = ""
        for u in units:
            if cur and self._len(cur + u, font, size) > width:
                if u[0] in _ZH_NO_LINE_START:  # keep closing punctuation on its line
                    cur += u
                    continue
                carry = ""
                while cur and cur[-1] in _ZH_NO_LINE_END:
                    carry = cur[-1] + carry
                    cur = cur[:-1]
                zlines.append(cur.rstrip())
                cur = (carry + u).lstrip()
            else:
                cur += u
        if cur.strip():
            zlines.append(cur.rstrip())
        return zlines

    def _lines(self, lines: Sequence[str], *, x: float, size: float, font: str, leading: float = 1.4,
               color: tuple[float, float, float] = (0, 0, 0)) -> None:
        assert self.page is not None
        if not lines:
            return
        self.page.insert_text(
            (x, self.y + size), list(lines), fontname=font, fontsize=size, lineheight=leading, color=color
        )
        self.y += size * leading * len(lines)

    def _room(self, needed: float) -> None:
        if self.y + needed > self.h - 72:
            raise RuntimeError(
                f"demo layout overflow on page {self.doc.page_count}: needs {needed:.0f} pt at y={self.y:.0f}"
            )

    # blocks ---------------------------------------------------------------------------------

    def new_page(self, *, top_marker: str | None = None, bottom_marker: str | None = None) -> None:
        page = self.doc.new_page(width=self.w, height=self.h)
        self.page = page
        grey = (0.35, 0.35, 0.38)
        page.insert_text((self.margin, 30), self.running_head, fontname=self.font, fontsize=8, color=grey)
        if top_marker:
            # Classification header: inside the top 8 % of the page (baseline at 50 pt).
            size = 11.0
            width = self._len(top_marker, _EN_BOLD, size)
            page.insert_text(((self.w - width) / 2, 50), top_marker, fontname=_EN_BOLD, fontsize=size,
                             color=(0.7, 0.0, 0.0))
        page.draw_line((self.margin, 58), (self.w - self.margin, 58), color=grey, width=0.5)
        if bottom_marker:
            # Classification footer: inside the bottom 8 % of the page.
            font = _ZH_FONT if not bottom_marker.isascii() else _EN_BOLD
            size = 11.0
            width = self._len(bottom_marker, font, size)
            page.insert_text(((self.w - width) / 2, self.h - 44), bottom_marker, fontname=font, fontsize=size,
                             color=(0.7, 0.0, 0.0))
        page.draw_line((self.margin, self.h - 58), (self.w - self.margin, self.h - 58), color=grey, width=0.5)
        self._pending_footers.append(self.doc.page_count)
        self.y = 80.0

    def title(self, text: str, subtitle: str | None = None) -> None:
        font = _ZH_FONT if self.lang == "zh" else _EN_BOLD
        lines = self._wrap(text, self.w - 2 * self.margin, font, 18)
        self._room(30 * len(lines) + 30)
        self._lines(lines, x=self.margin, size=18, font=font, leading=1.3)
        if subtitle:
            self.y += 4
            self._lines(self._wrap(subtitle, self.w - 2 * self.margin, self.font, 10),
                        x=self.margin, size=10, font=self.font, color=(0.3, 0.3, 0.35))
        self.y += 12

    def heading(self, text: str) -> None:
        font = _ZH_FONT if self.lang == "zh" else _EN_BOLD
        self._room(40)
        self.y += 4
        self._lines(self._wrap(text, self.w - 2 * self.margin, font, 12.5), x=self.margin, size=12.5,
                    font=font, leading=1.3, color=(0.12, 0.35, 0.59))
        self.y += 6

    def para(self, text: str, *, size: float = 10.0) -> None:
        lines = self._wrap(text, self.w - 2 * self.margin, self.font, size)
        self._room(size * 1.4 * len(lines))
        self._lines(lines, x=self.margin, size=size, font=self.font)
        self.y += 8

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[float], *,
              caption: str | None = None, size: float = 9.0) -> None:
        """A ruled grid of text cells: first column left-aligned, the others right-aligned."""
        assert self.page is not None and len(widths) == len(header)
        row_h = size * 1.9
        total_w = sum(widths)
        self._room(row_h * (len(rows) + 1) + (30 if caption else 10))
        if caption:
            self._lines([caption], x=self.margin, size=9, font=_ZH_FONT if self.lang == "zh" else _EN_BOLD)
            self.y += 4
        x0, x1 = self.margin, self.margin + total_w
        rule = (0.25, 0.25, 0.3)
        self.page.draw_line((x0, self.y), (x1, self.y), color=rule, width=0.8)
        for r, row in enumerate([list(header), *[list(x) for x in rows]]):
            font = (_ZH_FONT if self.lang == "zh" else _EN_BOLD) if r == 0 else self.font
            base = self.y + row_h * 0.68
            x = x0
            for c, (cell, wd) in enumerate(zip(row, widths)):
                self._check(cell, font)
                if c == 0:
                    tx = x + 3
                else:
                    tx = x + wd - 3 - self._len(cell, font, size)
                self.page.insert_text((tx, base), cell, fontname=font, fontsize=size)
                x += wd
            self.y += row_h
            if r == 0:
                self.page.draw_line((x0, self.y), (x1, self.y), color=rule, width=0.5)
        self.page.draw_line((x0, self.y), (x1, self.y), color=rule, width=0.8)
        self.y += 12

    def chart(self, png: bytes, caption: str, *, height: float = 190.0) -> None:
        """A chart image scaled to the text width, and a text caption under it."""
        assert self.page is not None
        self._room(height + 34)
        rect = pymupdf.Rect(self.margin, self.y, self.w - self.margin, self.y + height)
        self.page.insert_image(rect, stream=png, keep_proportion=True)
        self.y += height + 4
        cap_font = _ZH_FONT if self.lang == "zh" else _EN_ITALIC
        self._lines(self._wrap(caption, self.w - 2 * self.margin, cap_font, 8.5), x=self.margin, size=8.5,
                    font=cap_font, color=(0.3, 0.3, 0.35))
        self.y += 10

    def tobytes(self, metadata: dict[str, str]) -> bytes:
        total = self.doc.page_count
        for n in self._pending_footers:
            page = self.doc[n - 1]
            text = self.footer.format(n=n, total=total)
            width = self._len(text, self.font, 8)
            page.insert_text((self.w - self.margin - width, self.h - 28), text, fontname=self.font, fontsize=8,
                             color=(0.35, 0.35, 0.38))
        self.doc.set_metadata({
            "title": metadata.get("title", ""),
            "author": metadata.get("author", ""),
            "subject": metadata.get("subject", ""),
            "keywords": metadata.get("keywords", ""),
            "creator": PRODUCER,
            "producer": PRODUCER,
            "creationDate": PDF_DATE,
            "modDate": PDF_DATE,
        })
        for xref in range(1, self.doc.xref_length()):
            if self.doc.xref_get_key(xref, "Subtype") == ("name", "/CIDFontType0"):
                self.doc.xref_set_key(xref, "W", _ZH_WIDTHS)
        data = self.doc.tobytes(garbage=4, deflate=True, no_new_id=True)
        self.doc.close()
        return bytes(data)


# -- charts -----------------------------------------------------------------------------------


def _png(draw: Callable[[Any], None], figsize: tuple[float, float] = (6.4, 2.6)) -> bytes:
    """Render ``draw(ax)`` to PNG bytes, byte-identical across runs: matplotlib's own defaults
    (not the user's rc), the bundled DejaVu Sans font, no ``Software`` tag."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({
            "font.family": "DejaVu Sans",
            "font.size": 8,
            "axes.titlesize": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "svg.hashsalt": "ragspine-demo",
        })
        fig = Figure(figsize=figsize, dpi=CHART_DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        draw(ax)
        # Fixed margins rather than tight_layout, which would draw the figure twice.
        fig.subplots_adjust(left=0.1, right=0.985, bottom=0.13, top=0.89)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=CHART_DPI, metadata={"Software": None})
    return buf.getvalue()


def _grouped_bars(title: str, labels: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
                  colors: Sequence[str] = (_GREY, _BLUE, _ORANGE), fmt: str = "{:,.0f}") -> bytes:
    def draw(ax: Any) -> None:
        n = len(series)
        x = np.arange(len(labels))
        wd = 0.8 / n
        for i, ((name, vals), col) in enumerate(zip(series.items(), colors)):
            bars = ax.bar(x + (i - (n - 1) / 2) * wd, vals, wd, label=name, color=col)
            ax.bar_label(bars, labels=[fmt.format(v) for v in vals], fontsize=6.5, padding=1)
        ax.set_xticks(x, list(labels))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(frameon=False, fontsize=7)
        ax.margins(y=0.15)

    return _png(draw)


def _lines_chart(title: str, x_labels: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
                 colors: Sequence[str] = (_BLUE, _ORANGE, _GREEN, _RED), pct: bool = False) -> bytes:
    def draw(ax: Any) -> None:
        for (name, vals), col in zip(series.items(), colors):
            ax.plot(list(x_labels), list(vals), marker="o", markersize=3.5, linewidth=1.6, label=name, color=col)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if pct:
            ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0f}%")
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        ax.legend(frameon=False, fontsize=7, ncols=min(4, len(series)))

    return _png(draw)


def _stacked_bars(title: str, labels: Sequence[str], stacks: dict[str, Sequence[float]], ylabel: str) -> bytes:
    colors = (_BLUE, _ORANGE, _GREEN, _GREY)

    def draw(ax: Any) -> None:
        bottom = np.zeros(len(labels))
        for (name, vals), col in zip(stacks.items(), colors):
            ax.bar(list(labels), list(vals), 0.55, bottom=bottom, label=name, color=col)
            bottom = bottom + np.asarray(vals, dtype=float)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(frameon=False, fontsize=7, ncols=4, loc="upper left")
        ax.margins(y=0.18)

    return _png(draw)


# -- the group's figures (USD million unless stated) -----------------------------------------

SEGMENT_REVENUE = {  # segment: (2022, 2023)
    "Acme Robotics": (1842, 2164),
    "Acme Energy": (2315, 2598),
    "Acme Services": (406, 431),
}
SEGMENT_MARGIN = {  # operating margin, %
    "Acme Robotics": (12.4, 14.1),
    "Acme Energy": (9.8, 10.6),
    "Acme Services": (6.1, 5.7),
}
CORPORATE_COST = (48, 52)
REGIONS = ("North America", "Europe", "China", "Rest of APAC")
HEADCOUNT = {  # segment: {year: per region}
    "Acme Robotics": {2022: (2150, 1380, 1540, 470), 2023: (2310, 1420, 1860, 540)},
    "Acme Energy": {2022: (1090, 1990, 2410, 590), 2023: (1120, 2040, 2680, 610)},
    "Acme Services": {2022: (620, 370, 190, 140), 2023: (640, 380, 210, 150)},
}
ROBOTICS_LINES = {  # product line: (2022, 2023)
    "Industrial arms": (905, 1012),
    "Warehouse automation": (612, 786),
    "Service and spares": (325, 366),
}
ROBOTICS_ORDERS = (452, 470, 488, 515, 528, 561, 590, 624)  # quarterly order intake, Q1 2022 - Q4 2023
GLOBEX_REVENUE = {"Automation": (2880, 3105), "Specialty Chemicals": (3410, 3620), "Consumer Devices": (1960, 1815)}
GLOBEX_MARGIN = {"Automation": (11.2, 12.0), "Specialty Chemicals": (14.5, 13.1), "Consumer Devices": (4.8, 2.9)}
GLOBEX_HEADCOUNT = {"North America": (9400, 9650), "Europe": (5200, 5350), "China": (1800, 1720),
                    "Latin America": (2100, 2240)}
ENERGY_REVENUE_CNY = {  # 亿元: (2022, 2023)
    "火电": (80.4, 82.1), "风电": (36.2, 46.9), "光伏": (24.5, 35.6), "售电及综合服务": (14.7, 21.7),
}
ENERGY_LINES_EN = {"火电": "Thermal", "风电": "Wind", "光伏": "Solar", "售电及综合服务": "Retail & services"}
ENERGY_REGIONS_ZH = {"North America": "北美", "Europe": "欧洲", "China": "中国", "Rest of APAC": "亚太其他地区"}


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _pct(a: float, b: float) -> float:
    return (b / a - 1.0) * 100.0


def _op_income(year_idx: int) -> dict[str, float]:
    out = {s: round(SEGMENT_REVENUE[s][year_idx] * SEGMENT_MARGIN[s][year_idx] / 100) for s in SEGMENT_REVENUE}
    return out


def _group_totals(year_idx: int) -> tuple[int, int, float]:
    rev = sum(v[year_idx] for v in SEGMENT_REVENUE.values())
    op = sum(_op_income(year_idx).values()) - CORPORATE_COST[year_idx]
    return rev, op, op / rev * 100


def _monthly_generation() -> tuple[list[float], list[float]]:
    """Monthly power generation in 100 million kWh (亿千瓦时), 2022 and 2023: a seasonal shape
    plus seeded noise, rounded to one decimal."""
    rng = np.random.default_rng(SEED)
    season = np.array([1.08, 0.97, 0.95, 0.90, 0.93, 1.00, 1.12, 1.15, 1.00, 0.94, 0.97, 1.06])
    g22 = 30.0 * season + rng.normal(0.0, 0.6, 12)
    g23 = 33.5 * season * np.linspace(1.0, 1.04, 12) + rng.normal(0.0, 0.6, 12)
    return [round(float(v), 1) for v in g22], [round(float(v), 1) for v in g23]


# -- documents --------------------------------------------------------------------------------


def _holdings_2023() -> tuple[bytes, dict[str, Any]]:
    rev22, op22, m22 = _group_totals(0)
    rev23, op23, m23 = _group_totals(1)
    oi22, oi23 = _op_income(0), _op_income(1)
    hc = {y: sum(sum(HEADCOUNT[s][y]) for s in HEADCOUNT) for y in (2022, 2023)}
    r = _Report(size=A4, lang="en", running_head="Acme Holdings | Annual Report 2023",
                footer="Page {n} of {total}")

    r.new_page()
    r.title("Acme Holdings Annual Report 2023",
            "Group results for the financial year ended 31 December 2023. All figures in USD million unless stated.")
    r.heading("1. Group overview")
    r.para(
        f"Acme Holdings closed 2023 with group revenue of USD {_n(rev23)} million, up {_pct(rev22, rev23):.1f}% "
        f"from USD {_n(rev22)} million in 2022. Growth was broad-based: both operating subsidiaries, Acme Robotics "
        "and Acme Energy, grew faster than their end markets, while the smaller Acme Services unit was held back by "
        "the completion of two large maintenance contracts in Europe."
    )
    r.para(
        f"Group operating profit rose to USD {_n(op23)} million from USD {_n(op22)} million, lifting the operating "
        f"margin to {m23:.1f}% ({m22:.1f}% in 2022). Mix was the main driver: Acme Robotics, the highest-margin "
        "segment, contributed 42% of group revenue against 40% a year earlier, and warehouse automation orders "
        "carried richer software content. Input-cost relief in the second half helped Acme Energy recover part of "
        "the margin it lost in 2022."
    )
    r.para(
        "Management regards 2023 as the first full year of the simplified two-pillar structure announced in 2021. "
        "Capital expenditure of USD 412 million was concentrated on the new robot assembly line in Suzhou and on "
        "wind repowering projects in northern Germany; free cash flow covered the dividend 1.8 times."
    )
    r.table(
        ["Key figures", "2022", "2023", "Change"],
        [
            ["Revenue", _n(rev22), _n(rev23), f"{_pct(rev22, rev23):+.1f}%"],
            ["Operating profit", _n(op22), _n(op23), f"{_pct(op22, op23):+.1f}%"],
            ["Operating margin (%)", f"{m22:.1f}", f"{m23:.1f}", f"{m23 - m22:+.1f} pp"],
            ["Capital expenditure", "368", "412", f"{_pct(368, 412):+.1f}%"],
            ["Employees at year end", _n(hc[2022]), _n(hc[2023]), f"{_pct(hc[2022], hc[2023]):+.1f}%"],
        ],
        [200, 90, 90, 90],
        caption="Table 1. Group key figures",
    )

    r.new_page()
    r.heading("2. Revenue by segment")
    r.para(
        "Segment reporting follows the management structure: Acme Robotics (industrial arms, warehouse automation, "
        "service and spares), Acme Energy (thermal, wind and solar generation plus retail supply, reported in USD "
        "at average rates) and Acme Services (engineering and maintenance for third parties)."
    )
    r.table(
        ["Segment revenue", "2022", "2023", "Growth"],
        [[s, _n(a), _n(b), f"{_pct(a, b):+.1f}%"] for s, (a, b) in SEGMENT_REVENUE.items()]
        + [["Group", _n(rev22), _n(rev23), f"{_pct(rev22, rev23):+.1f}%"]],
        [200, 90, 90, 90],
        caption="Table 2. Revenue by segment (USD million)",
    )
    r.chart(
        _grouped_bars("Revenue by segment, 2022 vs 2023", [s.replace("Acme ", "") for s in SEGMENT_REVENUE],
                      {"2022": [v[0] for v in SEGMENT_REVENUE.values()],
                       "2023": [v[1] for v in SEGMENT_REVENUE.values()]}, "USD million"),
        "Figure 1. Revenue by segment, 2022 and 2023, in USD million. Acme Energy remains the largest segment by "
        "revenue; Acme Robotics grew fastest.",
    )
    r.para(
        "Acme Robotics revenue grew 17.5% to USD 2,164 million, led by warehouse automation (+28%), where two "
        "North American grocery chains rolled out the FleetPick system across their distribution networks. "
        "Acme Energy revenue grew 12.2% to USD 2,598 million as new wind capacity came on line and retail "
        "supply volumes in China rose. Acme Services declined in the second half after a strong first half."
    )

    r.new_page()
    r.heading("3. Operating margin")
    r.para(
        "Operating margin by segment is shown below. Segment operating profit is stated before corporate costs "
        f"of USD {CORPORATE_COST[1]} million ({CORPORATE_COST[0]} million in 2022), which cover group treasury, "
        "audit, legal and the holding company board."
    )
    quarters_m = {
        "Acme Robotics": [12.0, 12.3, 12.6, 12.7, 13.5, 13.9, 14.3, 14.6],
        "Acme Energy": [10.4, 9.9, 9.5, 9.4, 10.0, 10.4, 10.8, 11.1],
        "Acme Services": [6.4, 6.2, 6.0, 5.9, 6.1, 5.9, 5.6, 5.3],
    }
    qlabels = ["Q1 22", "Q2 22", "Q3 22", "Q4 22", "Q1 23", "Q2 23", "Q3 23", "Q4 23"]
    r.chart(
        _lines_chart("Operating margin by segment, quarterly", qlabels, quarters_m, "Operating margin", pct=True),
        "Figure 2. Quarterly operating margin by segment, 2022-2023. Robotics margins widened through 2023 on "
        "software-rich warehouse systems; Energy recovered from its 2022 low.",
    )
    r.table(
        ["Operating profit and margin", "2022", "2023", "Margin 2022", "Margin 2023"],
        [[s, _n(oi22[s]), _n(oi23[s]), f"{SEGMENT_MARGIN[s][0]:.1f}%", f"{SEGMENT_MARGIN[s][1]:.1f}%"]
         for s in SEGMENT_REVENUE]
        + [["Corporate costs", f"({CORPORATE_COST[0]})", f"({CORPORATE_COST[1]})", "", ""],
           ["Group", _n(op22), _n(op23), f"{m22:.1f}%", f"{m23:.1f}%"]],
        [170, 70, 70, 82, 82],
        caption="Table 3. Operating profit (USD million) and operating margin by segment",
    )
    r.para(
        "Net debt fell to USD 1,130 million at year end. The balance sheet includes restricted cash of USD 41 "
        "million held as collateral for the Energy segment's power purchase agreements; it is excluded from the "
        "net debt calculation. Leverage (net debt to EBITDA) improved to 1.3x from 1.6x."
    )

    r.new_page()
    r.heading("4. People: headcount by segment and region")
    r.para(
        f"The group employed {_n(hc[2023])} people at the end of 2023, {_n(hc[2023] - hc[2022])} more than a year "
        "earlier. Most of the increase was in China, where the Suzhou robot assembly line ramped up and Acme "
        "Energy's retail supply business hired customer-service staff. European headcount was broadly stable."
    )
    r.table(
        ["Headcount 2023", *REGIONS, "Total"],
        [[s, *[_n(v) for v in HEADCOUNT[s][2023]], _n(sum(HEADCOUNT[s][2023]))] for s in HEADCOUNT]
        + [["Group", *[_n(sum(HEADCOUNT[s][2023][i] for s in HEADCOUNT)) for i in range(4)], _n(hc[2023])]],
        [110, 80, 65, 65, 80, 70],
        caption="Table 4. Employees at year end 2023 by segment and region",
    )
    r.chart(
        _stacked_bars("Headcount by region, 2022 vs 2023",
                      [f"{s.replace('Acme ', '')} {y}" for s in HEADCOUNT for y in (2022, 2023)],
                      {reg: [HEADCOUNT[s][y][i] for s in HEADCOUNT for y in (2022, 2023)]
                       for i, reg in enumerate(REGIONS)}, "Employees"),
        "Figure 3. Employees at year end by segment and region, 2022 and 2023. China accounts for most of the "
        "increase in both Robotics and Energy.",
    )

    r.new_page(top_marker="RESTRICTED")
    r.heading("Board pre-read: capital allocation scenarios 2024-2026")
    r.para(
        f"This page summarises the scenarios discussed by the board under the working name {CANARY_HOLDINGS_P5}. "
        "They are not part of the published annual report and must not be shared outside the board and the "
        "group executive committee."
    )
    r.para(
        "Scenario A keeps the current dividend policy and funds the second Suzhou line from operating cash flow. "
        "Scenario B adds a share buyback of USD 300 million over two years, funded by the sale of the Acme "
        "Services maintenance business. Scenario C pursues the acquisition of a European warehouse software "
        "company at an enterprise value of roughly USD 650 million, which would lift leverage to 2.1x."
    )
    r.table(
        ["Scenario", "Capex 2024", "Buyback", "Leverage 2025"],
        [["A: organic", "450", "0", "1.1x"], ["B: buyback", "450", "300", "1.4x"],
         ["C: acquisition", "450", "0", "2.1x"]],
        [200, 90, 90, 90],
        caption="Table 5. Scenario summary (USD million)",
    )
    r.para(
        f"The board asked management to return with a recommendation on {CANARY_HOLDINGS_P5} at the June meeting, "
        "including a sensitivity of scenario C to a 200 basis point rise in funding costs."
    )

    r.new_page()
    r.heading("5. Peer comparison and outlook")
    g_rev = sum(v[1] for v in GLOBEX_REVENUE.values())
    r.para(
        "Globex Corp, the closest listed peer, reported 2022 revenue of USD "
        f"{_n(g_rev)} million. Its Automation segment competes directly with Acme Robotics in North American "
        "warehouse projects. Globex has a larger and more diversified business, but Acme Holdings converts more "
        "of its revenue into operating profit in the businesses where the two overlap."
    )
    r.table(
        ["Peer comparison", "Acme Robotics 2023", "Globex Automation 2022"],
        [["Revenue (USD million)", "2,164", _n(GLOBEX_REVENUE["Automation"][1])],
         ["Operating margin", "14.1%", f"{GLOBEX_MARGIN['Automation'][1]:.1f}%"],
         ["Revenue growth", "+17.5%", f"{_pct(*GLOBEX_REVENUE['Automation']):+.1f}%"]],
        [170, 150, 150],
        caption="Table 6. Acme Robotics against Globex Automation",
    )
    r.para(
        "For 2024 management expects group revenue growth in the high single digits, with Acme Robotics again "
        "the fastest-growing segment, and a further modest improvement in group operating margin. The main "
        "risks are a slowdown in warehouse construction in North America, wholesale power prices in Europe, "
        "and currency movements: roughly 40% of group revenue is earned in currencies other than the US dollar."
    )
    r.para(
        "The board proposes a dividend of USD 1.20 per share (2022: USD 1.05). The annual general meeting "
        "will be held on 16 May 2024."
    )
    pdf = r.tobytes({"title": "Acme Holdings Annual Report 2023", "author": "Acme Holdings",
                     "subject": "Annual report 2023"})
    meta = {
        "doc_id": "acme-holdings-ar-2023",
        "title": "Acme Holdings Annual Report 2023",
        "entity": "Acme Holdings",
        "period": 2023,
        "topic": "annual_report",
        "geography": "global",
        "language": "en",
        "sensitivity": "PUBLIC",
        "metric": ["revenue", "operating_margin", "headcount"],
        "audited": True,
    }
    return pdf, meta


def _robotics_2023() -> tuple[bytes, dict[str, Any]]:
    r = _Report(size=A4, lang="en", running_head="Acme Robotics | Annual Report 2023",
                footer="Acme Robotics 2023 | page {n}/{total}")
    rev22 = sum(v[0] for v in ROBOTICS_LINES.values())
    rev23 = sum(v[1] for v in ROBOTICS_LINES.values())
    m22, m23 = SEGMENT_MARGIN["Acme Robotics"]
    hc22, hc23 = (sum(HEADCOUNT["Acme Robotics"][y]) for y in (2022, 2023))

    r.new_page()
    r.title("Acme Robotics Annual Report 2023", "A subsidiary of Acme Holdings. Figures in USD million unless stated.")
    r.heading("Highlights")
    r.para(
        f"Acme Robotics revenue reached USD {_n(rev23)} million in 2023, an increase of {_pct(rev22, rev23):.1f}% "
        f"on 2022 (USD {_n(rev22)} million). Operating margin widened to {m23:.1f}% from {m22:.1f}%, the best "
        "result since the company joined Acme Holdings. Order intake in the fourth quarter was a record USD 624 "
        "million and the order backlog at year end covered roughly eleven months of revenue."
    )
    r.para(
        "Warehouse automation was again the engine of growth. Revenue in that line grew 28% as FleetPick "
        "deployments scaled from pilots to full networks. Industrial arms grew 12% on demand from electric "
        "vehicle battery plants, while service and spares revenue rose 13% with the larger installed base."
    )
    r.table(
        ["Revenue by product line", "2022", "2023", "Growth"],
        [[k, _n(a), _n(b), f"{_pct(a, b):+.1f}%"] for k, (a, b) in ROBOTICS_LINES.items()]
        + [["Total revenue", _n(rev22), _n(rev23), f"{_pct(rev22, rev23):+.1f}%"]],
        [200, 90, 90, 90],
        caption="Table 1. Acme Robotics revenue by product line (USD million)",
    )
    r.chart(
        _grouped_bars("Acme Robotics revenue by product line", list(ROBOTICS_LINES),
                      {"2022": [v[0] for v in ROBOTICS_LINES.values()],
                       "2023": [v[1] for v in ROBOTICS_LINES.values()]}, "USD million"),
        "Figure 1. Acme Robotics revenue by product line, 2022 and 2023 (USD million).",
        height=175,
    )

    r.new_page()
    r.heading("Orders, margin and people")
    r.chart(
        _lines_chart("Quarterly order intake", ["Q1 22", "Q2 22", "Q3 22", "Q4 22", "Q1 23", "Q2 23", "Q3 23",
                                                "Q4 23"], {"Order intake": ROBOTICS_ORDERS}, "USD million"),
        "Figure 2. Quarterly order intake, Q1 2022 to Q4 2023 (USD million). Every quarter of 2023 set a record.",
    )
    r.para(
        "The operating margin improvement of 1.7 percentage points came from three sources of roughly equal "
        "size: a richer mix of warehouse systems with recurring software fees, lower freight costs, and "
        "better absorption of fixed costs at the Suzhou plant. These were partly offset by higher wages in "
        "North America and by research and development spending, which rose to 7.9% of revenue."
    )
    r.table(
        ["Headcount by region", "2022", "2023", "Change"],
        [[reg, _n(a), _n(b), f"{b - a:+,d}"] for reg, a, b in
         zip(REGIONS, HEADCOUNT["Acme Robotics"][2022], HEADCOUNT["Acme Robotics"][2023])]
        + [["Total", _n(hc22), _n(hc23), f"{hc23 - hc22:+,d}"]],
        [200, 90, 90, 90],
        caption="Table 2. Acme Robotics employees at year end by region",
    )

    r.new_page()
    r.heading("Pricing committee notes, fourth quarter 2023")
    r.para(
        f"Internal notes of the pricing committee, file reference {CANARY_ROBOTICS_P3}. The committee reviewed "
        "the discount structure for multi-site FleetPick contracts and agreed floor prices per robot cell "
        "for 2024 tenders in North America and Europe."
    )
    r.table(
        ["Contract tier", "List price", "Floor price", "Max discount"],
        [["Single site", "1,450", "1,310", "9.7%"], ["2-5 sites", "1,450", "1,240", "14.5%"],
         ["6+ sites", "1,450", "1,165", "19.7%"]],
        [200, 90, 90, 90],
        caption="Table 3. FleetPick cell pricing for 2024 tenders (USD thousand)",
    )
    r.para(
        f"Sales leads may quote down to the floor price without further approval; deals below the floor "
        f"require sign-off by the chief financial officer under procedure {CANARY_ROBOTICS_P3}. The committee "
        "will revisit the tiers after the first-quarter tender round."
    )

    r.new_page()
    r.heading("Outlook and risks")
    r.para(
        "Acme Robotics enters 2024 with a record backlog and expects revenue growth of 12 to 15% with a stable "
        "to slightly higher operating margin. Capacity at Suzhou will double when the second assembly line "
        "opens in the third quarter of 2024."
    )
    r.para(
        "Competition is intensifying: Globex Corp has expanded its Automation segment's warehouse offering and "
        "several Chinese manufacturers now bid on European projects. The main operational risk remains the "
        "supply of servo motors and precision gearboxes, for which Acme Robotics has qualified a second supplier."
    )
    r.para(
        "Sustainability: the energy used per robot cell produced fell 9% in 2023, and 64% of the electricity "
        "used by Acme Robotics plants came from renewable sources, most of it supplied by Acme Energy."
    )
    pdf = r.tobytes({"title": "Acme Robotics Annual Report 2023", "author": "Acme Robotics",
                     "subject": "Annual report 2023"})
    meta = {
        "doc_id": "acme-robotics-ar-2023",
        "title": "Acme Robotics Annual Report 2023",
        "entity": "Acme Robotics",
        "period": 2023,
        "topic": "annual_report",
        "geography": "global",
        "language": "en",
        "sensitivity": "PUBLIC",
        "page_sensitivity": {3: "RESTRICTED"},
        "metric": ["revenue", "operating_margin", "orders", "headcount"],
        "audited": True,
    }
    return pdf, meta


def _energy_bulletin_2023() -> tuple[bytes, dict[str, Any]]:
    g22, g23 = _monthly_generation()
    t22, t23 = round(sum(g22), 1), round(sum(g23), 1)
    rev22 = round(sum(v[0] for v in ENERGY_REVENUE_CNY.values()), 1)
    rev23 = round(sum(v[1] for v in ENERGY_REVENUE_CNY.values()), 1)
    m22, m23 = SEGMENT_MARGIN["Acme Energy"]
    op22, op23 = round(rev22 * m22 / 100, 1), round(rev23 * m23 / 100, 1)
    hc = {y: HEADCOUNT["Acme Energy"][y] for y in (2022, 2023)}
    hc22, hc23 = sum(hc[2022]), sum(hc[2023])
    q23 = [round(sum(g23[i : i + 3]), 1) for i in range(0, 12, 3)]
    r = _Report(size=A4, lang="zh", running_head="阿克米能源有限公司 2023年经营统计公报",
                footer="第 {n} 页 共 {total} 页")

    r.new_page()
    r.title("阿克米能源有限公司2023年经营统计公报", "阿克米控股集团成员企业　发布日期：2024年3月28日")
    r.para(
        "2023年，阿克米能源有限公司（以下简称“公司”）坚持稳中求进工作总基调，统筹推进新能源项目建设和存量机组"
        f"提质增效，经营业绩保持较快增长。全年实现营业收入{rev23}亿元，比上年增长{_pct(rev22, rev23):.1f}%；"
        f"营业利润{op23}亿元，营业利润率{m23}%，比上年提高{m23 - m22:.1f}个百分点。"
    )
    r.heading("一、综合")
    r.para(
        f"全年完成发电量{t23}亿千瓦时，比上年增长{_pct(t22, t23):.1f}%。其中，风电和光伏发电量合计占比提高到"
        "38.2%，比上年提高6.5个百分点。年末新能源装机容量1,245万千瓦，比上年末增长27.0%。公司是阿克米控股的"
        "全资子公司，营业收入占阿克米控股集团营业收入的一半左右。"
    )
    r.table(
        ["指标", "单位", "2023年", "2022年", "增长（%）"],
        [
            ["营业收入", "亿元", f"{rev23}", f"{rev22}", f"{_pct(rev22, rev23):.1f}"],
            ["营业利润", "亿元", f"{op23}", f"{op22}", f"{_pct(op22, op23):.1f}"],
            ["营业利润率", "%", f"{m23}", f"{m22}", "—"],
            ["发电量", "亿千瓦时", f"{t23}", f"{t22}", f"{_pct(t22, t23):.1f}"],
            ["新能源装机容量", "万千瓦", "1,245", "980", f"{_pct(980, 1245):.1f}"],
            ["年末员工人数", "人", _n(hc23), _n(hc22), f"{_pct(hc22, hc23):.1f}"],
        ],
        [150, 80, 80, 80, 80],
        caption="表1　2023年主要经营指标",
    )
    r.para(
        "注：营业收入和营业利润按人民币计算；阿克米控股年报按美元列示的能源分部数据与本公报口径一致，差异来自汇率折算。"
    )

    r.new_page()
    r.heading("二、发电与售电")
    r.para(
        f"分季度看，一季度发电量{q23[0]}亿千瓦时，二季度{q23[1]}亿千瓦时，三季度{q23[2]}亿千瓦时，"
        f"四季度{q23[3]}亿千瓦时。受夏季用电高峰拉动，7月和8月发电量处于全年高位。"
    )
    months = [f"{i}" for i in range(1, 13)]
    r.chart(
        _lines_chart("Monthly power generation", months, {"2022": g22, "2023": g23},
                     "100 million kWh", colors=(_GREY, _BLUE)),
        "图1　2022—2023年分月发电量（亿千瓦时）",
    )
    r.para(
        "全年售电量比上年增长21.4%，其中向阿克米机器人苏州工厂等集团内企业售电占8.7%。"
        "市场化交易电量占比达到71.3%，平均交易电价比上年略有下降。"
    )

    r.new_page()
    r.heading("三、营业收入与利润")
    r.para(
        f"全年营业收入{rev23}亿元。分业务看，火电收入{ENERGY_REVENUE_CNY['火电'][1]}亿元，"
        f"增长{_pct(*ENERGY_REVENUE_CNY['火电']):.1f}%；风电收入{ENERGY_REVENUE_CNY['风电'][1]}亿元，"
        f"增长{_pct(*ENERGY_REVENUE_CNY['风电']):.1f}%；光伏收入{ENERGY_REVENUE_CNY['光伏'][1]}亿元，"
        f"增长{_pct(*ENERGY_REVENUE_CNY['光伏']):.1f}%；售电及综合服务收入"
        f"{ENERGY_REVENUE_CNY['售电及综合服务'][1]}亿元，增长{_pct(*ENERGY_REVENUE_CNY['售电及综合服务']):.1f}%。"
    )
    r.chart(
        _grouped_bars("Revenue by business line (CNY 100 million)", [ENERGY_LINES_EN[k] for k in ENERGY_REVENUE_CNY],
                      {"2022": [v[0] for v in ENERGY_REVENUE_CNY.values()],
                       "2023": [v[1] for v in ENERGY_REVENUE_CNY.values()]}, "CNY 100 million", fmt="{:.1f}"),
        "图2　2022—2023年分业务营业收入（亿元）",
        height=170,
    )
    r.heading("四、员工与区域分布")
    r.table(
        ["地区", "2023年", "2022年", "增减（人）"],
        [[ENERGY_REGIONS_ZH[reg], _n(b), _n(a), f"{b - a:+,d}"] for reg, a, b in zip(REGIONS, hc[2022], hc[2023])]
        + [["合计", _n(hc23), _n(hc22), f"{hc23 - hc22:+,d}"]],
        [170, 90, 90, 90],
        caption="表2　年末员工人数（人）",
    )
    r.para(
        "注：本公报数据为初步统计数，最终数据以经审计的年度报告为准。部分数据因四舍五入，分项合计与总数略有差异。"
    )

    r.new_page(bottom_marker="受限")
    r.heading("附件：2024年资本开支与并购预案（内部讨论稿）")
    r.para(
        f"本附件为内部讨论材料，项目代号“{CANARY_ENERGY_P4_ZH}”（编号{CANARY_ENERGY_P4}），不对外公开。"
        "公司拟于2024年投资约95亿元，用于北方风电基地二期和分布式光伏项目，并研究收购一家储能系统集成商。"
    )
    r.table(
        ["项目", "投资额（亿元）", "计划投产"],
        [["北方风电基地二期", "52.0", "2025年"], ["分布式光伏", "28.5", "2024年"], ["储能系统集成商收购", "14.5", "—"]],
        [200, 120, 120],
        caption="表3　2024年重点投资项目（预案）",
    )
    r.para(
        f"“{CANARY_ENERGY_P4_ZH}”涉及的收购对价、估值区间和谈判进度仅限董事会及经营管理层知悉，"
        "相关材料不得转发或复制。"
    )
    pdf = r.tobytes({"title": "阿克米能源有限公司2023年经营统计公报", "author": "阿克米能源",
                     "subject": "2023年经营统计公报"})
    meta = {
        "doc_id": "acme-energy-bulletin-2023",
        "title": "阿克米能源有限公司2023年经营统计公报",
        "entity": "Acme Energy",
        "entity_local": "阿克米能源",
        "period": 2023,
        "topic": "statistical_bulletin",
        "geography": "CN",
        "language": "zh",
        "sensitivity": "PUBLIC",
        "metric": ["revenue", "operating_margin", "generation", "headcount"],
        "audited": False,
    }
    return pdf, meta


def _globex_2022() -> tuple[bytes, dict[str, Any]]:
    r = _Report(size=LETTER, lang="en", running_head="Globex Corp | 2022 Annual Report",
                footer="Globex Corp - {n}")
    rev21 = sum(v[0] for v in GLOBEX_REVENUE.values())
    rev22 = sum(v[1] for v in GLOBEX_REVENUE.values())
    op = {k: (round(a * GLOBEX_MARGIN[k][0] / 100), round(b * GLOBEX_MARGIN[k][1] / 100))
          for k, (a, b) in GLOBEX_REVENUE.items()}
    op21, op22 = sum(v[0] for v in op.values()) - 95, sum(v[1] for v in op.values()) - 101
    r.new_page()
    r.title("Globex Corp 2022 Annual Report", "Fiscal year ended 31 December 2022. USD million unless stated.")
    r.heading("Letter to shareholders")
    r.para(
        f"Globex Corp delivered revenue of USD {_n(rev22)} million in 2022, up {_pct(rev21, rev22):.1f}% on 2021, "
        f"and operating profit of USD {_n(op22)} million, an operating margin of {op22 / rev22 * 100:.1f}%. "
        "It was a year of contrasts: Automation and Specialty Chemicals grew, while Consumer Devices suffered "
        "from weaker household spending and excess inventory in retail channels."
    )
    r.para(
        "We continued to reshape the portfolio toward industrial technology. Automation now contributes more "
        "than a third of revenue, and we won our first large warehouse projects in Europe, competing head to "
        "head with Acme Robotics and two Japanese suppliers."
    )
    r.table(
        ["Segment revenue", "2021", "2022", "Growth"],
        [[k, _n(a), _n(b), f"{_pct(a, b):+.1f}%"] for k, (a, b) in GLOBEX_REVENUE.items()]
        + [["Total", _n(rev21), _n(rev22), f"{_pct(rev21, rev22):+.1f}%"]],
        [220, 90, 90, 90],
        caption="Table 1. Revenue by segment (USD million)",
    )

    r.new_page()
    r.heading("Operating margin by segment")
    r.chart(
        _grouped_bars("Globex operating margin by segment", list(GLOBEX_MARGIN),
                      {"2021": [v[0] for v in GLOBEX_MARGIN.values()],
                       "2022": [v[1] for v in GLOBEX_MARGIN.values()]}, "Operating margin (%)",
                      colors=(_GREY, _GREEN), fmt="{:.1f}%"),
        "Figure 1. Operating margin by segment, 2021 and 2022. Consumer Devices margin fell to 2.9%.",
    )
    r.table(
        ["Operating margin by segment", "2021", "2022", "Change"],
        [[k, f"{a:.1f}%", f"{b:.1f}%", f"{b - a:+.1f} pp"] for k, (a, b) in GLOBEX_MARGIN.items()]
        + [["Group", f"{op21 / rev21 * 100:.1f}%", f"{op22 / rev22 * 100:.1f}%",
            f"{(op22 / rev22 - op21 / rev21) * 100:+.1f} pp"]],
        [220, 90, 90, 90],
        caption="Table 2. Operating margin by segment",
    )
    r.para(
        "Specialty Chemicals margin fell as energy and feedstock costs rose faster than prices in the first "
        "half, recovering partly in the fourth quarter. Automation margin improved on volume leverage and a "
        "higher share of software and service revenue."
    )

    r.new_page()
    r.heading("Our people and outlook")
    hc = GLOBEX_HEADCOUNT
    r.table(
        ["Employees by region", "2021", "2022"],
        [[k, _n(a), _n(b)] for k, (a, b) in hc.items()]
        + [["Total", _n(sum(v[0] for v in hc.values())), _n(sum(v[1] for v in hc.values()))]],
        [220, 90, 90],
        caption="Table 3. Employees at year end by region",
    )
    r.chart(
        _grouped_bars("Globex employees by region", list(hc),
                      {"2021": [v[0] for v in hc.values()], "2022": [v[1] for v in hc.values()]}, "Employees",
                      colors=(_GREY, _GREEN)),
        "Figure 2. Employees at year end by region, 2021 and 2022.",
        height=170,
    )
    r.para(
        "For 2023 we expect low single-digit revenue growth, a recovery in Consumer Devices from the second "
        "half, and continued investment in Automation capacity in Mexico and Poland."
    )
    pdf = r.tobytes({"title": "Globex Corp 2022 Annual Report", "author": "Globex Corp",
                     "subject": "Annual report 2022"})
    meta = {
        "doc_id": "globex-corp-ar-2022",
        "title": "Globex Corp 2022 Annual Report",
        "entity": "Globex Corp",
        "period": 2022,
        "topic": "annual_report",
        "geography": "US",
        "language": "en",
        "sensitivity": "PUBLIC",
        "metric": ["revenue", "operating_margin", "headcount"],
        "audited": True,
    }
    return pdf, meta


def _board_memo_2023() -> tuple[bytes, dict[str, Any]]:
    title = f"Board memorandum {CANARY_MEMO}: proposed acquisition of Globex Automation"
    r = _Report(size=A4, lang="en", running_head="Acme Holdings | Board of directors | Classification: Restricted",
                footer="Memo {n}/{total}")
    r.new_page()
    r.title(title, "Prepared for the Acme Holdings board meeting of 12 December 2023.")
    r.para(
        f"Purpose. This memorandum ({CANARY_MEMO}) asks the board to approve a non-binding indicative offer for "
        "the Automation segment of Globex Corp. Globex Automation reported 2022 revenue of USD 3,105 million "
        "and an operating margin of 12.0%."
    )
    r.para(
        "Rationale. Combining Globex Automation with Acme Robotics would create the second-largest warehouse "
        "automation supplier in North America, with an installed base of more than 9,000 robot cells and "
        "estimated cost synergies of USD 140 million a year by the third year."
    )
    r.new_page()
    r.heading("Valuation and financing")
    r.table(
        ["Item", "Low", "High"],
        [["Enterprise value (USD million)", "3,400", "3,900"], ["EV / EBITDA 2023", "8.5x", "9.7x"],
         ["Pro forma leverage", "2.6x", "3.0x"]],
        [240, 100, 100],
        caption=f"Table 1. {CANARY_MEMO} valuation range",
    )
    r.para(
        f"Financing for {CANARY_MEMO} would combine a USD 2,000 million bridge loan with a rights issue of up "
        "to USD 1,500 million. The credit rating agencies would be consulted before any offer is made."
    )
    r.new_page()
    r.heading("Recommendation")
    r.para(
        f"Management recommends that the board approve the indicative offer under {CANARY_MEMO} at the low "
        "end of the range and authorise the chief executive to appoint advisers."
    )
    pdf = r.tobytes({"title": title, "author": "Acme Holdings", "subject": "Board memorandum"})
    meta = {
        "doc_id": "acme-board-memo-2023",
        "title": title,
        "entity": "Acme Holdings",
        "period": 2023,
        "topic": "board_memo",
        "geography": "global",
        "language": "en",
        "sensitivity": "RESTRICTED",
        "metric": ["valuation"],
        "audited": False,
    }
    return pdf, meta


_BUILDERS: tuple[tuple[Callable[[], tuple[bytes, dict[str, Any]]], int, list[int], dict[str, list[int]]], ...] = (
    # builder, pages, pages the policy must drop, canary -> pages it is on
    (_holdings_2023, 6, [5], {CANARY_HOLDINGS_P5: [5]}),
    (_robotics_2023, 4, [3], {CANARY_ROBOTICS_P3: [3]}),
    (_energy_bulletin_2023, 4, [4], {CANARY_ENERGY_P4: [4], CANARY_ENERGY_P4_ZH: [4]}),
    (_globex_2022, 3, [], {}),
    (_board_memo_2023, 3, [1, 2, 3], {CANARY_MEMO: [1, 2, 3]}),
)


def build_demo_corpus(out_dir: Path) -> list[DemoDocument]:
    """Write the demo PDFs into ``out_dir`` (created if needed) as ``<doc_id>.pdf`` and return
    them with their metadata and canaries. Same bytes on every run."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    docs: list[DemoDocument] = []
    for build, pages, restricted, canary_pages in _BUILDERS:
        pdf, meta = build()
        path = out_dir / f"{meta['doc_id']}.pdf"
        path.write_bytes(pdf)
        docs.append(DemoDocument(
            path=path,
            metadata=meta,
            canaries=list(canary_pages),
            page_count=pages,
            restricted_pages=list(restricted),
            canary_pages={k: list(v) for k, v in canary_pages.items()},
        ))
    return docs


_QUERY_CASES: tuple[dict[str, Any], ...] = (
    {
        "description": "English keyword query",
        "request": {"query": "Acme Robotics revenue 2023", "libraries": [DEMO_LIBRARY]},
        "expect_doc_id": "acme-robotics-ar-2023",
    },
    {
        "description": "Chinese query (CJK unigrams and bigrams)",
        "request": {"query": "阿克米能源 营业收入", "libraries": [DEMO_LIBRARY]},
        "expect_doc_id": "acme-energy-bulletin-2023",
    },
    {
        "description": "query with a metadata filter: 2023 reports only (leaves out Globex 2022)",
        "request": {
            "query": "operating margin by segment",
            "libraries": [DEMO_LIBRARY],
            "filters": [{"field": "period", "op": "eq", "value": 2023}],
        },
        "expect_doc_id": "acme-holdings-ar-2023",
    },
)


def demo_queries() -> list[dict[str, Any]]:
    """Three example search requests against the demo library, each a valid search body
    (``POST /v1/search``, ``Engine.search``): English, Chinese, and one with a filter. No
    ``top_k``: callers pick their own."""
    return [_copy_request(c["request"]) for c in _QUERY_CASES]


def demo_query_cases() -> list[dict[str, Any]]:
    """The demo queries with what they must find: ``{"description", "request",
    "expect_doc_id"}``."""
    return [{**c, "request": _copy_request(c["request"])} for c in _QUERY_CASES]


def _copy_request(req: dict[str, Any]) -> dict[str, Any]:
    out = {**req, "libraries": list(req["libraries"])}
    if "filters" in req:
        out["filters"] = [dict(f) for f in req["filters"]]
    return out


# -- declared relations -------------------------------------------------------------------------

#: The company group's relations as a user would declare them (``POST
#: /v1/libraries/demo/graph/relations``): parent, subsidiaries and segment, the peer and its
#: segment, and how the metrics derive from each other; Chinese names as aliases. Each row cites
#: the public page that states it. Row numbers (header = row 1) are pinned by the graph tests.
_DEMO_RELATIONS_CSV = """\
source,relation,target,provenance,source_type,target_type,source_aliases,target_aliases
Acme Robotics,subsidiary_of,Acme Holdings,"Acme Robotics Annual Report 2023, p.1: 'A subsidiary of Acme Holdings'",subsidiary,company,阿克米机器人,阿克米控股
Acme Energy,subsidiary_of,Acme Holdings,"阿克米能源有限公司2023年经营统计公报, p.1: 公司是阿克米控股的全资子公司",subsidiary,company,阿克米能源|阿克米能源有限公司,
Acme Services,subsidiary_of,Acme Holdings,"Acme Holdings Annual Report 2023, p.2: segment reporting",segment,company,,
Globex Automation,subsidiary_of,Globex Corp,"Globex Corp 2022 Annual Report, p.1: revenue by segment",segment,company,,Globex
Globex Corp,peer_of,Acme Holdings,"Acme Holdings Annual Report 2023, p.6: 'Globex Corp, the closest listed peer'",company,company,,
Globex Automation,peer_of,Acme Robotics,"Acme Holdings Annual Report 2023, p.6, Table 6: Acme Robotics against Globex Automation",segment,subsidiary,,
operating margin,derived_from,operating profit,"definition: operating margin = operating profit / revenue",metric,metric,营业利润率|operating margins,营业利润
operating margin,derived_from,revenue,"definition: operating margin = operating profit / revenue",metric,metric,,营业收入
"""


def demo_relations_csv() -> str:
    """The demo library's declared relations, as CSV text (header
    ``source,relation,target,provenance`` plus types and ``|``-separated aliases)."""
    return _DEMO_RELATIONS_CSV
