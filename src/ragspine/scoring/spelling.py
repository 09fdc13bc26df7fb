"""Words misspelt in a question: a company's name ("Neflix" for Netflix), and a word the library
holds ("advertsing", "goverment", "survry").

Analysts type names fast, and a name is what tells one filing from its peers'
(:mod:`ragspine.retrieval.channels.documents`). :func:`misspelt_names` reads the question's
capitalised words that are not the first of a sentence (names, not "Being" at a question's
start) and no English word ("Human" does not name Humana), and returns the words of the
library's document names that one of them misses by a single edit (a letter dropped, added,
changed, or two swapped). They are checked against the library's names only: "being" does not
name Boeing, and a capitalised word that is itself a name word is taken as written.

:func:`corrections` reads the question's other BM25 terms that the library does not hold at all
and that are no English word (wordninja's list: "continent" and "flight" are words, never
corrected to "contingent" or "light"), and returns for each the word one edit away that the most
of the library's passages hold, if at least :data:`MIN_DF` do. That is Norvig's corrector with
the library as its dictionary; the vocabulary is not stored (terms are hashed), so the candidates
are generated and looked up. A name ("Zillow") is not corrected to a word ("willow"): names are
only checked against names.

Why by hand: the check is bounded at one edit and runs over a few short words per question; a
dependency for it (rapidfuzz, jellyfish) would do more than is asked.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet

#: Shortest word read: shorter names and words are one edit away from too many others.
MIN_LENGTH = 5
#: Longest word read: no word is longer, and a pasted run of letters would cost 54 lookups a
#: letter.
MAX_TERM = 30
#: Most capitalised words read from one question.
MAX_WORDS = 20
#: Fewest of the library's passages a correction must be in (a word held once may be a typo too).
MIN_DF = 3
#: Most unknown terms of one question looked up (each costs ~54 lookups per letter), and most
#: corrected.
MAX_TRIED = 8
MAX_CORRECTIONS = 4
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
#: A capitalised ASCII word, not first in the text or after a sentence's end.
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<=\s|\(|\"|')([A-Z][a-z]{%d,%d})\b" % (MIN_LENGTH - 1, MAX_TERM - 1))


def edits1(word: str) -> set[str]:
    """Every lower-case ASCII word one edit from ``word`` (itself excluded)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    out = {a + b[1:] for a, b in splits if b}
    out.update(a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1)
    out.update(a + c + b[1:] for a, b in splits if b for c in _LETTERS)
    out.update(a + c + b for a, b in splits for c in _LETTERS)
    out.discard(word)
    return out


def capitalised(text: str) -> list[str]:
    """The question's capitalised words that are not a sentence's first, lower-cased, in order
    (at most :data:`MAX_WORDS`): the words written as names. (The text's first word has nothing
    before it for the pattern to see, so it is never read.)"""
    norm = unicodedata.normalize("NFKC", text).strip()
    return [m.group(1).lower() for m in itertools.islice(_CAPITALISED.finditer(norm), MAX_WORDS)]


def misspelt_names(text: str, name_words: AbstractSet[str], is_word: Callable[[str], bool]) -> dict[str, str]:
    """``word -> name word`` for the capitalised words of ``text`` (:func:`capitalised`) that
    are no name word themselves and no English word (``is_word``) and miss a word of
    ``name_words`` (lower-case) by one edit; the first in alphabetical order when several do."""
    out: dict[str, str] = {}
    for low in capitalised(text):
        if low in name_words or low in out or is_word(low):
            continue
        near = sorted(w for w in edits1(low) & name_words if len(w) >= MIN_LENGTH)
        if near:
            out[low] = near[0]
    return out


def corrections(tokens: Iterable[str], df: Callable[[Sequence[str]], Sequence[int]],
                is_word: Callable[[str], bool], skip: Collection[str] = ()) -> dict[str, str]:
    """``term -> correction`` for the ``tokens`` (BM25 terms) of :data:`MIN_LENGTH` to
    :data:`MAX_TERM` ASCII letters, not in ``skip`` (the words written as names), that no
    passage holds (``df``: how many of the library's passages hold each word) and ``is_word``
    does not know: the word one edit away held by the most passages, if at least
    :data:`MIN_DF`; equal counts go to the alphabetically first. At most :data:`MAX_TRIED`
    terms are looked up."""
    # English words first: a dictionary lookup, where the library's counts cost a search each.
    unknown = [t for t in dict.fromkeys(tokens)
               if MIN_LENGTH <= len(t) <= MAX_TERM and t.isascii() and t.isalpha() and t not in skip
               and not is_word(t)]
    if not unknown:
        return {}
    out: dict[str, str] = {}
    tried = 0
    for term, n in zip(unknown, df(unknown)):
        if n > 0:
            continue
        tried += 1
        cands = sorted(edits1(term))
        counts = df(cands)
        best = max(range(len(cands)), key=lambda i: (counts[i], -i))
        if counts[best] >= MIN_DF:
            out[term] = cands[best]
        if len(out) == MAX_CORRECTIONS or tried == MAX_TRIED:
            break
    return out
