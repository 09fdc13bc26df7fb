"""Put spaces back into English words that OCR glued together.

PP-OCRv4's recogniser (trained mostly on Chinese) often drops the spaces of English lines:
"GLOBALMOBILEDEVELOPERSMINDSHARE". On the chart-heavy reports this project indexes, 5.2 % of
OCR tokens were 16+ letters long against 0.13 % in text layers, and a glued token matches no
query term in BM25.

:func:`split_glued` splits only ASCII letter runs of at least ``min_run`` letters that are not
a word themselves, with the word-segmentation dynamic programme of ``wordninja`` (Zipf costs
over a word list ranked by frequency in English Wikipedia). The list is the one the
``wordninja`` package ships (126 k words, ``wordninja/wordninja_words.txt.gz``); it is read
from the installed package, never copied into this repository, and loaded once, lazily.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import logging
import math
import re
from pathlib import Path

from ragspine.ocr.base import OcrInputError, OcrUnavailableError

logger = logging.getLogger(__name__)

#: Letter runs shorter than this are left alone: they are mostly real words or names, and a
#: short run has too little context for the word costs to be trusted.
MIN_GLUED_RUN = 12
#: A split is kept only if its pieces average at least this many letters (garbage such as
#: "XKCDQWERTYZZ" splits into short rare pieces); English words average about 4.7.
_MIN_MEAN_PIECE = 3.0
#: The only one-letter pieces a split may contain ("a", "I"); any other one-letter piece means
#: the run is not glued English, and it is kept as it is.
_ONE_LETTER_WORDS = frozenset({"a", "i"})

_LETTER_RUN = re.compile(r"[A-Za-z]+")
_WORDS_PACKAGE = "wordninja"
_WORDS_FILE = ("wordninja", "wordninja_words.txt.gz")  # beside wordninja.py in site-packages


def split_glued(text: str, *, min_run: int = MIN_GLUED_RUN) -> str:
    """``text`` with spaces inserted inside glued English letter runs.

    Only maximal runs of ASCII letters at least ``min_run`` long are touched, and only when the
    run (lower-cased) is not in the word list and its best split passes the checks above.
    Letters keep their case and order; only spaces are added, so
    ``split_glued(t).replace(" ", "") == t.replace(" ", "")`` always holds.
    """
    if min_run < 2:
        raise OcrInputError(
            f"min_run must be at least 2 letters, got {min_run}; the default is {MIN_GLUED_RUN}"
        )

    def repl(m: re.Match[str]) -> str:
        run = m.group(0)
        if len(run) < min_run:
            return run
        costs, max_len = _word_costs()
        if run.lower() in costs:
            return run
        pieces = _segment(run, costs, max_len)
        return " ".join(pieces) if _plausible(pieces) else run

    return _LETTER_RUN.sub(repl, text)


def _plausible(pieces: list[str]) -> bool:
    """Whether a split looks like English words rather than a run cut into letters."""
    if len(pieces) < 2:
        return False
    if any(len(p) == 1 and p.lower() not in _ONE_LETTER_WORDS for p in pieces):
        return False
    return sum(len(p) for p in pieces) / len(pieces) >= _MIN_MEAN_PIECE


def _segment(run: str, costs: dict[str, float], max_len: int) -> list[str]:
    """The split of ``run`` into words of least total cost (the wordninja programme).

    ``best[i]`` is the least cost of splitting the first ``i`` letters; the last word of that
    split is ``run[i - k:i]`` for the ``k`` that minimises ``best[i - k] + cost(word)``. A piece
    not in ``costs`` costs infinity. Ties go to the longer last word. Lookups are lower-case;
    the pieces returned are slices of ``run`` and keep its case.
    """
    low = run.lower()
    n = len(low)
    best = [0.0] + [math.inf] * n  # (n + 1,)
    last = [0] * (n + 1)  # length of the last word of the best split of low[:i]
    for i in range(1, n + 1):
        for k in range(1, min(i, max_len) + 1):
            c = best[i - k] + costs.get(low[i - k : i], math.inf)
            if c < best[i] or (c == best[i] and k > last[i]):
                best[i], last[i] = c, k
    if math.isinf(best[n]):
        return [run]
    pieces: list[str] = []
    i = n
    while i > 0:
        pieces.append(run[i - last[i] : i])
        i -= last[i]
    return pieces[::-1]


def known_word(word: str) -> bool:
    """``word`` (lower-case ASCII letters) is in the English word list; ``True`` for every word
    when the list is not installed (so that no caller mistakes a word for a typo)."""
    try:
        return word in _word_costs()[0]
    except OcrUnavailableError:
        return True


@functools.cache
def _word_costs() -> tuple[dict[str, float], int]:
    """Word -> Zipf cost ``log((rank + 1) * log(N))`` over wordninja's list (rank 0 = most
    frequent), and the longest word's length. Read once, on first use."""
    path = _word_list_path()
    with gzip.open(path, "rt", encoding="utf-8") as f:
        words = f.read().split()
    log_n = math.log(len(words))
    costs: dict[str, float] = {}
    for rank, w in enumerate(words):
        if w.isalpha() and w.isascii():
            costs.setdefault(w, math.log((rank + 1) * log_n))
    logger.debug("loaded %d words for glued-word splitting from %s", len(costs), path)
    return costs, max(len(w) for w in costs)


def _word_list_path() -> Path:
    """Where the installed ``wordninja`` keeps its word list (found without importing it:
    importing wordninja builds its own copy of the model)."""
    spec = importlib.util.find_spec(_WORDS_PACKAGE)
    origin = spec.origin if spec is not None else None
    if origin is None:
        raise OcrUnavailableError(_WORDS_PACKAGE, "Splitting glued OCR words")
    path = Path(origin).parent.joinpath(*_WORDS_FILE)
    if not path.is_file():
        raise OcrUnavailableError(_WORDS_PACKAGE, f"Splitting glued OCR words (no {path})")
    return path
