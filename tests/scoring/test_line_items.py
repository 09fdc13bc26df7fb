"""A question naming a financial metric also searches the statement lines it is computed from,
at the line-item weight; a question naming none searches exactly its own words."""

from __future__ import annotations

import pytest

from ragspine.scoring.bm25 import line_item_tokens, query_vector
from ragspine.scoring.line_items import MAX_QUESTION, line_items
from ragspine.scoring.tokenizer import token_id


@pytest.mark.parametrize(("question", "expected"), [
    ("What is Amazon's FY2017 return on assets?", {"net income", "total assets"}),
    ("what is Amazon's FY2017 return on asset ?", {"net income", "total assets"}),
    ("What is Netflix working capital in FY2015?", {"total current assets", "total current liabilities"}),
    ("What is the current ratio of 3M in FY2019?", {"total current assets", "total current liabilities"}),
    ("what is capitalization ratio for Best Buy?", {"long-term debt", "total equity"}),
    ("What is the FY2018 capital expenditure amount for 3M?",
     {"purchases of property and equipment", "capital expenditures"}),
    ("What was Apple's ROE in 2020?",
     {"net income", "total shareholders equity", "total stockholders equity"}),
    ("该公司2022年的资产负债率是多少？", {"负债合计", "资产总计"}),
    ("2021年毛利率为多少", {"营业收入", "营业成本"}),
    ("What was the return on shareholders' equity?", {"net income", "total shareholders equity", "total stockholders equity"}),
    ("return on stockholders\u2019 equity in 2019", {"net income", "total shareholders equity", "total stockholders equity"}),
    ("What was the gross profit margin?", {"revenue", "net sales", "cost of sales", "cost of revenue", "gross profit"}),
    ("What was the operating  profit\nmargin?", {"operating income", "revenue", "net sales"}),  # any white space
    ("What was the profit margin?", {"net income", "revenue", "net sales"}),
    ("What was the fixed asset turnover?", {"revenue", "net sales", "property and equipment"}),
    ("What was the asset turnover?", {"revenue", "net sales", "total assets"}),
    ("What is the EPS?", {"net income", "weighted average shares", "diluted"}),
    ("净资产收益率是多少", {"净利润", "所有者权益合计", "股东权益合计"}),  # not also 资产收益率's 资产总计
    ("总资产收益率是多少", {"净利润", "资产总计"}),
    ("2022年净利润率", {"净利润", "营业收入"}),
])
def test_a_named_metric_names_its_line_items(question: str, expected: set[str]) -> None:
    assert set(line_items(question)) == expected


@pytest.mark.parametrize("question", [
    "What's the geographic market name for EPS Code AR01?",  # a product code, not earnings per share
    "What is the total revenue of Acme Robotics in 2023?",  # revenue is a line of its own
    "How many people were surveyed about the economy?",
    "What is the non-current ratio of the fund?",
    "",
])
def test_a_question_naming_no_metric_names_no_line(question: str) -> None:
    assert line_items(question) == ()


def test_interest_to_long_term_debt_is_not_the_debt_ratio() -> None:
    items = line_items("What is Amazon's FY2017 Interest Expense to Average Long-Term Debt Ratio?")
    assert "interest expense" in items and "long-term debt" in items
    assert "total liabilities" not in items  # the debt ratio's (liabilities over assets)
    assert set(line_items("What is the company's debt ratio?")) == {"total liabilities", "total assets"}


def test_two_metrics_name_both_sets_of_lines_once() -> None:
    items = line_items("Compare the current ratio and the working capital; and the return on assets")
    assert items == ("net income", "total assets", "total current assets", "total current liabilities")  # table order


def test_only_the_start_of_a_long_text_is_read() -> None:
    pad = "x " * (MAX_QUESTION // 2)
    assert line_items("working capital " + pad) != ()
    assert line_items(pad + " working capital") == ()  # past the bound: not read


def test_line_item_tokens_leave_the_fillers_out() -> None:
    assert line_item_tokens("What is the current ratio?") == ["current", "assets", "current", "liabilities"]
    # Of a Chinese item, its character pairs, less those of glue and fillers (负债合计: 负债 only).
    assert line_item_tokens("资产负债率是多少") == ["负债", "资产"]
    assert line_item_tokens("毛利率") == ["营业", "业收", "收入", "营业", "业成", "成本"]


def _weights(text: str, w: float) -> dict[int, float]:
    qv = query_vector(text, line_item_weight=w)
    return dict(zip(qv.indices, qv.values))


def test_the_query_vector_adds_the_line_items_at_their_weight() -> None:
    q = "What is 3M's current ratio in 2019?"
    off, on = _weights(q, 0.0), _weights(q, 0.4)
    assert token_id("liabilities") not in off
    # The question's own terms keep their counts; "current" is one of them, so it is not added again.
    assert {i: on[i] for i in off} == off
    assert on[token_id("current")] == off[token_id("current")] == 1.0
    added = {i: v for i, v in on.items() if i not in off}
    assert added == {token_id("assets"): 0.4, token_id("liabilities"): 0.4}
    assert token_id("total") not in on


def test_a_question_naming_no_metric_gets_the_same_vector() -> None:
    q = "What does the chart of revenue by segment show?"
    assert _weights(q, 1.0) == _weights(q, 0.0)


def test_the_line_items_never_outweigh_the_question() -> None:
    # "free cash flow": net cash provided by operating activities, capital expenditures,
    # purchases of property and equipment: 9 terms besides "cash", which the question holds,
    # against the question's 4 (2019, free, cash, flow): each at 4 / 9.
    q = "2019 free cash flow"
    own = _weights(q, 0.0)
    added = {i: v for i, v in _weights(q, 1.0).items() if i not in own}
    assert len(own) == 4 and len(added) == 9
    assert list(added.values()) == pytest.approx([4 / 9] * 9)
    assert sum(added.values()) == pytest.approx(len(own))
    # Fewer line items than the question's terms: each at the full weight.
    assert set(v for i, v in _weights("What is 3M's current ratio in 2019?", 1.0).items()) == {1.0}
