"""The settings of how answers are ranked: the channels' fusion and its weights, the BM25
query terms, the document prior and the neighbours' share, and what counts as a miss. Their
defaults are measured (``ragspine.config.fusion``, docs/measured.md). :class:`Settings` holds
them with the rest."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragspine.config.fusion import (
    DEFAULT_BM25_CHUNK_SHARE_ALONE,
    DEFAULT_BM25_CHUNK_WEIGHT,
    DEFAULT_BM25_PAGE_WEIGHT,
    DEFAULT_CONVEX_WEIGHTS,
    DEFAULT_DENSE_FUSION,
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_DOCUMENT_PRIOR_WEIGHT,
    DEFAULT_MISS_MARGIN,
    DEFAULT_MISS_STDS,
    DEFAULT_NEIGHBOUR_WEIGHT,
    DEFAULT_LINE_ITEM_WEIGHT,
    DEFAULT_PAGE_NUMBER_WEIGHT,
    DEFAULT_RRF_K,
    DEFAULT_RRF_K_DENSE,
    DEFAULT_VISUAL_WEIGHT,
)


class RankingSettings(BaseSettings):
    """How answers are ranked (``RAGSPINE_*`` as every setting)."""

    model_config = SettingsConfigDict(env_prefix="RAGSPINE_", extra="ignore", frozen=True)

    #: Reciprocal Rank Fusion constant: of BM25's passage and page channels, of the visual
    #: channel beside them, of the libraries of one search and of query variants.
    rrf_k: int = Field(default=DEFAULT_RRF_K, ge=1)
    #: The RRF constant of a library's channel fusion when the dense channel ranks beside BM25
    #: and no visual channel does, with ``dense_fusion=rrf``; see :meth:`fusion_k`.
    rrf_k_dense: int = Field(default=DEFAULT_RRF_K_DENSE, ge=1)
    #: How a library's BM25 and dense channels fuse when no visual channel ranks beside them:
    #: ``convex`` - each channel's scores min-max normalised (between its best and its 100th)
    #: and summed with the ``convex_*_weight`` weights; ``rrf`` - weighted RRF with
    #: ``bm25_chunk_weight``, ``bm25_page_weight``, ``dense_weight`` and ``rrf_k_dense``. Beside
    #: the visual channel, and with BM25 alone, the fusion is RRF.
    dense_fusion: Literal["convex", "rrf"] = DEFAULT_DENSE_FUSION  # type: ignore[assignment]
    #: The convex fusion's weights of the BM25 passage, BM25 page and dense channels (only their
    #: ratios matter; a dense weight of 0 leaves BM25 ranking alone, as without a dense model).
    convex_passage_weight: float = Field(default=DEFAULT_CONVEX_WEIGHTS[0], ge=0, allow_inf_nan=False)
    convex_page_weight: float = Field(default=DEFAULT_CONVEX_WEIGHTS[1], ge=0, allow_inf_nan=False)
    convex_dense_weight: float = Field(default=DEFAULT_CONVEX_WEIGHTS[2], ge=0, allow_inf_nan=False)
    #: RRF weight of the BM25 passage channel (best passage per page) and of the BM25
    #: whole-page channel; not both 0. A passage weight of 0 ranks by the page channel alone
    #: (the passage search still runs: it finds each page's best passage for the citation); a
    #: page weight of 0 does not query the page channel. ``None`` (the default) for the
    #: passage weight: a quarter of the page weight when BM25 ranks alone (no dense or visual
    #: channel for the library and query), else DEFAULT_BM25_CHUNK_WEIGHT - see
    #: :meth:`passage_weight`.
    #:
    #: Why (bench/fusion_loo.py, leave-one-dataset-out over TAT-QA, Cranfield, CMRC2018 and
    #: MMLongBench pages, nDCG@10): with BM25 alone, passage 1 : page 4 is the best mean among
    #: the points at or above plain page BM25 on every set (DEFAULT_BM25_CHUNK_SHARE_ALONE);
    #: beside the dense channel fused by RRF, passage 0.75 + page 1.5 (+ dense 0.75) is at or
    #: above plain BM25 on all four sets.
    bm25_chunk_weight: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    bm25_page_weight: float = Field(default=DEFAULT_BM25_PAGE_WEIGHT, ge=0, allow_inf_nan=False)
    #: Query term weights: ``True`` counts a repeated query term as often as it is asked (plain
    #: BM25 over the query's token list); ``False`` weighs each distinct term once.
    bm25_query_counts: bool = True
    #: Leave a query's question words out of its BM25 terms (什么, 哪些, 为什么, what, which, ...;
    #: ragspine.scoring.query_terms): rare in prose, they got a high IDF and ranked passages that
    #: happen to contain them. bench/query_terms.py (bm25 mode, full sets, OCR off, kept ->
    #: dropped): TAT-QA 0.7201 -> 0.7231, Cranfield 0.3507 -> 0.3525, CMRC2018 0.9860 -> 0.9907,
    #: MMLongBench pages 0.3544 -> 0.3656.
    bm25_drop_question_words: bool = True
    #: Search a question without its instructions about the answer's form ("Please write the
    #: answer in int format.", "Answer 'yes' or 'no'.", "请以整数形式作答。"; ragspine.scoring.
    #: query_text): every channel, the priors and the reranker; the answer's ``notes`` say what
    #: was left out. bench/long_reports.py (docs/measured.md, "Answer instructions").
    drop_answer_instructions: bool = True
    #: RRF weights of the visual (page image) and dense (passage) channels, against the BM25
    #: channels' ``bm25_chunk_weight`` and ``bm25_page_weight`` (the dense one beside the visual
    #: channel or with ``dense_fusion=rrf``; else ``convex_dense_weight`` applies).
    visual_weight: float = Field(default=DEFAULT_VISUAL_WEIGHT, ge=0, allow_inf_nan=False)
    dense_weight: float = Field(default=DEFAULT_DENSE_WEIGHT, ge=0, allow_inf_nan=False)
    #: The document prior (retrieval/fusion.py, scoring/priors.py): when a question names a
    #: document's issuer (and year) or its kind, a page's fused score becomes ``(1 - w) * page + w *
    #: document``, ``document`` the document channel's score in [0, 1]
    #: (retrieval/channels/documents.py); a question that names none is ranked as without it.
    #: 0 turns it off. Chosen by bench/long_reports.py (docs/measured.md).
    document_prior_weight: float = Field(default=DEFAULT_DOCUMENT_PRIOR_WEIGHT, ge=0, le=1, allow_inf_nan=False)
    #: A page the question names by number ("page 14", "slide 31", "the last page", "第12页") -
    #: by its place in the file or by the number printed on it - gains this much over its
    #: normalised score (retrieval/channels/page_numbers.py, scoring/priors.named_pages), and so
    #: does the page whose caption begins with a figure or table the question names ("Figure 3",
    #: "Table 1-1"); only pages the channels found move. 0 turns it off.
    page_number_weight: float = Field(default=DEFAULT_PAGE_NUMBER_WEIGHT, ge=0, le=10, allow_inf_nan=False)
    #: A question naming a financial metric ("return on assets", "working capital", "毛利率")
    #: also searches, in BM25, the statement line items the metric is computed from ("net
    #: income", "total assets"), each of their terms at this weight against 1 for the
    #: question's own (scoring/line_items.py). 0 turns it off.
    line_item_weight: float = Field(default=DEFAULT_LINE_ITEM_WEIGHT, ge=0, le=1, allow_inf_nan=False)
    #: A question's BM25 term that no passage of a library holds and that is no English word
    #: ("advertsing") also searches the library's word one edit away that the most passages hold
    #: ("advertising"), if at least 3 do; the answer's notes say so (retrieval/vocabulary.py).
    #: Needs the library's in-memory BM25 index; never under a key's filters.
    spelling_corrections: bool = True
    #: A page's score gains this share of its better-ranked neighbour's (the page before or
    #: after in the same document). 0 turns it off.
    neighbour_weight: float = Field(default=DEFAULT_NEIGHBOUR_WEIGHT, ge=0, le=1, allow_inf_nan=False)
    #: A search none of whose BM25 terms occurs in the searched libraries answers no hits (a
    #: ``miss:`` note, and the gap log counts it) unless its best dense similarity exceeds what
    #: queries of made-up words reach in the library by ``miss_margin`` plus ``miss_stds`` of
    #: their standard deviation (retrieval/misses.py). Off: the dense channel's nearest
    #: neighbours are answered whatever they are.
    miss_check: bool = True
    miss_margin: float = Field(default=DEFAULT_MISS_MARGIN, allow_inf_nan=False)
    miss_stds: float = Field(default=DEFAULT_MISS_STDS, ge=0, allow_inf_nan=False)
    @model_validator(mode="after")
    def _one_bm25_channel(self) -> "RankingSettings":
        if self.bm25_chunk_weight == 0 and self.bm25_page_weight == 0:
            raise ValueError("bm25_chunk_weight and bm25_page_weight cannot both be 0")
        if self.convex_passage_weight == 0 and self.convex_page_weight == 0:
            raise ValueError("convex_passage_weight and convex_page_weight cannot both be 0")
        return self

    def passage_weight(self, alone: bool) -> float:
        """The BM25 passage channel's RRF weight for one search: ``bm25_chunk_weight`` when set,
        else, when BM25 ranks ``alone`` (and the page channel is on), DEFAULT_BM25_CHUNK_SHARE_ALONE
        of the page weight, else DEFAULT_BM25_CHUNK_WEIGHT."""
        if self.bm25_chunk_weight is not None:
            return self.bm25_chunk_weight
        if alone and self.bm25_page_weight > 0:
            return DEFAULT_BM25_CHUNK_SHARE_ALONE * self.bm25_page_weight
        return DEFAULT_BM25_CHUNK_WEIGHT

    def fusion_k(self, dense: bool, visual: bool) -> int:
        """The RRF constant of one library's channel fusion: ``rrf_k_dense`` when the dense
        channel ranks in it and the visual one does not, else ``rrf_k``. The visual channel
        keeps ``rrf_k``: k was chosen on text sets (bench/fusion_loo.py), and a page model's
        ranking beside the dense one has not been measured with another k."""
        return self.rrf_k_dense if dense and not visual else self.rrf_k
