"""The RESTRICTED policy, applied at index build before anything is encoded or stored.

A document whose sensitivity is RESTRICTED is not indexed at all. A page is RESTRICTED when
the caller says so (a per-page override) or when a line in its top or bottom band (or an OCR'd
stamp anywhere) uses a classification marker as a label: "RESTRICTED", "Classification:
Restricted", "内部资料 受限", not "restricted cash" or "Restricted Stock Units" or "受限资产"
(:meth:`PagePolicy.label_line`). Overrides can only add restriction, never lift a detected
marker: a false positive costs a page of recall, a false negative leaks it.

Nothing here logs page text: only page numbers and counts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

RESTRICTED = "RESTRICTED"

#: A box in PDF points: (x0, y0, x1, y1), origin at the top left.
BBox = tuple[float, float, float, float]


class PageLines(Protocol):
    """What the marker check reads of a page: its number, its height in PDF points and its
    text lines with their boxes (from the text layer, or from OCR)."""

    @property
    def number(self) -> int: ...

    @property
    def height(self) -> float: ...

    @property
    def lines(self) -> Sequence[tuple[str, BBox]]: ...

    @property
    def ocr_lines(self) -> Sequence[tuple[str, BBox]]:
        """Lines read from the page's pixels by OCR (empty when none were)."""
        ...


def normalize_sensitivity(value: object) -> str | None:
    """Sensitivity compared case-insensitively after trimming: ``' restricted '`` → ``RESTRICTED``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"sensitivity must be a string, got {value!r}")
    v = value.strip().upper()
    return v or None


def is_restricted(value: object) -> bool:
    return normalize_sensitivity(value) == RESTRICTED


#: Payload key of a stored point's own classification: its page's sensitivity (a per-page
#: override, else the document's). Every query-time exit reads it.
CLASSIFICATION = "classification"


def point_restricted(payload: Mapping[str, object]) -> bool:
    """Whether a stored point (passage or page) must never leave: its own page-level
    classification, or its document's sensitivity, is RESTRICTED. Indexing never writes such a
    point; the exits check anyway, so a point that reached the store by any other way (a bug, an
    older writer, a hand edit) still never reaches a response, a model, a cache or the graph."""
    return is_restricted(payload.get(CLASSIFICATION)) or is_restricted(payload.get("sensitivity"))


#: A line at most this long may be a stamp or a label with spaced-out letters: an OCR line
#: anywhere on the page counts only when it is this short (a stamp, not a paragraph), and a
#: band line this short is read once more with its spaces removed ("R E S T R I C T E D").
LABEL_MAX_CHARS = 48

#: What a classification label holds besides its marker (compared case-folded, whole words):
#: label words, other classification words, handling words, what is being marked, and the few
#: function words of "This document is restricted". A label line, or a label part of a line,
#: holds only these, numbers, dates and punctuation; any other word ("cash", "stock",
#: "including", "to") makes the marker a word of a phrase. "not", "non" and "un" are left out
#: on purpose ("NOT RESTRICTED").
LABEL_VOCABULARY: frozenset[str] = frozenset(
    """
    classification classified sensitivity security level label marking category status
    restricted internal external confidential secret top sensitive official limited private
    proprietary controlled distribution dissemination handling access use only copy
    document documents report file material information data content page version draft
    this the is and or of for
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)

#: The same for Chinese, found as substrings (Chinese puts no spaces between words), longest
#: first. 使用 ("use") alone is left out on purpose: 使用受限 ("restricted in use") is how
#: Chinese financial statements describe pledged cash, while 内部使用 ("internal use") is a label.
LABEL_VOCABULARY_ZH: tuple[str, ...] = tuple(sorted(
    """
    密级 分类 等级 级别 保密 机密 秘密 绝密 内部 外部 敏感 资料 文件 文档 报告 数据 信息 内容 材料
    本报告 本文件 本文档 本资料 本页 仅供 仅限 内部使用 内部参考 参考
    """.split(), key=len, reverse=True))

