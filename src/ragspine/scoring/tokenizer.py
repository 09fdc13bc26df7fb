"""CJK-aware tokenizer shared by indexing and querying.

ASCII letters and digits form lower-cased words; every run of CJK ideographs gives its
unigrams and its adjacent bigrams, which works for Chinese without a word segmenter.
Text is NFKC-normalised first so full-width letters and digits (ＡＢＣ１２３, common in
Chinese reports) match their ASCII forms.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter

# CJK Unified Ideographs and Extension A, compatibility ideographs, Extensions B–F.
# Simplified and Traditional characters both live in these blocks.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
_TOKEN_RE = re.compile(rf"[a-z0-9]+|[{_CJK}]+")
_CJK_RE = re.compile(rf"[{_CJK}]")

#: Changes whenever tokenisation changes; recorded with every library so an index built by
#: another tokenizer is detected (docs/invariants.md, 5).
TOKENIZER_VERSION = "cjk-uni-bi-nfkc-1"


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` in order: ASCII words, then per CJK run its unigrams and bigrams."""
    runs = _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower())
    # A run is ASCII letters and digits or CJK ideographs, never both: its first character
    # tells which (one comparison, where a regex match per run cost a third of the time).
    if all(run[0] < "\x80" for run in runs):
        return runs
    out: list[str] = []
    for run in runs:
        if run[0] >= "\x80":
            out.extend(run)  # unigrams
            out.extend(run[i : i + 2] for i in range(len(run) - 1))  # bigrams
        else:
            out.append(run)
    return out


def token_id(token: str) -> int:
    """Stable 32-bit id of a token (sparse-vector index). CRC-32: fast, in the stdlib, and
    collision-rare at vocabulary sizes of a few hundred thousand."""
    return zlib.crc32(token.encode("utf-8"))


def term_counts(tokens: list[str]) -> Counter[str]:
    return Counter(tokens)


def query_language(text: str) -> str:
    """``zh`` when CJK ideographs are at least a third of the letters of ``text``, else ``en``
    (what the channels' language lists are matched against; ragspine's corpora are Chinese and
    English)."""
    norm = unicodedata.normalize("NFKC", text)
    cjk = len(_CJK_RE.findall(norm))
    latin = sum(1 for c in norm if c.isascii() and c.isalpha())
    return "zh" if cjk and cjk * 3 >= cjk + latin else "en"


def is_cjk_char(ch: str) -> bool:
    return bool(_CJK_RE.match(ch))
