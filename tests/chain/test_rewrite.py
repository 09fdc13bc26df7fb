"""The glossary multi-query rewriter: which variants, in which order, how many."""

from __future__ import annotations

import pytest

from ragspine.chain.rewrite import MAX_QUERIES, Rewriter


def queries(r: Rewriter, q: str) -> list[str]:
    return [v.query for v in r.variants(q)]


def test_original_first_then_one_substitution_per_variant() -> None:
    r = Rewriter(glossary=[("revenue", "turnover", "营业收入")])
    vs = r.variants("Acme Revenue 2023")
    assert [v.query for v in vs] == ["Acme Revenue 2023", "acme turnover 2023", "acme 营业收入 2023"]
    assert vs[0].substitutions == ()
    assert vs[1].substitutions == (("revenue", "turnover"),)
    assert vs[2].sources == ("glossary",)


def test_no_match_is_the_original_alone() -> None:
    r = Rewriter(glossary=[("revenue", "turnover")])
    assert queries(r, "net income in 2023") == ["net income in 2023"]
    assert not Rewriter()


def test_round_robin_over_matches_and_the_cap() -> None:
    # Two matched names with 3 alternatives each: each gets one before either gets a second,
    # and five queries in all.
    r = Rewriter(glossary=[("revenue", "turnover", "sales", "top line"), ("acme", "acme corp", "阿克米", "acme inc")])
    assert queries(r, "acme revenue") == [
        "acme revenue", "acme corp revenue", "acme turnover", "阿克米 revenue", "acme sales",
    ]
    assert len(r.variants("acme revenue")) == MAX_QUERIES
    assert queries(Rewriter(glossary=[("revenue", "turnover", "sales")], max_queries=2), "revenue") == [
        "revenue", "turnover"]


def test_whole_words_only_and_longest_match() -> None:
    r = Rewriter(glossary=[("net income", "net profit"), ("income", "earnings")])
    # "net income" wins over "income" inside it; "incomes" is not "income".
    assert queries(r, "net income growth") == ["net income growth", "net profit growth"]
    assert queries(r, "incomes rose") == ["incomes rose"]


def test_glossary_rows_sharing_a_name_merge() -> None:
    r = Rewriter(glossary=[("revenue", "turnover"), ("sales", "revenue")])
    assert queries(r, "sales") == ["sales", "revenue", "turnover"]


def test_graph_aliases_cross_languages_and_combine_with_the_glossary() -> None:
    r = Rewriter(glossary=[("acme", "acme corp")], graph=[("Acme Holdings", "阿克米控股"), ("acme", "阿克米")])
    vs = r.variants("Acme Holdings revenue")
    assert [v.query for v in vs] == ["Acme Holdings revenue", "阿克米控股 revenue"]
    assert vs[1].sources == ("graph",)
    both = r.variants("acme revenue")
    assert [v.query for v in both] == ["acme revenue", "acme corp revenue", "阿克米 revenue"]
    assert both[1].sources == both[2].sources == ("glossary", "graph")


def test_bad_cap() -> None:
    with pytest.raises(ValueError, match="max_queries"):
        Rewriter(max_queries=6)
