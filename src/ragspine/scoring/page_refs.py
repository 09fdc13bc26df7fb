"""The pages a question names by number: "the chart on page 14", "slide 31", "pages 10 and 11",
"from page 3 to page 10", "the cover page", "the second last page", "第12页".

Readers of long reports point at pages, and a page's number is rarely in its text: what a
figure or a slide shows is in pixels, and its page number, if printed at all, is one digit among
hundreds. :func:`page_refs` reads the numbers; the page-number prior
(:mod:`ragspine.retrieval.channels.page_numbers`) lifts the pages that carry them, by their
place in the file or by the number printed on them (:mod:`ragspine.indexing.page_labels`).

A page counted from the end ("the last page", "the second last page") is a negative number:
-1 is the last page, -2 the one before it; the document's length resolves it.

:func:`figure_refs` reads the figures and tables a question names by number ("Figure 3",
"Table 1-1", "Fig. 2", "图3", "表2") as the keys the captions of a document's pages are indexed
under (:mod:`ragspine.indexing.captions`): ``figure:3``, ``table:1-1``.
"""

from __future__ import annotations

import re

#: Widest range read from "pages 3 to 10" (a wider one points at no page in particular).
MAX_RANGE = 30
#: Most pages one question may name (a longer list is not a pointer to a page).
MAX_REFS = 40

_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
}
_CN_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}

_NUM = r"(?:\d{1,5}|" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")"
_SEP = r"\s*(?:,|&|and|or|to|through|-|–|—)\s*(?:(?:pages?|slides?|pp?\.)\s*)?"
#: "page 14", "pages 10 and 11", "pages 100-110", "p. 12", "pp. 4-6", "slide 31", "slides 3, 4 and 5".
_NAMED = re.compile(
    r"\b(?:pages?|slides?|pp?\.)\s*(?:no\.?\s*|number\s+|#\s*)?(" + _NUM + r")\b((?:" + _SEP + _NUM + r"\b)*)",
    re.IGNORECASE,
)
#: "the 6th page", "the second page", "the 3rd slide".
_ORDINAL = re.compile(
    r"\b(?:(\d{1,4})(?:st|nd|rd|th)|(" + "|".join(_ORDINALS) + r"))\s+(?:cover\s+)?(?:page|slide)\b",
    re.IGNORECASE,
)
#: "the last page", "the second last page", "the second-to-last slide", "the penultimate page".
_FROM_END = re.compile(
    r"\b(?:(" + "|".join(_ORDINALS) + r")[\s-]+(?:to[\s-]+)?last|(penultimate)|last)\s+(?:page|slide)\b"
    r"|\b(?:page|slide)\s+at\s+the\s+(" + "|".join(_ORDINALS) + r")\s+last\b",
    re.IGNORECASE,
)
#: "the cover page", "the front page", "the title slide".
_COVER = re.compile(r"\b(?:cover|front|title)\s+(?:page|slide)\b", re.IGNORECASE)
#: "第12页", "第 3-5 页", "第十二页", "第3张幻灯片".
_CHINESE = re.compile(r"第\s*([0-9一二两三四五六七八九十]{1,4})\s*(?:[-–—至到]\s*([0-9一二两三四五六七八九十]{1,4})\s*)?"
                      r"(?:页|頁|张幻灯片|張幻燈片)")


#: "Figure 3", "Fig. 4.2", "Table 1-1", "Exhibit 99.1", "Figure A", "Exhibit P-10" (a capital
#: letter: "tables" is not table "s"), "图3", "表 2".
_FIGURE = re.compile(
    r"\b(?P<label>(?i:figure|fig\.?|table|tab\.|exhibit|chart))\s*"
    r"(?P<num>\d{1,3}(?:[-.–]\d{1,3})?(?![\d.]*\d)|[A-Z](?:[-.–]?\d{1,2})?(?![\w]))"
    r"|(?P<cjk_label>图|圖|表)\s*(?P<cjk_num>\d{1,3}(?:[-.–]\d{1,3})?)"
)
#: "the first figure", "the 2nd table": the figure numbered so ("the first figure of the paper").
_FIGURE_ORDINAL = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)|(" + "|".join(_ORDINALS) + r"))\s+(figure|table)\b", re.IGNORECASE)
_TABLE_LABELS = ("table", "tab.", "表")


