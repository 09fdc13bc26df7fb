"""A query's BM25 tokens leave out its question words (ragspine.scoring.query_terms): the
tokens below are written out by hand from the tokenizer's rule (CJK unigrams, then bigrams;
ASCII words lower-cased), and the ranking test's scores are worked out in its docstring."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragspine.chain.grade import content_terms
from ragspine.config import Settings
from ragspine.evaluation import evaluate_variants
from ragspine.scoring.bm25 import query_vector
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.tokenizer import token_id, tokenize


def test_chinese_question_phrase_is_dropped_with_its_characters_and_bigrams() -> None:
    # "是什么": without the phrase only 是 is left; no bigram 是什 spans the gap.
    assert query_tokens("Stam1na是什么？") == ["stam1na", "是"]
    assert tokenize("Stam1na是什么？") == ["stam1na", "是", "什", "么", "是什", "什么"]


def test_longer_phrases_win_and_traditional_forms_are_dropped() -> None:
    # 為什麼 (not just 什麼, which would leave 為 behind): 天空是藍的 is what remains.
    assert query_tokens("為什麼天空是藍的") == ["天", "空", "是", "藍", "的", "天空", "空是", "是藍", "藍的"]
    assert query_tokens("为什么天空是蓝的") == ["天", "空", "是", "蓝", "的", "天空", "空是", "是蓝", "蓝的"]


def test_a_character_that_also_starts_names_is_kept() -> None:
    # 几 alone is not a question word (几内亚 is Guinea); 哪里 is, and goes.
    toks = query_tokens("几内亚的首都是哪里")
    assert toks[:3] == ["几", "内", "亚"] and "几内" in toks
    assert not {"哪", "里", "哪里", "是哪"} & set(toks)
    assert toks[-1] == "都是"


def test_english_question_words_are_dropped_as_whole_words() -> None:
    assert query_tokens("What is the revenue of ACME in 2019?") == ["is", "the", "revenue", "of", "acme", "in", "2019"]
    assert query_tokens("How many employees?") == ["many", "employees"]
    assert query_tokens("whatever somewhat") == ["whatever", "somewhat"]  # not a prefix match
    # Full-width letters are NFKC-normalised before matching, as the tokenizer does.
    assert query_tokens("ＷＨＡＴ ｉｓ ＡＣＭＥ") == ["is", "acme"]


def test_a_query_of_question_words_only_is_not_emptied() -> None:
    assert query_tokens("什么？") == ["什", "么", "什么"]
    assert query_tokens("Who?") == ["who"]
    assert query_tokens("") == []


def test_keeping_question_words_is_the_plain_tokenizer() -> None:
    q = "What is 什么?"
    assert query_tokens(q, drop_question_words=False) == tokenize(q)
    assert query_vector(q, drop_question_words=False).indices == sorted({token_id(t) for t in tokenize(q)})
    assert query_vector(q).indices == [token_id("is")]


def test_the_corrective_grade_does_not_require_question_words() -> None:
    # 是 stays (a CJK character carries meaning to the grade); 什/么/什么 would never be "covered"
    # by the passage that answers.
    assert content_terms("Stam1na是什么？") == ["stam1na", "是"]


def _write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_question_words_no_longer_outrank_the_subject(settings: Settings, tmp_path: Path) -> None:
    """Four one-paragraph documents, query "Stam1na是什么？", relevant: b.

    Token counts (unigrams + bigrams of each CJK run): a 7 + 11 = 18, b 1 + 19 = 20,
    c 19, d 13; average 17.5. IDF (Lucene, N = 4): a term in one document ln(1 + 3.5 / 1.5) =
    1.204, 是 (in b and c) ln(1 + 2.5 / 2.5) = 0.693. k1 1.5, b 0.75.

    - Question words kept: a holds 什, 么 and 什么 twice each: 3 x 1.204 x 2 x 2.5 / (2 + 1.532)
      = 5.11; b holds stam1na and 是 once: (1.204 + 0.693) x 2.5 / (1 + 1.661) = 1.78. b ranks
      second: nDCG@10 = 1 / log2(3).
    - Dropped (the default): the query is [stam1na, 是]; a matches nothing, b 1.78, c 是 alone
      (0.693 x 2.5 / (1 + 1.607) = 0.66). b ranks first: nDCG@10 = 1.
    """
    root = tmp_path / "zh"
    (root / "qrels").mkdir(parents=True)
    _write_jsonl(root / "corpus.jsonl", [
        {"_id": "a", "title": "", "text": "你说什么？什么都没有说。"},
        {"_id": "b", "title": "", "text": "Stam1na是芬兰的一支金属乐队"},
        {"_id": "c", "title": "", "text": "赫尔辛基是芬兰的首都"},
        {"_id": "d", "title": "", "text": "乐队在夏天巡演"},
    ])
    _write_jsonl(root / "queries.jsonl", [{"_id": "q", "text": "Stam1na是什么？"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tb\t1\n", encoding="utf-8")
    res = evaluate_variants(settings, root, {"default": {}, "kept": {"bm25_drop_question_words": False}},
                            split="test")
    assert res["default"]["ndcg@10"] == pytest.approx(1.0)
    assert res["kept"]["ndcg@10"] == pytest.approx(1.0 / math.log2(3))


def test_a_period_token_also_searches_its_year() -> None:
    # "FY2017" is one token; the filing's pages say "2017" or "fiscal 2017"
    assert query_tokens("Amazon FY2017 return on assets") == ["amazon", "fy2017", "2017", "return", "on", "assets"]
    assert query_tokens("fy18 and CY2020") == ["fy18", "2018", "and", "cy2020", "2020"]
    # not a period: left alone
    assert query_tokens("fyi fy20189 q2018") == ["fyi", "fy20189", "q2018"]
    assert query_tokens("What is FY2017?", drop_question_words=False) == ["what", "is", "fy2017", "2017"]
