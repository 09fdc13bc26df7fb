"""The RESTRICTED policy, applied at index build before anything is encoded or stored.

A document whose sensitivity is RESTRICTED is not indexed at all. A page is RESTRICTED when
the caller says so (a per-page override) or when a classification marker appears in its top or
bottom band. Overrides can only add restriction, never lift a detected marker: a false
positive costs a page of recall, a false negative leaks it.

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


#: A band line at most this long is a label (e.g. "Classification: Restricted"), so a marker in
#: it counts whatever its case; in a longer line only the marker as configured counts, so that
#: prose such as "restricted stock units" in a running header is not a classification.
LABEL_MAX_CHARS = 48


_SPACES = re.compile(r"\s+")
#: Words that introduce a classification wherever the line is ("Classification: Restricted").
_LABEL_WORDS = r"(?:classification|classified|sensitivity|security\s+level|密级|分类)"


def _marker_pattern(markers: Iterable[str], flags: int = 0) -> re.Pattern[str]:
    alts = []
    for m in markers:
        m = m.strip()
        if not m:
            continue
        esc = re.escape(m)
        # Latin markers must stand as a word ("UNRESTRICTED" is not a marker); CJK markers
        # have no word boundaries to respect.
        if m.isascii():
            esc = rf"(?<![A-Za-z0-9]){esc}(?![A-Za-z0-9])"
        alts.append(esc)
    if not alts:
        raise ValueError("no classification markers configured")
    return re.compile("|".join(alts), flags)


@dataclass(frozen=True)
class PagePolicy:
    markers: tuple[str, ...] = ("RESTRICTED", "受限")
    band: float = 0.12

    def __post_init__(self) -> None:
        if not 0 < self.band <= 0.5:
            raise ValueError(f"marker band must be in (0, 0.5], got {self.band}")
        object.__setattr__(self, "_exact", _marker_pattern(self.markers))
        object.__setattr__(self, "_any_case", _marker_pattern(self.markers, re.IGNORECASE))
        labelled = _marker_pattern(self.markers, re.IGNORECASE).pattern
        object.__setattr__(
            self, "_labelled", re.compile(rf"{_LABEL_WORDS}\s*[:：]?\s*(?:{labelled})", re.IGNORECASE)
        )

    def marked(self, page: PageLines) -> bool:
        """True when a text line touching the top or bottom band carries a marker: as
        configured (case-sensitive), in any case when the line is a short label, or after a
        classification label ("Classification: restricted") in a line of any length. Lines read
        by OCR count the same way in the bands, and anywhere on the page when they are a stamp:
        a short line with the marker as configured ("RESTRICTED" in red across a scan)."""
        top = page.height * self.band
        bottom = page.height * (1.0 - self.band)
        ocr = list(getattr(page, "ocr_lines", ()) or ())
        for raw, (_x0, y0, _x1, y1) in [*page.lines, *ocr]:
            if y0 > top and y1 < bottom:
                continue
            if self._line_marked(raw):
                return True
        return any(self._stamp(raw) for raw, _ in ocr)

    def _line_marked(self, raw: str) -> bool:
        exact: re.Pattern[str] = self._exact  # type: ignore[attr-defined]
        any_case: re.Pattern[str] = self._any_case  # type: ignore[attr-defined]
        labelled: re.Pattern[str] = self._labelled  # type: ignore[attr-defined]
        # Full-width letters (ＲＥＳＴＲＩＣＴＥＤ) fold to ASCII first.
        text = unicodedata.normalize("NFKC", raw)
        if exact.search(text):
            return True
        if len(text.strip()) <= LABEL_MAX_CHARS and (
            any_case.search(text) or any_case.search(_SPACES.sub("", text))  # "R E S T R I C T E D"
        ):
            return True
        return bool(labelled.search(text))

    def _stamp(self, raw: str) -> bool:
        """A stamp: a short OCR line holding the marker as configured, or a classification
        label, wherever it stands. Prose ("restricted stock units" in a chart legend) is not."""
        exact: re.Pattern[str] = self._exact  # type: ignore[attr-defined]
        labelled: re.Pattern[str] = self._labelled  # type: ignore[attr-defined]
        text = unicodedata.normalize("NFKC", raw)
        if len(text.strip()) > LABEL_MAX_CHARS:
            return False
        return bool(exact.search(text) or exact.search(_SPACES.sub("", text)) or labelled.search(text))

    def restricted_pages(
        self, pages: Iterable[PageLines], overrides: Mapping[int, str] | None = None
    ) -> list[int]:
        """Sorted 1-based numbers of the pages to drop."""
        over = {int(k): v for k, v in (overrides or {}).items()}
        return sorted(
            p.number for p in pages if is_restricted(over.get(p.number)) or self.marked(p)
        )