def caption_key(label: str, number: str) -> str:
    """``figure:3`` or ``table:1-1``: what a caption and a question share."""
    kind = "table" if label.lower() in _TABLE_LABELS else "figure"
    return f"{kind}:{number.lower().replace('–', '-').replace('.', '-')}"


def figure_refs(text: str) -> frozenset[str]:
    """The figures and tables ``text`` names by number, as caption keys (``figure:3``)."""
    out = []
    for m in _FIGURE.finditer(text):
        if m.group("label"):
            out.append(caption_key(m.group("label"), m.group("num").rstrip(".")))
        else:
            out.append(caption_key(m.group("cjk_label"), m.group("cjk_num")))
    for m in _FIGURE_ORDINAL.finditer(text):
        n = int(m.group(1)) if m.group(1) else _ORDINALS[m.group(2).lower()]
        out.append(caption_key(m.group(3), str(n)))
    refs = list(dict.fromkeys(out))
    return frozenset(refs) if len(refs) <= MAX_REFS else frozenset()


def _number(token: str) -> int | None:
    token = token.strip().lower()
    if token.isdigit():
        return int(token)
    return _WORDS.get(token)


def _chinese_number(token: str) -> int | None:
    if token.isdigit():
        return int(token)
    if token == "十":
        return 10
    if "十" in token:
        tens, _, ones = token.partition("十")
        t = _CN_DIGITS.get(tens, 1) if tens else 1
        o = _CN_DIGITS.get(ones, 0) if ones else 0
        return t * 10 + o if (not tens or tens in _CN_DIGITS) and (not ones or ones in _CN_DIGITS) else None
    return _CN_DIGITS.get(token) if len(token) == 1 else None


def _span(first: int, last: int) -> list[int]:
    """``first`` .. ``last`` when the range is narrow enough to point at pages; else its ends."""
    if first <= last <= first + MAX_RANGE:
        return list(range(first, last + 1))
    return [first, last]


def page_refs(text: str) -> frozenset[int]:
    """The page numbers ``text`` names (1-based; -1 the last page, -2 the one before it)."""
    out: list[int] = []
    for m in _NAMED.finditer(text):
        first = _number(m.group(1))
        if first is None:
            continue
        tail = m.group(2) or ""
        # "page 3 and one of ..." is not page 1: a list keeps to digits or to words.
        rest = [_number(x) for x in re.findall(_NUM, tail, re.IGNORECASE) if x.isdigit() == m.group(1).isdigit()]
        nums = [first, *(n for n in rest if n is not None)]
        if len(nums) == 2 and re.search(r"\bto\b|through|-|–|—", tail, re.IGNORECASE):
            out.extend(_span(nums[0], nums[1]))
        else:
            out.extend(nums)
    for m in _ORDINAL.finditer(text):
        out.append(int(m.group(1)) if m.group(1) else _ORDINALS[m.group(2).lower()])
    for m in _FROM_END.finditer(text):
        word = m.group(1) or m.group(3)
        out.append(-2 if m.group(2) else -(_ORDINALS[word.lower()] if word else 1))
    if _COVER.search(text):
        out.append(1)
    for m in _CHINESE.finditer(text):
        first = _chinese_number(m.group(1))
        last = _chinese_number(m.group(2)) if m.group(2) else None
        if first is not None:
            out.extend(_span(first, last) if last is not None else [first])
    refs = [n for n in dict.fromkeys(out) if n != 0]
    return frozenset(refs) if len(refs) <= MAX_REFS else frozenset()
