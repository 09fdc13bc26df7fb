"""Page-aware paragraph chunking: argument checks, hand-worked examples, and properties
(contiguous spans, size bound, coverage, packing, overlap, sentence splitting) checked with
hypothesis on generated English/Chinese pages."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine.indexing.chunking import (
    DEFAULT_CHUNK_CHARS,
    DEFAULT_OVERLAP_CHARS,
    SENTENCE_ENDS,
    Span,
    chunk_spans,
)

SEP = "\n\n"


def _page(paragraphs: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """Page text of ``paragraphs`` joined by blank lines, and each paragraph's span."""
    spans, pos = [], 0
    for p in paragraphs:
        spans.append((pos, pos + len(p)))
        pos += len(p) + len(SEP)
    return SEP.join(paragraphs), spans


def _texts(text: str, spans: list[Span]) -> list[str]:
    return [text[s.start : s.end] for s in spans]


# -- arguments ------------------------------------------------------------------------------


def test_defaults_are_sane() -> None:
    assert 0 <= DEFAULT_OVERLAP_CHARS < DEFAULT_CHUNK_CHARS
    assert set(SENTENCE_ENDS) == set("。！？；.!?;")


@pytest.mark.parametrize(
    ("max_chars", "overlap", "match"),
    [
        (0, 0, "max_chars"),
        (-5, 0, "max_chars"),
        (10, -1, "overlap_chars"),
        (10, 10, "overlap_chars"),
        (10, 11, "overlap_chars"),
    ],
)
def test_bad_arguments(max_chars: int, overlap: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        chunk_spans("abc", [(0, 3)], max_chars=max_chars, overlap_chars=overlap)


def test_bad_arguments_refused_even_without_text() -> None:
    with pytest.raises(ValueError):
        chunk_spans("", [], max_chars=0)


def test_smallest_valid_arguments() -> None:
    assert chunk_spans("ab", [(0, 2)], max_chars=1, overlap_chars=0) == [Span(0, 1), Span(1, 2)]


# -- hand-worked examples -------------------------------------------------------------------


def test_empty_and_blank_input() -> None:
    assert chunk_spans("", []) == []
    assert chunk_spans("   \n\n  ", [(0, 3), (5, 7)]) == []


def test_single_short_paragraph_is_one_chunk_trimmed() -> None:
    text = "  Revenue grew.  "
    assert chunk_spans(text, [(0, len(text))]) == [Span(2, 15)]


def test_paragraphs_packed_greedily() -> None:
    # "Alpha beta." [0,11)  "Gamma delta." [13,25)  "Epsilon zeta eta." [27,44)
    text, paras = _page(["Alpha beta.", "Gamma delta.", "Epsilon zeta eta."])
    assert paras == [(0, 11), (13, 25), (27, 44)]
    # 25 - 0 <= 30 packs the first two; 44 - 0 > 30 starts a new chunk
    assert chunk_spans(text, paras, max_chars=30, overlap_chars=0) == [Span(0, 25), Span(27, 44)]
    assert chunk_spans(text, paras, max_chars=200, overlap_chars=50) == [Span(0, 44)]
    assert chunk_spans(text, paras, max_chars=17, overlap_chars=0) == [
        Span(0, 11),
        Span(13, 25),
        Span(27, 44),
    ]


def test_overlap_goes_back_to_a_word_start() -> None:
    text, paras = _page(["Alpha beta.", "Gamma delta.", "Epsilon zeta eta."])
    # Second chunk may start at max(0 + 1, 25 - 10, 44 - 30) = 15, inside "Gamma" [13,18);
    # it moves forward to the next word, "delta." at 19: overlap 25 - 19 = 6 <= 10.
    assert chunk_spans(text, paras, max_chars=30, overlap_chars=10) == [Span(0, 25), Span(19, 44)]
    assert _texts(text, chunk_spans(text, paras, 30, 10))[1] == "delta.\n\nEpsilon zeta eta."


def test_overlap_limited_by_max_chars() -> None:
    text, paras = _page(["aaaa bbbb", "cccc dddd"])
    assert paras == [(0, 9), (11, 20)]
    spans = chunk_spans(text, paras, max_chars=12, overlap_chars=8)
    # The second chunk may reach back to max(0 + 1, 9 - 8, 20 - 12) = 8, inside "bbbb" [5,9);
    # the next word start is past the end of the first chunk, so there is no overlap at all.
    assert spans == [Span(0, 9), Span(11, 20)]
    # With max 16 it may reach back to max(1, 1, 20 - 16) = 4, a space: it starts at "bbbb".
    spans = chunk_spans(text, paras, max_chars=16, overlap_chars=8)
    assert spans == [Span(0, 9), Span(5, 20)]


def test_overlap_with_cjk_starts_at_any_character() -> None:
    text, paras = _page(["第一段文字内容", "第二段"])
    # [0,7) and [9,12); max 8 -> not packed (12 > 8); overlap 3 -> start max(1, 4, 4) = 4
    spans = chunk_spans(text, paras, max_chars=8, overlap_chars=3)
    assert spans == [Span(0, 7), Span(4, 12)]
    assert text[4:12] == "字内容\n\n第二段"


def test_no_overlap_when_overlap_chars_is_zero() -> None:
    text, paras = _page(["one two three", "four five six", "seven eight"])
    spans = chunk_spans(text, paras, max_chars=14, overlap_chars=0)
    assert spans == [Span(p0, p1) for p0, p1 in paras]


def test_long_paragraph_split_at_ascii_sentence_ends() -> None:
    text = "One two. Three four! Five six? Seven eight; Nine."
    # sentences: [0,8) [9,20) [21,30) [31,43) [44,49)
    # packed within 22: [0,20) (20 <= 22), [21,43) (22 <= 22), [44,49)
    spans = chunk_spans(text, [(0, len(text))], max_chars=22, overlap_chars=5)
    assert _texts(text, spans) == ["One two. Three four!", "Five six? Seven eight;", "Nine."]
    assert spans == [Span(0, 20), Span(21, 43), Span(44, 49)]


def test_long_chinese_paragraph_split_at_cjk_sentence_ends() -> None:
    text = "第一句。第二句！第三句？第四句；"
    spans = chunk_spans(text, [(0, len(text))], max_chars=8, overlap_chars=2)
    assert _texts(text, spans) == ["第一句。第二句！", "第三句？第四句；"]
    spans = chunk_spans(text, [(0, len(text))], max_chars=5, overlap_chars=2)
    assert _texts(text, spans) == ["第一句。", "第二句！", "第三句？", "第四句；"]


def test_decimal_point_is_not_a_sentence_end() -> None:
    text = "Revenue rose 3.5 percent. Costs fell 1.2 percent."
    spans = chunk_spans(text, [(0, len(text))], max_chars=30, overlap_chars=0)
    assert _texts(text, spans) == ["Revenue rose 3.5 percent.", "Costs fell 1.2 percent."]


def test_over_long_sentence_cut_hard_without_overlap() -> None:
    text = "a" * 25
    spans = chunk_spans(text, [(0, 25)], max_chars=10, overlap_chars=3)
    assert spans == [Span(0, 10), Span(10, 20), Span(20, 25)]


def test_hard_cut_pieces_are_trimmed() -> None:
    text = "aaaa bbbb cccc"  # one sentence, no ends; cut every 5: "aaaa " "bbbb " "cccc"
    spans = chunk_spans(text, [(0, len(text))], max_chars=5, overlap_chars=2)
    assert _texts(text, spans) == ["aaaa", "bbbb", "cccc"]


def test_sentences_then_hard_cut_mixed() -> None:
    text = "Short one. " + "x" * 12 + ". Tail."
    # sentences "Short one." [0,10), "xxxxxxxxxxxx." [11,24) (13 > 8: cut), "Tail." [25,30)
    spans = chunk_spans(text, [(0, len(text))], max_chars=10, overlap_chars=4)
    assert _texts(text, spans) == ["Short one.", "xxxxxxxxxx", "xx.", "Tail."]


def test_no_overlap_between_long_paragraph_pieces_and_neighbours() -> None:
    long = "First sentence here. Second sentence here. Third one."
    text, paras = _page(["Intro words", long, "Outro words"])
    spans = chunk_spans(text, paras, max_chars=22, overlap_chars=10)
    texts = _texts(text, spans)
    assert texts == [
        "Intro words",
        "First sentence here.",
        "Second sentence here.",
        "Third one.",
        "Outro words",
    ]
    for a, b in zip(spans, spans[1:]):
        assert b.start >= a.end


def test_short_paragraphs_after_a_long_one_are_packed() -> None:
    text, paras = _page(["aaaa. bbbb. cccc.", "dd", "ee"])
    spans = chunk_spans(text, paras, max_chars=12, overlap_chars=0)
    assert _texts(text, spans) == ["aaaa. bbbb.", "cccc.", "dd\n\nee"]


def test_page_text_outside_paragraphs_is_not_a_chunk_start() -> None:
    text = "HEADER\n\nBody text here.\n\nFOOTER"
    spans = chunk_spans(text, [(8, 23)], max_chars=100, overlap_chars=10)
    assert spans == [Span(8, 23)]


def test_chunks_of_default_size() -> None:
    para = "Revenue grew in every segment this year. " * 20
    text, paras = _page([para.strip(), "Short closing note."])
    spans = chunk_spans(text, paras)
    assert all(s.end - s.start <= DEFAULT_CHUNK_CHARS for s in spans)
    assert text[spans[-1].start : spans[-1].end].endswith("Short closing note.")


# -- properties -----------------------------------------------------------------------------

_ASCII_WORD = st.text(alphabet="abcdefgXYZ0123456789", min_size=1, max_size=9)
_CJK_WORD = st.text(alphabet="营收增长利润公司報告年度", min_size=1, max_size=12)
_PUNCT = st.sampled_from(["", "", "", ".", "!", "?", ";", ",", "。", "！", "？", "；", "，", "%"])
_WORD = st.builds(lambda w, p: w + p, st.one_of(_ASCII_WORD, _CJK_WORD), _PUNCT)
_PARAGRAPH = st.builds(
    lambda words, pad: pad + " ".join(words) + pad,
    st.one_of(st.lists(_WORD, max_size=4), st.lists(_WORD, max_size=25)),
    st.sampled_from(["", "", " ", "  "]),
)


def _sentence_ends(text: str, s: int, e: int) -> set[int]:
    """Positions just after a sentence end inside text[s:e] (reference, written plainly)."""
    out = set()
    i = s
    while i < e:
        ch = text[i]
        if ch in "。！？；":
            j = i
            while j < e and text[j] in "。！？；":
                j += 1
            out.add(j)
            i = j
        elif ch in ".!?;":
            j = i
            while j < e and text[j] in ".!?;":
                j += 1
            if j == e or text[j].isspace():
                out.add(j)
            i = j
        else:
            i += 1
    return out


def _trimmed(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _is_ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paragraphs=st.lists(_PARAGRAPH, max_size=10), max_chars=st.integers(4, 120), data=st.data())
def test_chunking_properties(paragraphs: list[str], max_chars: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, max_chars - 1), label="overlap")
    text, paras = _page(paragraphs)
    spans = chunk_spans(text, paras, max_chars=max_chars, overlap_chars=overlap)

    trimmed = [_trimmed(text, s, e) for s, e in paras]
    trimmed = [(s, e) for s, e in trimmed if s < e]
    short = [(s, e) for s, e in trimmed if e - s <= max_chars]
    long = [(s, e) for s, e in trimmed if e - s > max_chars]

    def inside_long(sp: Span) -> tuple[int, int] | None:
        for s, e in long:
            if s <= sp.start and sp.end <= e:
                return (s, e)
        return None

    # 1. contiguous, bounded, trimmed substrings, in order
    for sp in spans:
        assert 0 <= sp.start < sp.end <= len(text)
        assert sp.end - sp.start <= max_chars
        assert not text[sp.start].isspace() and not text[sp.end - 1].isspace()
    for a, b in zip(spans, spans[1:]):
        assert a.start < b.start and a.end < b.end

    # 2. coverage: every non-space character of every paragraph is in some chunk
    covered = [False] * len(text)
    for sp in spans:
        for i in range(sp.start, sp.end):
            covered[i] = True
    for s, e in paras:
        for i in range(s, e):
            if not text[i].isspace():
                assert covered[i], (i, text[i])

    # 3. a short paragraph is never cut: it lies whole in a chunk
    for s, e in short:
        assert any(sp.start <= s and e <= sp.end for sp in spans), text[s:e]

    # 4. a long paragraph's pieces lie inside it, are disjoint, and are split at sentence
    #    ends when no sentence is too long (packed greedily), else cut hard
    for s, e in long:
        pieces = [sp for sp in spans if sp.start < e and sp.end > s]
        assert all(s <= sp.start and sp.end <= e for sp in pieces)
        for a, b in zip(pieces, pieces[1:]):
            assert b.start >= a.end
        ends = _sentence_ends(text, s, e)
        bounds = sorted({s, *ends, e})
        sentences = [_trimmed(text, a, b) for a, b in zip(bounds, bounds[1:])]
        sentences = [(a, b) for a, b in sentences if a < b]
        if all(b - a <= max_chars for a, b in sentences):
            starts = {a for a, _ in sentences}
            stops = {b for _, b in sentences}
            for a, b in zip(pieces, pieces[1:]):
                assert a.start in starts and a.end in stops
                next_sentence_end = min(x for x in stops if x > b.start)
                assert next_sentence_end - a.start > max_chars  # greedy: it did not fit
            assert pieces[-1].end == e

    # 5. other chunks end at a paragraph end; overlap only between packed chunks, at most
    #    overlap_chars, starting at a word boundary
    para_ends = {e for _, e in short}
    for sp in spans:
        if inside_long(sp) is None:
            assert sp.end in para_ends
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            assert overlap > 0
            assert inside_long(a) is None and inside_long(b) is None
            assert a.end - b.start <= overlap
            assert not (_is_ascii_alnum(text[b.start - 1]) and _is_ascii_alnum(text[b.start]))

    # 6. greedy packing: the first paragraph of a chunk did not fit in the chunk before
    def own_first(sp: Span, before: Span | None) -> tuple[int, int]:
        mine = [
            (s, e)
            for s, e in short
            if sp.start <= s and e <= sp.end and not (before and before.start <= s and e <= before.end)
        ]
        return min(mine)

    prev: Span | None = None
    for a, b in zip(spans, spans[1:]):
        if inside_long(a) is None and inside_long(b) is None:
            between_long = any(a.end <= s and e <= b.end for s, e in long)
            if not between_long:
                fa = own_first(a, prev if prev and inside_long(prev) is None else None)
                fb = own_first(b, a)
                assert fb[1] - fa[0] > max_chars
        prev = a