_SPACES = re.compile(r"\s+")
#: Words that introduce a classification wherever the line is ("Classification: Restricted").
_LABEL_WORDS = r"(?:classification|classified|sensitivity|security\s+level|密级|分类)"
#: Chinese, Japanese and Korean characters (no case, no spaces between words).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
#: Where a part of a line ends: a spaced dash, a dash, a bar, a slash, a colon or semicolon,
#: brackets, a bullet, a full stop before a space, "!" or "?", a Chinese full stop or comma
#: (NFKC turns "，" into ","), a tab or 3+ spaces. An English comma or a hyphen does not end one:
#: "Cash, restricted" and "restricted-stock" stay phrases.
_PART_SEP = re.compile(
    rf"\s[-‐‑‒–—―]+\s|[‒–—―|/\\:;()\[\]{{}}<>«»•·【】「」『』《》〈〉。、!?\t]|\.(?=\s|$)|\s{{3,}}"
    rf"|(?<=[{_CJK}]),|,(?=[{_CJK}])"
)
_WORD = re.compile(r"[^\W_]+")
#: Numbers, dates and page numbers a label may carry: "2021", "Q3", "FY2024", "v2", "p12", "1st".
_NUMBERED = re.compile(r"(?i)(?:fy|q|h|v|p|pp|rev)?\d+(?:st|nd|rd|th)?")
_ZH_NUMBERED = re.compile(r"[第共]?\s*\d+\s*[年月日号页版]")
_ZH_VOCABULARY = re.compile("|".join(map(re.escape, LABEL_VOCABULARY_ZH)))
#: The word directly after / before a marker, across spaces and hyphens only: a Latin word, or
#: the run of CJK characters that touches it.
_NEXT_WORD = re.compile(rf"[\s\-‐‑]*([A-Za-z]+|[{_CJK}]+)")
_PREV_WORD = re.compile(rf"([A-Za-z]+|[{_CJK}]+)[\s\-‐‑]*\Z")
#: Words after a marker that leave it a notice rather than an adjective ("RESTRICTED TO STAFF").
_PREPOSITIONS = frozenset("to for from by without under until except within outside".split())
#: Words before a marker that say it does not apply.
_NEGATIONS = frozenset("not no non un".split())


def _marker_pattern(markers: Iterable[str], flags: int = 0) -> re.Pattern[str]:
    alts = []
    for m in markers:
        m = m.strip()
        if not m:
            continue
        esc = re.escape(m)
        # Latin markers must stand as a word ("UNRESTRICTED", "non-restricted" are not markers);
        # CJK markers have no word boundaries to respect.
        if m.isascii():
            esc = rf"(?<![A-Za-z0-9])(?<!(?i:non)-)(?<!(?i:un)-){esc}(?![A-Za-z0-9])"
        alts.append(esc)
    if not alts:
        raise ValueError("no classification markers configured")
    return re.compile("|".join(alts), flags)


def label_words_only(text: str) -> bool:
    """Whether ``text`` holds nothing but label vocabulary (:data:`LABEL_VOCABULARY`,
    :data:`LABEL_VOCABULARY_ZH`), numbers, dates, page numbers, punctuation and separators."""
    rest = _ZH_VOCABULARY.sub(" ", _ZH_NUMBERED.sub(" ", text))
    return all(w.casefold() in LABEL_VOCABULARY or _NUMBERED.fullmatch(w) for w in _WORD.findall(rest))


def _case(word: str) -> str:
    """A word's kind for "set apart": its case (Latin), or ``cjk`` (no case)."""
    if _CJK_RUN.fullmatch(word):
        return "cjk"
    if word.upper() == word.lower():
        return "none"
    if word.isupper():
        return "upper"
    if word.islower():
        return "lower"
    return "title" if word.istitle() else "mixed"


