"""Words misspelt in a question: a company's name ("Neflix" for Netflix), and a word the library
holds ("advertsing", "goverment", "survry").

Analysts type names fast, and a name is what tells one filing from its peers'
(:mod:`ragspine.retrieval.channels.documents`). :func:`misspelt_names` reads the question's
capitalised words that are not the first of a sentence (names, not "Being" at a question's
start) and returns the words of the library's document names that one of them misses by a single
edit (a letter dropped, added, changed, or two swapped). The words are checked against the
library's names only, never against its whole vocabulary: "being" does not name Boeing because
it is not capitalised, and a capitalised word that is itself a name word is taken as written.

:func:`corrections` reads the question's BM25 terms that the library does not hold at all and that
are no English word (wordninja's list: "continent" and "flight" are words, never corrected to
"contingent" or "light"), and returns for each the word one edit away that the most of the
library's passages hold, if at least :data:`MIN_DF` do. That is Norvig's corrector with the
library as its dictionary; the vocabulary is not stored (terms are hashed), so the candidates are
generated and looked up.

Why by hand: the check is bounded at one edit and runs over a few short words per question; a
dependency for it (rapidfuzz, jellyfish) would do more than is asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

#: Shortest word read: shorter names are one edit away from too many words ("Apple"/"Apply" is
#: five letters and still distinct; "Intel"/"Inter" is why the word must be capitalised too).
MIN_LENGTH = 5
#: Most capitalised words read from one question.
MAX_WORDS = 20
#: Fewest of the library's passages a correction must be in (a word held once may be a typo too).
MIN_DF = 3
#: Most terms of one question corrected (each costs ~60 lookups per letter).
MAX_CORRECTIONS = 4
#: Longest term corrected: no word is longer, and a pasted run of letters would cost
#: 54 lookups a letter.
MAX_TERM = 30
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
#: A capitalised ASCII word, not first in the text or after a sentence's end.
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<![.!?])(?<=\s|\(|\"|')([A-Z][a-z]{%d,})\b" % (MIN_LENGTH - 1))


def one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by exactly one deletion, insertion, substitution or swap of two
    adjacent letters."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1:]
    if a[i + 1:] == b[i + 1:]:
        return True
    return i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]


def misspelt_names(text: str, name_words: Iterable[str]) -> set[str]:
    """The words of ``name_words`` (lower-case) that a capitalised word of ``text`` misspells
    by one edit; a word of ``text`` that is a name word itself is taken as written."""
    names = {w for w in name_words if len(w) >= MIN_LENGTH and w.isascii() and w.isalpha()}
    out: set[str] = set()
    for word in _CAPITALISED.findall(text)[:MAX_WORDS]:
        low = word.lower()
        if low in names:
            continue
        out.update(w for w in names if one_edit(low, w))
    return out


def edits1(word: str) -> set[str]:
    """Every lower-case ASCII word one edit from ``word`` (itself excluded)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    out = {a + b[1:] for a, b in splits if b}
    out.update(a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1)
    out.update(a + c + b[1:] for a, b in splits if b for c in _LETTERS)
    out.update(a + c + b for a, b in splits for c in _LETTERS)
    out.discard(word)
    return out


def corrections(tokens: Iterable[str], df: Callable[[Sequence[str]], Sequence[int]],
                is_word: Callable[[str], bool]) -> dict[str, str]:
    """``term -> correction`` for the ``tokens`` (BM25 terms) of :data:`MIN_LENGTH` to
    :data:`MAX_TERM` ASCII letters that no passage holds (``df``: how many of the library's passages hold each
    word) and ``is_word`` does not know: the word one edit away held by the most passages, if at
    least :data:`MIN_DF`; equal counts go to the alphabetically first."""
    unknown = [t for t in dict.fromkeys(tokens) if MIN_LENGTH <= len(t) <= MAX_TERM and t.isascii() and t.isalpha()]
    if not unknown:
        return {}
    out: dict[str, str] = {}
    for term, n in zip(unknown, df(unknown)):
        if n > 0 or is_word(term):
            continue
        cands = sorted(edits1(term))
        counts = df(cands)
        best = max(range(len(cands)), key=lambda i: (counts[i], -i))
        if counts[best] >= MIN_DF:
            out[term] = cands[best]
            if len(out) == MAX_CORRECTIONS:
                break
    return out
