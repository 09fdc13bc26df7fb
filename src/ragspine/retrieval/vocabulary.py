"""What one library's in-memory BM25 index knows of its words: whether it holds any of a
question's terms, which of them one document holds, and the library's words a question misspells ("advertsing" also searches
"advertising" when the library holds it and not the typo; :mod:`ragspine.scoring.spelling`).

The words are those of the library's :class:`LexicalIndex`: a library searched in the store (over
``RAGSPINE_LEXICAL_MAX_POSTINGS``, or while its index builds) gets no correction, and its misses
are told by what its BM25 channels found. The English word list (``wordninja``'s, as OCR uses
it) keeps real words as written.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ragspine.ocr.words import known_word
from ragspine.retrieval.lexical import LexicalIndex
from ragspine.retrieval.lexical.postings import FieldIndex
from ragspine.scoring.spelling import corrections
from ragspine.scoring.tokenizer import token_id

#: The field whose document frequencies decide: passages, where a word's count is its use.
FIELD = "bm25_chunk"


def _field(lexical: LexicalIndex | None, library: str) -> FieldIndex | None:
    view = lexical.view(library) if lexical is not None else None
    return view.fields.get(FIELD) if view is not None else None


def holds_any(lexical: LexicalIndex | None, library: str, ids: Sequence[int]) -> bool | None:
    """Whether any passage of ``library`` holds one of the token ``ids``; ``None`` without its
    in-memory index."""
    fi = _field(lexical, library)
    if fi is None:
        return None
    return bool(ids) and bool(fi.df(np.asarray(ids, dtype=np.uint32)).any())


def library_corrections(lexical: LexicalIndex | None, library: str, terms: Sequence[str],
                        skip: Collection[str] = ()) -> dict[str, str]:
    """``term -> correction`` for the BM25 ``terms`` of a question that ``library`` holds
    nowhere (:func:`ragspine.scoring.spelling.corrections`; ``skip``: the words written as
    names); empty without its in-memory index."""
    fi = _field(lexical, library)
    if fi is None:
        return {}

    def df(words: Sequence[str]) -> list[int]:
        ids = np.fromiter((token_id(w) for w in words), dtype=np.uint32, count=len(words))
        return fi.df(ids).tolist()

    return corrections(terms, df, known_word, skip)


def document_holds(lexical: LexicalIndex | None, library: str, doc_id: str, terms: Sequence[str]) -> set[str] | None:
    """The ``terms`` (BM25 tokens) that some passage of document ``doc_id`` holds; ``None``
    without the library's in-memory index or when it does not know the document."""
    view = lexical.view(library) if lexical is not None else None
    fi = view.fields.get(FIELD) if view is not None else None
    code = view.doc_code.get(doc_id) if view is not None else None
    if fi is None or code is None:
        return None
    out: set[str] = set()
    n = fi.uterms.shape[0]
    for term in dict.fromkeys(terms):
        pos = int(np.searchsorted(fi.uterms, np.uint32(token_id(term))))
        if pos < n and int(fi.uterms[pos]) == token_id(term):
            rows = fi.rows[fi.ustart[pos]:fi.ustart[pos + 1]]
            if (fi.doc[rows] == code).any():
                out.add(term)
    return out
