"""Okapi BM25 expressed as sparse vectors for Qdrant.

A document's vector holds, per term, the BM25 term-frequency part
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; the query vector holds the query
term counts; Qdrant's IDF modifier multiplies each term by
``ln(1 + (N - n + 0.5) / (n + 0.5))`` computed over the collection. Their dot product is
exactly Okapi BM25 (Lucene's IDF form), computed by the engine, with filters applied first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ragspine.scoring.line_items import line_items
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.tokenizer import TOKENIZER_VERSION, token_id, tokenize


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError("sparse vector indices and values differ in length")


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75

    def __post_init__(self) -> None:
        if self.k1 <= 0 or not 0 <= self.b <= 1:
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")

    @property
    def revision(self) -> str:
        """What an index built with these parameters is compatible with."""
        return f"{TOKENIZER_VERSION};k1={self.k1};b={self.b}"


def _merge_ids(counts: Counter[str]) -> dict[int, float]:
    # Two tokens hashing to one id (rare) add up, as one term would.
    merged: dict[int, float] = {}
    for tok, c in counts.items():
        i = token_id(tok)
        merged[i] = merged.get(i, 0.0) + c
    return merged


def document_vector(tokens: list[str], avgdl: float, params: BM25Params) -> SparseVector:
    """BM25 term-frequency weights of one document (``tokens`` from :func:`tokenize`)."""
    if avgdl <= 0:
        raise ValueError(f"avgdl must be positive, got {avgdl}")
    dl = len(tokens)
    norm = params.k1 * (1.0 - params.b + params.b * dl / avgdl)
    tf = _merge_ids(Counter(tokens))
    idx = sorted(tf)
    return SparseVector(idx, [tf[i] * (params.k1 + 1.0) / (tf[i] + norm) for i in idx])


def query_vector(text: str, counts: bool = True, drop_question_words: bool = True,
                 line_item_weight: float = 0.0) -> SparseVector:
    """Query term counts: a term asked twice weighs twice, as in plain BM25 over the token list.
    With ``counts=False`` each distinct term weighs 1. ``drop_question_words``: the query's
    question words are left out (:func:`ragspine.scoring.query_terms.query_tokens`).
    ``line_item_weight`` > 0: the statement line items of the financial metrics the query
    names (:func:`ragspine.scoring.line_items.line_items`) are searched too, each of their
    terms the query does not hold once, at that weight; where they outnumber the query's own
    distinct terms, at that weight times own / added, so that together they never weigh more
    than the question."""
    toks = query_tokens(text, drop_question_words=drop_question_words)
    tf = _merge_ids(Counter(toks) if counts else Counter(set(toks)))
    if line_item_weight > 0:
        added = set(line_item_tokens(text)) - set(toks)
        if added:
            w = line_item_weight * min(1.0, len(set(toks)) / len(added))
            for i in _merge_ids(Counter(added)):
                tf.setdefault(i, w)
    idx = sorted(tf)
    return SparseVector(idx, [tf[i] for i in idx])


def respelt(qv: SparseVector, fixes: Mapping[str, str]) -> SparseVector:
    """``qv`` that also searches each correction of ``fixes`` (``term -> correction``) with its
    term's weight (the term itself stays: no passage holds it)."""
    if not fixes:
        return qv
    w = dict(zip(qv.indices, qv.values))
    for term, right in fixes.items():
        got = w.get(token_id(term))
        if got is not None:
            w[token_id(right)] = w.get(token_id(right), 0.0) + got
    idx = sorted(w)
    return SparseVector(idx, [w[i] for i in idx])


#: Words of the line items' names that say nothing about which line ("total current assets"
#: searches "current" and "assets"; every statement page says "total").
_FILLER = frozenset("and of the for by in on to from total".split())
#: Characters of glue and of the fillers' words ("的", "和"; "合计", "总计", "其他"): a pair
#: with one of them names no line ("支付的现金": "付的", "的现"; "负债合计": "债合").
_GLUE = frozenset("的和、合总其他")


def line_item_tokens(text: str) -> list[str]:
    """The BM25 tokens of the line items ``text``'s metrics are computed from, less fillers; of
    a Chinese item, its character pairs only (each character alone matches too much)."""
    out = []
    for item in line_items(text):
        for t in tokenize(item):
            cjk = not t.isascii()
            if t in _FILLER or (cjk and (len(t) == 1 or _GLUE & set(t))):
                continue
            out.append(t)
    return out