@dataclass(frozen=True)
class PagePolicy:
    markers: tuple[str, ...] = ("RESTRICTED", "受限")
    band: float = 0.12

    def __post_init__(self) -> None:
        if not 0 < self.band <= 0.5:
            raise ValueError(f"marker band must be in (0, 0.5], got {self.band}")
        any_case = _marker_pattern(self.markers, re.IGNORECASE)
        object.__setattr__(self, "_configured", frozenset(m.strip() for m in self.markers if m.strip()))
        object.__setattr__(self, "_any_case", any_case)
        object.__setattr__(
            self, "_labelled", re.compile(rf"{_LABEL_WORDS}\s*[:：]?\s*(?:{any_case.pattern})", re.IGNORECASE)
        )

    def marked(self, page: PageLines) -> bool:
        """True when a text line touching the top or bottom band uses a marker as a
        classification label (:meth:`label_line`). Lines read by OCR count the same way in the
        bands, and anywhere on the page when they are a stamp: a short line with the marker as
        configured used as a label ("RESTRICTED" in red across a scan)."""
        top = page.height * self.band
        bottom = page.height * (1.0 - self.band)
        ocr = list(getattr(page, "ocr_lines", ()) or ())
        for raw, (_x0, y0, _x1, y1) in [*page.lines, *ocr]:
            if y0 > top and y1 < bottom:
                continue
            if self.label_line(raw):
                return True
        return any(self.label_line(raw, stamp=True) for raw, _ in ocr)

    def label_line(self, raw: str, *, stamp: bool = False) -> bool:
        """Whether the line ``raw`` uses a marker as a classification label, not as a word of a
        phrase ("restricted cash", "Restricted Stock Units", "受限资产"). The line is
        NFKC-folded first (ＲＥＳＴＲＩＣＴＥＤ), and one of at most :data:`LABEL_MAX_CHARS`
        characters is read again with its spaces removed (R E S T R I C T E D). The marker is a
        label when

        1. a label word comes right before it, in any case: "Classification: restricted";
        2. the rest of the line is label vocabulary (:func:`label_words_only`), in any case:
           "restricted", "RESTRICTED // INTERNAL USE", "内部资料 受限", "Page 3 of 10 Restricted";
        3. written capitalised, upper-case or in CJK, the rest of its part of the line (between
           separators, see ``_PART_SEP``) is label vocabulary: "Acme Corp – Restricted",
           "本报告内容受限，仅供内部参考使用";
        4. written as configured (case-sensitive), the word directly after it (across spaces
           and hyphens) is label vocabulary, a preposition, or of another case or script - for
           CJK the runs of CJK characters touching it on both sides: "Distribution RESTRICTED.
           This document…", "ACME CORP RESTRICTED", "DISTRIBUTION RESTRICTED TO NAMED
           RECIPIENTS", but not "RESTRICTED STOCK UNITS" nor "使用受限".

        With ``stamp`` (an OCR line outside the bands) the line must be at most
        :data:`LABEL_MAX_CHARS` long, and rules 2 to 4 count only the marker as configured."""
        text = unicodedata.normalize("NFKC", raw)
        short = len(text.strip()) <= LABEL_MAX_CHARS
        if stamp and not short:
            return False
        if self._label_use(text, stamp):
            return True
        squeezed = _SPACES.sub("", text)
        return short and squeezed != text and self._label_use(squeezed, stamp)

    def _label_use(self, text: str, stamp: bool) -> bool:
        any_case: re.Pattern[str] = self._any_case  # type: ignore[attr-defined]
        labelled: re.Pattern[str] = self._labelled  # type: ignore[attr-defined]
        configured: frozenset[str] = self._configured  # type: ignore[attr-defined]
        if labelled.search(text):  # rule 1
            return True
        found = [m for m in any_case.finditer(text) if not stamp or m.group() in configured]
        if not found:
            return False
        if label_words_only(any_case.sub(" ", text)):  # rule 2
            return True
        seps = list(_PART_SEP.finditer(text))
        for m in found:
            s, e, word = m.start(), m.end(), m.group()
            if not word.islower():  # rule 3
                left = max((p.end() for p in seps if p.end() <= s), default=0)
                right = min((p.start() for p in seps if p.start() >= e), default=len(text))
                if label_words_only(any_case.sub(" ", text[left:s] + " " + text[e:right])):
                    return True
            if word in configured and self._set_apart(text, s, e):  # rule 4
                return True
        return False

    @staticmethod
    def _set_apart(text: str, s: int, e: int) -> bool:
        kind = _case(text[s:e])
        if kind == "cjk":  # no spaces: the run of characters on either side joins it ("使用受限")
            beside = [_NEXT_WORD.match(text, e), _PREV_WORD.search(text, 0, s)]
        else:
            # An English adjective precedes its noun ("RESTRICTED STOCK"): only the word after the
            # marker can make it a phrase, and a preposition there does not ("DISTRIBUTION
            # RESTRICTED TO NAMED RECIPIENTS"). Whatever stands before it ("ACME CORP
            # RESTRICTED") leaves it a label: leaking is worse than dropping.
            prev = _PREV_WORD.search(text, 0, s)
            if prev is not None and prev.group(1).casefold() in _NEGATIONS:  # "NOT RESTRICTED"
                return False
            nxt = _NEXT_WORD.match(text, e)
            beside = [nxt] if nxt is not None and nxt.group(1).casefold() not in _PREPOSITIONS else []
        return not any(
            w is not None and _case(w.group(1)) == kind and not label_words_only(w.group(1)) for w in beside
        )

    def restricted_pages(
        self, pages: Iterable[PageLines], overrides: Mapping[int, str] | None = None
    ) -> list[int]:
        """Sorted 1-based numbers of the pages to drop."""
        over = {int(k): v for k, v in (overrides or {}).items()}
        return sorted(
            p.number for p in pages if is_restricted(over.get(p.number)) or self.marked(p)
        )
