"""The statement line items a financial question's metric is computed from.

An analyst asks for a ratio ("Best Buy's capitalization ratio for the fiscal year ending January
28, 2023", "Amazon's FY2017 return on assets", "Netflix's working capital in FY2015"); the filing
prints no ratio, only the lines it is computed from: "Long-term debt" and "Total equity" on the
balance sheet, "Net income" on the income statement. BM25 over the question's own words finds
the pages that discuss the metric in prose (the MD&A, the compensation section), not the
statements that hold its inputs, and on a shelf of filings the boilerplate of 30 companies says
"return on assets" as often as the right one. :func:`line_items` names the inputs, by the
textbook definition of each metric, so the BM25 query also searches them
(:func:`ragspine.scoring.bm25.query_vector`): each of their terms at ``RAGSPINE_LINE_ITEM_WEIGHT``
(1, a question word's weight), less when they outnumber the question's own terms, so that they
never outweigh the question (docs/measured.md, "Metrics searched by their line items").

Why by hand: this is accounting vocabulary, not a statistical expansion. A learned expansion
(RM3, a query-generation model) would need the shelf's own relevance feedback, which a metric's
first pages (prose) would mislead; the definitions are fixed and short. English and Chinese
(the line items of CAS statements: 资产总计, 负债合计, 营业成本).

Only named metrics expand: a question naming none searches exactly its own words.
"""

from __future__ import annotations

import functools
import re
import unicodedata

