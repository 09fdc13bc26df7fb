"""Page-aware paragraph chunking.

Paragraphs (text blocks) are packed greedily into passages of at most ``max_chars``
characters, and each passage repeats up to ``overlap_chars`` of the end of the one before it.
A paragraph longer than ``max_chars`` is split at sentence ends (``。！？；.!?;``), then by
hard cut, with no overlap between those pieces. A passage is always a contiguous substring
of the page text: it is stored as a span ``[start, end)``, never re-assembled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CHUNK_CHARS = 480
DEFAULT_OVERLAP_CHARS = 80
SENTENCE_ENDS = "。！？；.!?;"
# A sentence ends at CJK punctuation, or at ASCII punctuation followed by space or end of text.
_SENT_END_RE = re.compile(r"[。！？；]+|[.!?;]+(?=\s|$)")


@dataclass(frozen=True)
class Span:
    start: int
    end: int


def _check(max_chars: int, overlap_chars: int) -> None:
    if max_chars <= 0:
        raise ValueError(f"max_chars must be > 0, got {max_chars}")
    if overlap_chars < 0:
        raise ValueError(f"overlap_chars must be >= 0, got {overlap_chars}")
    if overlap_chars >= max_chars:
        raise ValueError(f"overlap_chars ({overlap_chars}) must be < max_chars ({max_chars})")


def _trim(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _split_long(text: str, s: int, e: int, max_chars: int) -> list[tuple[int, int]]:
    """Pieces of ``text[s:e]``, each at most ``max_chars``: sentences packed greedily, an
    over-long sentence cut hard."""
    sentences: list[tuple[int, int]] = []
    cur = s
    for m in _SENT_END_RE.finditer(text, s, e):
        sentences.append((cur, m.end()))
        cur = m.end()
    if cur < e:
        sentences.append((cur, e))
    pieces: list[tuple[int, int]] = []
    ps = pe = None
    for ss, se in sentences:
        ss, se = _trim(text, ss, se)
        if ss >= se:
            continue
        if se - ss > max_chars:
            if ps is not None:
                pieces.append((ps, pe))  # type: ignore[arg-type]
                ps = pe = None
            for cs in range(ss, se, max_chars):
                a, b = _trim(text, cs, min(cs + max_chars, se))
                if a < b:
                    pieces.append((a, b))
            continue
        if ps is None:
            ps, pe = ss, se
        elif se - ps <= max_chars:
            pe = se
        else:
            pieces.append((ps, pe))  # type: ignore[arg-type]
            ps, pe = ss, se
    if ps is not None:
        pieces.append((ps, pe))  # type: ignore[arg-type]
    return pieces


def chunk_spans(
    text: str,
    paragraphs: Sequence[tuple[int, int]],
    max_chars: int = DEFAULT_CHUNK_CHARS,
    overlap_chars: int = DEFAULT_OVERLAP_CHARS,
) -> list[Span]:
    """Passages of ``text`` given its paragraph spans (sorted, non-overlapping)."""
    _check(max_chars, overlap_chars)
    # Units: (start, end, forced) — forced units come from splitting a long paragraph.
    units: list[tuple[int, int, bool]] = []
    for ps, pe in paragraphs:
        ps, pe = _trim(text, ps, pe)
        if ps >= pe:
            continue
        if pe - ps <= max_chars:
            units.append((ps, pe, False))
        else:
            units.extend((a, b, True) for a, b in _split_long(text, ps, pe, max_chars))

    spans: list[Span] = []
    i = 0
    prev: Span | None = None
    prev_forced = True
    while i < len(units):
        us, ue, forced = units[i]
        if forced:
            spans.append(Span(us, ue))
            prev, prev_forced = spans[-1], True
            i += 1
            continue
        # Pack following normal paragraphs while the passage stays within max_chars.
        end = ue
        j = i + 1
        while j < len(units) and not units[j][2] and units[j][1] - us <= max_chars:
            end = units[j][1]
            j += 1
        start = us
        if prev is not None and not prev_forced and overlap_chars > 0:
            start = _overlap_start(text, prev, us, end, max_chars, overlap_chars)
        spans.append(Span(start, end))
        prev, prev_forced = spans[-1], False
        i = j
    return spans


def _overlap_start(text: str, prev: Span, us: int, end: int, max_chars: int, overlap: int) -> int:
    """Start of the next passage: back into ``prev`` by at most ``overlap`` characters, at a
    word boundary, without the passage exceeding ``max_chars``."""
    lo = max(prev.start + 1, prev.end - overlap, end - max_chars)
    if lo >= us:
        return us
    # Prefer a sentence start inside the overlap window, so a passage reads from the start of
    # a sentence; else the next word start (a CJK character is a word on its own).
    m = _SENT_END_RE.search(text, lo, us)
    if m is not None:
        s, _ = _trim(text, m.end(), us)
        if s < prev.end:
            return s
    s = lo
    while s < us and s > 0 and not text[s - 1].isspace() and text[s].isascii() and text[s].isalnum():
        s += 1
    s, _ = _trim(text, s, us)
    return s if s < prev.end else us
