"""A company's name misspelt in a question: "Neflix" for Netflix, "Amazom" for Amazon.

Analysts type names fast, and a name is what tells one filing from its peers'
(:mod:`ragspine.retrieval.channels.documents`). :func:`misspelt_names` reads the question's
capitalised words that are not the first of a sentence (names, not "Being" at a question's
start) and returns the words of the library's document names that one of them misses by a single
edit (a letter dropped, added, changed, or two swapped). The words are checked against the
library's names only, never against its whole vocabulary: "being" does not name Boeing because
it is not capitalised, and a capitalised word that is itself a name word is taken as written.

Why by hand: the check is bounded at one edit and runs over a few short words per question; a
dependency for it (rapidfuzz, jellyfish) would do more than is asked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Shortest word read: shorter names are one edit away from too many words ("Apple"/"Apply" is
#: five letters and still distinct; "Intel"/"Inter" is why the word must be capitalised too).
MIN_LENGTH = 5
#: Most capitalised words read from one question.
MAX_WORDS = 20
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
