"""A question's misspelt words, corrected against one library's own words: "advertsing" also
searches "advertising" when the library holds it and not the typo (:mod:`ragspine.scoring.spelling`).

The library's words are those of its in-memory BM25 index (:class:`LexicalIndex`): a library
searched in the store (over ``RAGSPINE_LEXICAL_MAX_POSTINGS``, or while its index builds) gets no
correction. The English word list (``wordninja``'s, as OCR uses it) keeps real words as written.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragspine.ocr.words import known_word
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.scoring.spelling import corrections
from ragspine.scoring.tokenizer import token_id

#: The field whose document frequencies decide: passages, where a word's count is its use.
FIELD = "bm25_chunk"


def library_corrections(lexical: LexicalIndex | None, library: str, terms: Sequence[str]) -> dict[str, str]:
    """``term -> correction`` for the BM25 ``terms`` of a question that ``library`` holds
    nowhere (:func:`ragspine.scoring.spelling.corrections`); empty without its in-memory index."""
    view = lexical.view(library) if lexical is not None else None
    fi = view.fields.get(FIELD) if view is not None else None
    if fi is None:
        return {}

    def df(words: Sequence[str]) -> list[int]:
        ids = np.fromiter((token_id(w) for w in words), dtype=np.uint32, count=len(words))
        return fi.df(ids).tolist()

    return corrections(terms, df, known_word)
