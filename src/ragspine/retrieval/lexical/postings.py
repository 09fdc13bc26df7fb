"""The arrays of the in-memory BM25 index: per library and BM25 field, postings grouped by term
(CSC) with the stored weights and their IDF products, a row table, and the scoring kernels
(``score``: sum of query-weighted postings; ``top``: the best rows, ties by point id).

Qdrant's IDF modifier (``fancy_idf``): ``idf_t = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))`` with
``N`` the points that have the vector and ``n_t`` those among them that contain ``t``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragspine.scoring.bm25 import SparseVector

DocSig = tuple[int, Any]  # (active_version, indexed_at) of a manifest entry


class Unsupported(Exception):
    """A search the index cannot answer exactly; the caller asks the store instead."""


# -- the arrays ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldIndex:
    """One BM25 field of one library: postings grouped by term (CSC), and a row table.

    The postings of term ``uterms[i]`` are ``rows[ustart[i]:ustart[i + 1]]`` (ascending) with
    weights ``vals`` (the stored BM25 term-frequency weights) and ``ivals`` (the same times the
    term's IDF over this index: what a query adds up). Terms in at least ``DENSE_FRACTION`` of
    the rows (stop words, mostly) also have a dense row of ``ivals``: adding one contiguous row
    is several times cheaper than scattering its postings, and costs at most 1.6x their bytes.
    """

    kind: str
    uterms: np.ndarray  # (n_terms,) uint32 token ids, ascending
    ustart: np.ndarray  # (n_terms + 1,) int64 first posting of each term, then n_postings
    rows: np.ndarray  # (n_postings,) intp row of each posting
    vals: np.ndarray  # (n_postings,) float32 BM25 term-frequency weight, as stored in Qdrant
    ivals: np.ndarray  # (n_postings,) float64 vals * idf(term)
    udense: np.ndarray  # (n_terms,) int32 row of the term in ``dense``, or -1
    dense: np.ndarray  # (n_dense_terms, n_rows) float64 ivals of the most frequent terms, dense
    ids: list[str]  # (n_rows,) point id
    id_hi: np.ndarray  # (n_rows,) uint64 high half of the point id as a 128-bit number
    id_lo: np.ndarray  # (n_rows,) uint64 low half: (hi, lo) order == point id string order
    idrank: np.ndarray  # (n_rows,) int64 rank of the point id among the rows (tie-break)
    doc: np.ndarray  # (n_rows,) int32 document code (see LibView.docs)
    page: np.ndarray  # (n_rows,) int32 1-based page number
    chunk_ids: list[str | None]  # (n_rows,) passage id (chunk rows) or None (page rows)
    classes: list[str | None]  # (n_rows,) the point's own classification (never RESTRICTED here)
    pkey: np.ndarray  # (n_rows,) int64 page key: doc << PAGE_BITS | page (same in both fields)

    @property
    def n_rows(self) -> int:
        return len(self.ids)

    @property
    def n_postings(self) -> int:
        return int(self.rows.shape[0])

    def df(self, ids: np.ndarray) -> np.ndarray:
        """``(n,)`` int64: how many points hold each token id of ``ids`` (``(n,)`` uint32)."""
        if not self.uterms.shape[0]:
            return np.zeros(ids.shape[0], dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.uterms, ids), self.uterms.shape[0] - 1)
        return np.where(self.uterms[pos] == ids, self.ustart[pos + 1] - self.ustart[pos], 0)

    def nbytes(self) -> int:
        arrays = (self.uterms, self.ustart, self.rows, self.vals, self.ivals, self.udense, self.dense,
                  self.id_hi, self.id_lo, self.idrank, self.doc, self.page, self.pkey)
        return int(sum(a.nbytes for a in arrays)) + ROW_OBJECT_BYTES * self.n_rows


#: Python objects per row (point id and passage id strings and their list slots), about.
ROW_OBJECT_BYTES = 200
#: A term in at least this fraction of a field's rows gets a dense row (see FieldIndex).
DENSE_FRACTION = 0.25
#: Page numbers fit in 20 bits (``max_pages`` is a few thousand): page key = doc << 20 | page.
PAGE_BITS = 20
PAGE_MASK = (1 << PAGE_BITS) - 1


@dataclass
class Rows:
    """Rows being assembled for a :class:`FieldIndex` (plain lists; turned into arrays once)."""

    ids: list[str] = field(default_factory=list)
    doc: list[int] = field(default_factory=list)
    page: list[int] = field(default_factory=list)
    chunk_ids: list[str | None] = field(default_factory=list)
    classes: list[str | None] = field(default_factory=list)
    terms: list[np.ndarray] = field(default_factory=list)
    vals: list[np.ndarray] = field(default_factory=list)


def id_halves(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Point ids as (hi, lo) uint64: for canonical UUID strings (what ragspine writes) their
    numeric order is their string order. Anything else is refused: ties could not be broken
    like the store breaks them."""
    hi = np.empty(len(ids), dtype=np.uint64)
    lo = np.empty(len(ids), dtype=np.uint64)
    for i, s in enumerate(ids):
        try:
            u = uuid.UUID(s)
        except ValueError:
            raise Unsupported(f"point id {s!r} is not a UUID") from None
        if str(u) != s:
            raise Unsupported(f"point id {s!r} is not a canonical UUID")
        hi[i] = u.int >> 64
        lo[i] = u.int & 0xFFFF_FFFF_FFFF_FFFF
    return hi, lo


def csc(kind: str, terms: np.ndarray, rows: np.ndarray, vals: np.ndarray, n_rows: int,
         table: dict[str, Any]) -> FieldIndex:
    """A :class:`FieldIndex` from postings sorted by (term, row) and its row table."""
    if terms.shape[0]:
        starts = np.flatnonzero(np.diff(terms)) + 1  # where a new term begins
        uterms = terms[np.concatenate(([0], starts))]
        ustart = np.concatenate(([0], starts, [terms.shape[0]])).astype(np.int64)
    else:
        uterms = np.empty(0, dtype=np.uint32)
        ustart = np.zeros(1, dtype=np.int64)
    df = np.diff(ustart)  # (n_terms,) points containing each term
    ivals = vals.astype(np.float64) * np.repeat(idf(n_rows, df), df)
    rows = rows.astype(np.intp, copy=False)
    frequent = np.flatnonzero(df >= max(1.0, DENSE_FRACTION * n_rows))  # (n_dense_terms,)
    udense = np.full(uterms.shape[0], -1, dtype=np.int32)
    udense[frequent] = np.arange(frequent.shape[0], dtype=np.int32)
    dense = np.zeros((frequent.shape[0], n_rows))  # (n_dense_terms, n_rows)
    for j, t in enumerate(frequent.tolist()):
        a, b = int(ustart[t]), int(ustart[t + 1])
        dense[j, rows[a:b]] = ivals[a:b]
    idrank = np.empty(n_rows, dtype=np.int64)
    idrank[np.lexsort((table["id_lo"], table["id_hi"]))] = np.arange(n_rows)
    pkey = (table["doc"].astype(np.int64) << PAGE_BITS) | table["page"]
    return FieldIndex(kind=kind, uterms=uterms, ustart=ustart, rows=rows, vals=vals, ivals=ivals,
                      udense=udense, dense=dense, idrank=idrank, pkey=pkey, **table)


def field_from_rows(kind: str, r: Rows) -> FieldIndex:
    n = len(r.ids)
    lens = np.fromiter((len(t) for t in r.terms), dtype=np.int64, count=n)
    terms = np.concatenate(r.terms) if n else np.empty(0, dtype=np.uint32)
    vals = np.concatenate(r.vals) if n else np.empty(0, dtype=np.float32)
    rows = np.repeat(np.arange(n, dtype=np.intp), lens)
    order = np.argsort(terms, kind="stable")  # rows ascend within a term: they were appended so
    hi, lo = id_halves(r.ids)
    table = dict(ids=list(r.ids), id_hi=hi, id_lo=lo, doc=np.asarray(r.doc, dtype=np.int32),
                 page=np.asarray(r.page, dtype=np.int32), chunk_ids=list(r.chunk_ids), classes=list(r.classes))
    return csc(kind, terms[order], rows[order], vals[order], n, table)


def patched(old: FieldIndex, drop_docs: np.ndarray, new: FieldIndex) -> FieldIndex:
    """``old`` without the rows of documents ``drop_docs`` (codes), plus the rows of ``new``.

    Kept postings stay sorted; the new ones are merged in (``np.insert`` at their
    ``searchsorted`` positions), so a patch costs O(postings), not a sort.
    """
    keep_row = ~np.isin(old.doc, drop_docs)  # (n_rows_old,)
    remap = np.cumsum(keep_row, dtype=np.intp) - 1  # old row -> new row
    n_keep = int(keep_row.sum())
    keep_post = keep_row[old.rows]  # (n_postings_old,)
    t = np.repeat(old.uterms, np.diff(old.ustart))[keep_post]
    r = remap[old.rows[keep_post]]
    v = old.vals[keep_post]
    new_t = np.repeat(new.uterms, np.diff(new.ustart))
    # New rows go after the kept ones, so within a term they follow the kept postings.
    pos = np.searchsorted(t, new_t, side="right")
    t = np.insert(t, pos, new_t)
    r = np.insert(r, pos, new.rows + n_keep)
    v = np.insert(v, pos, new.vals)
    keep_idx = np.flatnonzero(keep_row).tolist()
    table = dict(
        ids=[old.ids[i] for i in keep_idx] + new.ids,
        id_hi=np.concatenate([old.id_hi[keep_row], new.id_hi]),
        id_lo=np.concatenate([old.id_lo[keep_row], new.id_lo]),
        doc=np.concatenate([old.doc[keep_row], new.doc]),
        page=np.concatenate([old.page[keep_row], new.page]),
        chunk_ids=[old.chunk_ids[i] for i in keep_idx] + new.chunk_ids,
        classes=[old.classes[i] for i in keep_idx] + new.classes,
    )
    return csc(old.kind, t, r, v, n_keep + new.n_rows, table)


@dataclass(frozen=True)
class LibView:
    """Everything a search of one library reads, swapped as one reference."""

    active: Any  # the active_versions dict object this view was checked against (identity)
    sigs: dict[str, DocSig]  # doc_id -> manifest signature of the version indexed
    basis: dict[str, float]  # BM25 field -> average length the weights were built with
    docs: list[str]  # document code -> doc_id (codes of removed documents stay, unused)
    doc_code: dict[str, int]
    doc_payload: list[dict[str, Any] | None]  # code -> DOC_KEYS payload of the indexed version
    fields: dict[str, FieldIndex]
    masks: dict[Any, np.ndarray | None] = field(default_factory=dict, compare=False)

    def nbytes(self) -> int:
        return sum(f.nbytes() for f in self.fields.values())


# -- scoring ------------------------------------------------------------------------------------


def idf(n_points: int, df: np.ndarray) -> np.ndarray:
    """Qdrant's IDF modifier: ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the points that have
    the vector (``N``) and those containing the term (``df``)."""
    return np.log((n_points - df + 0.5) / (df + 0.5) + 1.0)


def score(fi: FieldIndex, query: SparseVector, fmask: np.ndarray | None) -> np.ndarray:
    """``(n_rows,)`` float64 scores, ``sum_t q_t * idf_t * w(row, t)``; 0 for rows sharing no
    term with ``query`` or outside ``fmask`` (a 0/1 float row mask; ``None``: every row)."""
    d = np.zeros(fi.n_rows)  # (n_rows,)
    if not query.indices or not fi.uterms.shape[0]:
        return d
    q = np.asarray(query.indices, dtype=np.uint32)  # (n_q,)
    pos = np.searchsorted(fi.uterms, q)
    np.minimum(pos, fi.uterms.shape[0] - 1, out=pos)
    found = fi.uterms[pos] == q
    pos = pos[found]
    weights = np.asarray(query.values, dtype=np.float64)[found].tolist()
    rs, ws = [], []
    for a, b, j, c in zip(fi.ustart[pos].tolist(), fi.ustart[pos + 1].tolist(), fi.udense[pos].tolist(), weights):
        if j >= 0:  # a frequent term: add its dense row
            d += fi.dense[j] if c == 1.0 else fi.dense[j] * c
        else:
            rs.append(fi.rows[a:b])
            ws.append(fi.ivals[a:b] if c == 1.0 else fi.ivals[a:b] * c)
    if len(rs) == 1:
        np.add.at(d, rs[0], ws[0])
    elif rs:  # one scatter for every other term: a row in several terms adds up
        np.add.at(d, np.concatenate(rs), np.concatenate(ws))
    if fmask is not None:
        d *= fmask
    return d


#: Scores this close are equal: sums of the same terms in another order (idf x 1 + idf x 2
#: against idf x 0.5 + idf x 2.5) can differ in their last bit, and a tie goes to the smaller
#: point id whatever the order of the sum.
_TIE = 1e-9


def top(fi: FieldIndex, d: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``limit`` rows of scores ``d`` that are > 0, best first, equal scores by point id.

    Large fields: a sample of every ``step``-th row gives a score ``v`` such that, when at least
    ``limit`` rows score ``>= v``, the best ``limit`` are among them (the ``limit``-th best
    scores ``>= v``); only those are sorted. Small fields: the ``limit``-th best score itself.
    """
    n = d.shape[0]
    cand: np.ndarray | None = None
    step = n // (8 * limit)
    if step >= 2:
        sample = d[::step]  # (n / step,) a view
        j = min(sample.shape[0], 2 * -(-limit // step) + 1)
        v = np.partition(sample, sample.shape[0] - j)[sample.shape[0] - j]
    elif n > limit:
        v = np.partition(d, n - limit)[n - limit]  # the limit-th best score
    else:
        v = 0.0
    if v > 0:
        cand = np.flatnonzero(d >= v - _TIE)  # a score tied with v but a bit below it competes too
        if cand.shape[0] < limit:
            cand = None
    if cand is None:
        cand = np.flatnonzero(d)
    s = d[cand]
    # Equal scores are compared at 9 decimals (see _TIE).
    key = np.round(s, 9)
    if cand.shape[0] > 4 * limit:
        part = np.argpartition(-key, limit - 1)[:limit]
        sel = np.flatnonzero(key >= key[part].min())  # everything tied at the cut competes on id
        cand, s, key = cand[sel], s[sel], key[sel]
    order = np.lexsort((fi.idrank[cand], -key))[:limit]
    return cand[order], s[order]


def sorted_runs(tied: list[int], n: int, key: Any) -> list[int]:
    """``range(n)`` with each run of equal scores ordered by ``key``; ``tied`` lists the ``i``
    whose score equals the next one's (ascending)."""
    idx = list(range(n))
    k = 0
    while k < len(tied):
        start = end = tied[k]
        while k + 1 < len(tied) and tied[k + 1] == end + 1:
            k += 1
            end = tied[k]
        idx[start : end + 2] = sorted(idx[start : end + 2], key=key)
        k += 1
    return idx


