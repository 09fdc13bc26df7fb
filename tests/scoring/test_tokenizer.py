"""Tokenizer: ASCII words lower-cased, CJK runs as unigrams + adjacent bigrams, NFKC folding,
and stable CRC-32 token ids. Expected tokens are written out by hand."""

from __future__ import annotations

import pytest

from ragspine.scoring.tokenizer import (
    TOKENIZER_VERSION,
    is_cjk_char,
    term_counts,
    token_id,
    tokenize,
)


def _crc32_reference(data: bytes) -> int:
    """Plain bitwise CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# -- ASCII ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello World", ["hello", "world"]),
        ("REVENUE Revenue revenue", ["revenue", "revenue", "revenue"]),
        ("Q3FY2021 results", ["q3fy2021", "results"]),
        ("net-income, EBITDA; (loss)!", ["net", "income", "ebitda", "loss"]),
        ("don't stop_now", ["don", "t", "stop", "now"]),
        ("3.14 and 1,000", ["3", "14", "and", "1", "000"]),
        ("tabs\tand\nnewlines", ["tabs", "and", "newlines"]),
    ],
)
def test_ascii_words_lowercased_and_split_on_punctuation(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "\n\t \r\n", "!!! ... ,,, ---", "。，、！？；：「」"])
def test_empty_or_punctuation_only_input_gives_no_tokens(text: str) -> None:
    assert tokenize(text) == []


# -- CJK ------------------------------------------------------------------------------------


def test_simplified_chinese_run_gives_unigrams_then_bigrams() -> None:
    assert tokenize("营收增长") == ["营", "收", "增", "长", "营收", "收增", "增长"]


def test_traditional_chinese_run_gives_unigrams_then_bigrams() -> None:
    assert tokenize("營收增長") == ["營", "收", "增", "長", "營收", "收增", "增長"]


def test_simplified_and_traditional_are_distinct_tokens() -> None:
    # No script conversion: only the shared character 收/增 overlaps.
    simp, trad = set(tokenize("营收增长")), set(tokenize("營收增長"))
    assert simp & trad == {"收", "增", "收增"}


def test_single_cjk_character_has_no_bigram() -> None:
    assert tokenize("年") == ["年"]


def test_two_cjk_characters() -> None:
    assert tokenize("中文") == ["中", "文", "中文"]


def test_cjk_punctuation_splits_runs_so_no_bigram_crosses_it() -> None:
    assert tokenize("中文，报告") == ["中", "文", "中文", "报", "告", "报告"]
    assert tokenize("利润。收入") == ["利", "润", "利润", "收", "入", "收入"]


def test_ideographic_space_splits_runs() -> None:
    assert tokenize("中文\u3000报告") == ["中", "文", "中文", "报", "告", "报告"]


def test_cjk_extension_a_and_b_are_ideographs() -> None:
    ext_a = "\u3400"  # 㐀
    ext_b = "\U00020000"  # 𠀀
    assert tokenize(ext_a + ext_b) == [ext_a, ext_b, ext_a + ext_b]


def test_compatibility_ideograph_folds_to_unified_form() -> None:
    # U+F900 (豈, compatibility) is NFKC-normalised to U+8C48 (豈, unified).
    assert tokenize("\uf900") == ["\u8c48"]


@pytest.mark.parametrize("ch", ["中", "營", "\u3400", "\U00020000", "\uf900"])
def test_is_cjk_char_true_for_ideographs(ch: str) -> None:
    assert is_cjk_char(ch)


@pytest.mark.parametrize("ch", ["a", "1", "。", "，", "ア", "한", " ", "é"])
def test_is_cjk_char_false_for_others(ch: str) -> None:
    assert not is_cjk_char(ch)


# -- mixed ----------------------------------------------------------------------------------


def test_mixed_ascii_and_cjk_in_text_order() -> None:
    assert tokenize("2021年营收 Revenue增长 5%") == [
        "2021",
        "年",
        "营",
        "收",
        "年营",
        "营收",
        "revenue",
        "增",
        "长",
        "增长",
        "5",
    ]


def test_cjk_directly_after_ascii_does_not_join() -> None:
    assert tokenize("GDP增速") == ["gdp", "增", "速", "增速"]


# -- NFKC -----------------------------------------------------------------------------------


def test_full_width_letters_and_digits_fold_to_ascii() -> None:
    assert tokenize("ＡＢＣ１２３") == ["abc123"]
    assert tokenize("ＡＢＣ１２３") == tokenize("abc123")


def test_full_width_in_chinese_text() -> None:
    assert tokenize("２０２１年ＧＤＰ") == ["2021", "年", "gdp"]


def test_full_width_punctuation_separates_words() -> None:
    assert tokenize("ａｂｃ，ｄｅｆ！") == ["abc", "def"]


def test_ligature_folds() -> None:
    assert tokenize("\ufb01nance") == ["finance"]  # "ﬁ" ligature


# -- token ids ------------------------------------------------------------------------------


def test_token_id_is_crc32_standard_check_value() -> None:
    # The CRC-32 check value of "123456789" is 0xCBF43926 in every CRC catalogue.
    assert token_id("123456789") == 0xCBF43926


@pytest.mark.parametrize("tok", ["revenue", "a", "2021", "营", "营收", "營收", "\U00020000", ""])
def test_token_id_matches_reference_crc32_of_utf8(tok: str) -> None:
    assert token_id(tok) == _crc32_reference(tok.encode("utf-8"))


@pytest.mark.parametrize("tok", ["revenue", "营收", "x" * 500])
def test_token_id_is_a_stable_unsigned_32_bit_int(tok: str) -> None:
    first = token_id(tok)
    assert isinstance(first, int)
    assert 0 <= first < 2**32
    assert all(token_id(tok) == first for _ in range(3))


def test_token_ids_differ_for_simplified_and_traditional() -> None:
    assert token_id("营收") != token_id("營收")


def test_term_counts() -> None:
    c = term_counts(tokenize("Revenue revenue 营收 REVENUE"))
    assert c["revenue"] == 3
    assert c["营收"] == 1 and c["营"] == 1 and c["收"] == 1
    assert sum(c.values()) == 6


def test_tokenizer_version_is_a_nonempty_string() -> None:
    assert isinstance(TOKENIZER_VERSION, str) and TOKENIZER_VERSION