@settings(max_examples=100, deadline=None)
@given(
    sentences=st.lists(
        st.builds(lambda ws, end: " ".join(ws) + end, st.lists(_ASCII_WORD, min_size=1, max_size=4),
                  st.sampled_from([".", "!", "?", ";", "。", "！", "？", "；"])),
        min_size=2,
        max_size=12,
    ),
    max_chars=st.integers(8, 40),
)
def test_long_paragraph_pieces_never_overlap(sentences: list[str], max_chars: int) -> None:
    text = " ".join(sentences)
    overlap = max_chars - 1
    spans = chunk_spans(text, [(0, len(text))], max_chars=max_chars, overlap_chars=overlap)
    for a, b in zip(spans, spans[1:]):
        assert b.start >= a.end
    assert all(sp.end - sp.start <= max_chars for sp in spans)
    assert "".join(text[sp.start : sp.end] for sp in spans).replace(" ", "") == text.replace(" ", "")


@settings(max_examples=30, deadline=None)
@given(paragraphs=st.lists(_PARAGRAPH, max_size=6), max_chars=st.integers(4, 60), data=st.data())
def test_deterministic(paragraphs: list[str], max_chars: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, max_chars - 1))
    text, paras = _page(paragraphs)
    assert chunk_spans(text, paras, max_chars, overlap) == chunk_spans(text, paras, max_chars, overlap)