#: Metric (a regular expression over the lower-cased, NFKC-normalised question) -> the line
#: items it is computed from, as a statement prints them. A metric whose name is itself a line
#: item ("goodwill", "revenue") is not listed: the question already searches it.
METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Returns.
    (r"\breturn on (?:average )?(?:total )?assets?\b|\broaa?\b",
     ("net income", "total assets")),
    (r"\breturn on (?:average )?(?:(?:share|stock)holders['’]? |common )?equity\b|\broa?e\b",
     ("net income", "total shareholders equity", "total stockholders equity")),
    (r"\breturn on (?:average )?capital employed\b|\broce\b",
     ("operating income", "total assets", "total current liabilities")),
    (r"\breturn on (?:average )?invested capital\b|\broic\b|\binvested capital\b",
     ("operating income", "income taxes", "long-term debt", "total equity")),
    # Margins.
    (r"\bgross (?:profit )?margins?\b",
     ("revenue", "net sales", "cost of sales", "cost of revenue", "gross profit")),
    (r"\boperating (?:profit |income )?margins?\b",
     ("operating income", "revenue", "net sales")),
    (r"\bnet (?:profit |income )?margins?\b|(?<!gross )(?<!operating )\bprofit margins?\b",
     ("net income", "revenue", "net sales")),
    (r"\bebitda\b",
     ("operating income", "depreciation", "amortization", "revenue")),
    (r"\bebit\b",
     ("operating income", "interest expense", "income taxes")),
    (r"\beffective tax (?:rate|ratio)\b",
     ("provision for income taxes", "income before income taxes")),
    # Liquidity.
    (r"\bworking capital\b",
     ("total current assets", "total current liabilities")),
    (r"(?<!non-)(?<!non )\bcurrent ratio\b",
     ("total current assets", "total current liabilities")),
    (r"\b(?:quick|acid[- ]test) ratio\b",
     ("cash and cash equivalents", "short-term investments", "accounts receivable", "total current liabilities")),
    (r"\bcash ratio\b",
     ("cash and cash equivalents", "total current liabilities")),
    (r"\boperating cash flow ratio\b",
     ("net cash provided by operating activities", "total current liabilities")),
    # Leverage and coverage.
    (r"\bdebt[- ]to[- ](?:total )?(?:equity|capital)\b|\bleverage ratio\b|\bgearing\b",
     ("long-term debt", "short-term borrowings", "total equity")),
    (r"(?<!term )\bdebt ratio\b",
     ("total liabilities", "total assets")),
    (r"\bcapitali[sz]ation ratio\b",
     ("long-term debt", "total equity")),
    (r"\b(?:interest coverage|times interest earned)\b",
     ("operating income", "interest expense")),
    (r"\binterest (?:expense )?to (?:average )?(?:long[- ]term |total )?debt\b",
     ("interest expense", "long-term debt", "current portion of long-term debt")),
    (r"\bdebt[- ]to[- ]ebitda\b",
     ("long-term debt", "operating income", "depreciation", "amortization")),
    (r"\bnet debt\b",
     ("long-term debt", "cash and cash equivalents")),
    # Activity.
    (r"(?<!fixed )\basset turnover\b",
     ("revenue", "net sales", "total assets")),
    (r"\bfixed asset turnover\b",
     ("revenue", "net sales", "property and equipment")),
    (r"\binventory turnover\b|\bdays (?:of )?inventory\b",
     ("cost of sales", "merchandise inventories", "inventories")),
    (r"\breceivables? turnover\b|\bdays sales outstanding\b|\bdso\b",
     ("accounts receivable", "revenue", "net sales")),
    (r"\bpayables? turnover\b|\bdays payables? outstanding\b|\bdpo\b",
     ("accounts payable", "cost of sales")),
    (r"\bcash conversion cycle\b",
     ("inventories", "accounts receivable", "accounts payable", "cost of sales")),
    (r"\bsales to working capital\b",
     ("net sales", "revenue", "total current assets", "total current liabilities")),
    # Cash flow and per-share.
    (r"\bfree cash flows?\b|\bfcf\b",
     ("net cash provided by operating activities", "capital expenditures", "purchases of property and equipment")),
    (r"\bcapital expenditures?\b|\bcapex\b",
     ("purchases of property and equipment", "capital expenditures")),
    (r"\b(?:dividend )?payout ratio\b|\bretention ratio\b",
     ("dividends", "net income")),
    (r"\bearnings per share\b|\b(?:diluted|basic|the|its) eps\b|'s eps\b|\beps (?:of|for|in)\b",
     ("net income", "weighted average shares", "diluted")),
    (r"\bbook value per share\b",
     ("total shareholders equity", "shares outstanding")),
    (r"\b(?:r&d|research and development) (?:intensity|to (?:revenue|sales))\b",
     ("research and development", "revenue", "net sales")),
    # Chinese (CAS statement lines).
    (r"资产负债率", ("负债合计", "资产总计")),
    (r"毛利率", ("营业收入", "营业成本")),
    (r"(?:净资产|权益|股东权益)(?:收益率|回报率)", ("净利润", "所有者权益合计", "股东权益合计")),
    (r"(?<!净)(?:总资产|资产)(?:收益率|回报率|报酬率)", ("净利润", "资产总计")),
    (r"营业利润率", ("营业利润", "营业收入")),
    (r"净利(?:润)?率", ("净利润", "营业收入")),
    (r"流动比率", ("流动资产合计", "流动负债合计")),
    (r"速动比率", ("流动资产合计", "存货", "流动负债合计")),
    (r"营运资[本金]", ("流动资产合计", "流动负债合计")),
    (r"存货周转", ("营业成本", "存货")),
    (r"应收账款周转", ("营业收入", "应收账款")),
    (r"每股收益", ("归属于母公司所有者的净利润", "股本")),
    (r"资本(?:开支|支出)", ("购建固定资产、无形资产和其他长期资产支付的现金",)),
    (r"自由现金流", ("经营活动产生的现金流量净额", "购建固定资产、无形资产和其他长期资产支付的现金")),
    (r"(?:有效|实际)税率", ("所得税费用", "利润总额")),
    (r"利息保障倍数", ("利息费用", "利润总额")),
)

_SPACE = re.compile(r"\s+")
_COMPILED = tuple((re.compile(pattern), items) for pattern, items in METRICS)
#: Any metric at all: most questions name none, and one search tells (a search reads a
#: question three times, for the query, the note and the miss check: the answer is cached).
_ANY = re.compile("|".join(f"(?:{pattern})" for pattern, _ in METRICS))
#: Longest question read for metrics; a pasted document is not a question about a ratio.
MAX_QUESTION = 2_000


@functools.lru_cache(maxsize=1024)
def line_items(question: str) -> tuple[str, ...]:
    """The line items the metrics ``question`` names are computed from, in table order, each
    once; empty when it names none."""
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", question[:MAX_QUESTION]).lower())
    if not _ANY.search(text):
        return ()
    out: dict[str, None] = {}
    for pattern, items in _COMPILED:
        if pattern.search(text):
            out.update(dict.fromkeys(items))
    return tuple(out)
