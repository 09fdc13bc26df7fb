"""The RESTRICTED policy: sensitivity normalisation, marker detection in the top and bottom
bands of hand-built pages, and per-page overrides that can only add restriction."""

from __future__ import annotations

import pytest

from ragspine.indexing.pdf import PageContent
from ragspine.policy import (
    LABEL_MAX_CHARS,
    RESTRICTED,
    PagePolicy,
    is_restricted,
    normalize_sensitivity,
)
from ragspine.policy.markers import label_words_only

HEIGHT = 792.0  # US Letter, PDF points
# Default band 0.12: the top band ends at 95.04 pt, the bottom band starts at 696.96 pt.
TOP = (72.0, 30.0, 300.0, 44.0)
BOTTOM = (72.0, 750.0, 300.0, 764.0)
MIDDLE = (72.0, 400.0, 300.0, 414.0)
BODY = "Revenue grew 12% in 2021 on strong demand for cloud services."


def page(*lines: tuple[str, tuple[float, float, float, float]], number: int = 1) -> PageContent:
    body = [(BODY, MIDDLE)]
    all_lines = [*lines, *body]
    return PageContent(
        number=number,
        width=612.0,
        height=HEIGHT,
        text="\n".join(t for t, _ in all_lines),
        blocks=[],
        lines=list(all_lines),
    )


def ocr_page(*ocr_lines: tuple[str, tuple[float, float, float, float]], number: int = 1) -> PageContent:
    """A page whose text layer holds only the body, with ``ocr_lines`` read from its pixels."""
    p = page(number=number)
    p.ocr_lines = list(ocr_lines)
    return p


# -- sensitivity ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("RESTRICTED", "RESTRICTED"),
        ("restricted", "RESTRICTED"),
        (" restricted ", "RESTRICTED"),
        ("\tRestricted\n", "RESTRICTED"),
        ("\u3000restricted\u3000", "RESTRICTED"),  # ideographic space is whitespace too
        ("Public", "PUBLIC"),
        (" internal", "INTERNAL"),
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_normalize_sensitivity(value: object, expected: str | None) -> None:
    assert normalize_sensitivity(value) == expected


@pytest.mark.parametrize("value", [1, True, ["RESTRICTED"], {"level": "RESTRICTED"}, b"RESTRICTED"])
def test_normalize_sensitivity_refuses_non_strings(value: object) -> None:
    with pytest.raises(ValueError, match="sensitivity must be a string"):
        normalize_sensitivity(value)


@pytest.mark.parametrize(
    "value", ["RESTRICTED", "restricted", " restricted ", "Restricted", "rEsTrIcTeD", " RESTRICTED\n"]
)
def test_is_restricted_true(value: str) -> None:
    assert is_restricted(value)


@pytest.mark.parametrize(
    "value", [None, "", " ", "Public", "PUBLIC", "internal", "UNRESTRICTED", "restrict", "re stricted", "受限"]
)
def test_is_restricted_false(value: str | None) -> None:
    assert not is_restricted(value)


def test_restricted_constant() -> None:
    assert RESTRICTED == "RESTRICTED"


# -- markers --------------------------------------------------------------------------------


def test_marker_in_top_band() -> None:
    assert PagePolicy().marked(page(("RESTRICTED", TOP)))


def test_marker_in_bottom_band() -> None:
    assert PagePolicy().marked(page(("RESTRICTED", BOTTOM)))


def test_marker_in_the_middle_is_not_a_marker() -> None:
    assert not PagePolicy().marked(page(("RESTRICTED", MIDDLE)))


def test_page_without_marker() -> None:
    assert not PagePolicy().marked(page(("Annual Report 2021", TOP), ("Page 3", BOTTOM)))


def test_page_with_no_lines() -> None:
    p = PageContent(number=1, width=612.0, height=HEIGHT, text="", blocks=[], lines=[])
    assert not PagePolicy().marked(p)


def test_line_touching_the_band_counts() -> None:
    # 90..110 straddles the top band's edge at 95.04; 690..700 straddles the bottom one.
    assert PagePolicy().marked(page(("RESTRICTED", (72.0, 90.0, 300.0, 110.0))))
    assert PagePolicy().marked(page(("RESTRICTED", (72.0, 690.0, 300.0, 700.0))))


def test_line_just_outside_the_bands_does_not_count() -> None:
    assert not PagePolicy().marked(page(("RESTRICTED", (72.0, 96.0, 300.0, 110.0))))
    assert not PagePolicy().marked(page(("RESTRICTED", (72.0, 680.0, 300.0, 696.0))))


def test_band_width_is_configurable() -> None:
    line = ("RESTRICTED", (72.0, 150.0, 300.0, 164.0))  # 150 pt: outside 0.12, inside 0.25
    assert not PagePolicy().marked(page(line))
    assert PagePolicy(band=0.25).marked(page(line))


def test_band_follows_page_height() -> None:
    # A4 height 842: band 0.12 -> top 101.04; a line at 98..100 is inside it.
    p = PageContent(
        number=1, width=595.0, height=842.0, text="RESTRICTED", blocks=[],
        lines=[("RESTRICTED", (72.0, 98.0, 300.0, 100.0))],
    )
    assert PagePolicy().marked(p)


@pytest.mark.parametrize("band", [0.0, -0.1, 0.51, 1.0])
def test_bad_band(band: float) -> None:
    with pytest.raises(ValueError, match="band"):
        PagePolicy(band=band)


@pytest.mark.parametrize(
    "text",
    [
        "RESTRICTED",
        "  RESTRICTED  ",
        "RESTRICTED // INTERNAL USE",
        "Classification: RESTRICTED",
        "(RESTRICTED)",
        "RESTRICTED-EXTERNAL",
        "Distribution RESTRICTED. This document must not be shared outside the named recipients.",
    ],
)
def test_uppercase_marker_counts_in_any_band_line(text: str) -> None:
    assert PagePolicy().marked(page((text, TOP)))
    assert PagePolicy().marked(page((text, BOTTOM)))


@pytest.mark.parametrize(
    "text",
    ["UNRESTRICTED", "Classification: UNRESTRICTED", "NONRESTRICTED", "RESTRICTEDNESS", "RESTRICTED2", "XRESTRICTED"],
)
def test_marker_inside_a_longer_word_is_not_a_marker(text: str) -> None:
    assert not PagePolicy().marked(page((text, TOP)))


def test_lowercase_word_in_long_header_is_not_a_marker() -> None:
    header = "Notes on restricted stock units granted to executives in fiscal 2021"
    assert len(header) > LABEL_MAX_CHARS
    assert not PagePolicy().marked(page((header, TOP)))
    footer = "Restricted Stock Units and Performance Share Awards 2021"
    assert len(footer) > LABEL_MAX_CHARS
    assert not PagePolicy().marked(page((footer, BOTTOM)))


@pytest.mark.parametrize(
    "label",
    ["Classification: restricted", "restricted", "Restricted", "Security level: Restricted", "[restricted]"],
)
def test_short_label_counts_in_any_case(label: str) -> None:
    assert len(label) <= LABEL_MAX_CHARS
    assert PagePolicy().marked(page((label, TOP)))
    assert PagePolicy().marked(page((label, BOTTOM)))


def test_label_length_bounds_stamps_and_spaced_letters() -> None:
    # LABEL_MAX_CHARS no longer decides whether a band line is a label (its words do); it bounds
    # what counts as a stamp (an OCR line outside the bands) and which lines are read again with
    # their spaces removed. "RESTRICTED " + 37 dashes is 48 characters: a label (dashes only).
    at_limit = "RESTRICTED " + "-" * (LABEL_MAX_CHARS - 11)
    assert len(at_limit) == LABEL_MAX_CHARS
    assert PagePolicy().marked(ocr_page((at_limit, MIDDLE)))
    assert not PagePolicy().marked(ocr_page((at_limit + "-", MIDDLE)))
    # the same 49-character line in a band is still a label: band lines have no length limit
    assert PagePolicy().marked(page((at_limit + "-", TOP)))
    # "R E S T R I C T E D" is 19 characters; a space and 28 dashes make 48.
    spaced = " ".join("RESTRICTED") + " " + "-" * 28
    assert len(spaced) == LABEL_MAX_CHARS
    assert PagePolicy().marked(page((spaced, TOP)))
    assert not PagePolicy().marked(page((spaced + "-", TOP)))
    # surrounding whitespace does not count towards the length
    assert PagePolicy().marked(ocr_page(("   " + at_limit + "   ", MIDDLE)))


def test_short_lowercase_label_in_the_middle_is_not_a_marker() -> None:
    assert not PagePolicy().marked(page(("Classification: restricted", MIDDLE)))


@pytest.mark.parametrize("text", ["受限", "受限文件", "密级：受限", "本报告内容受限，仅供内部参考使用，不得对外分发。"])
def test_chinese_marker_in_a_band(text: str) -> None:
    assert PagePolicy().marked(page((text, TOP)))
    assert PagePolicy().marked(page((text, BOTTOM)))


def test_chinese_marker_in_the_middle_is_not_a_marker() -> None:
    assert not PagePolicy().marked(page(("受限", MIDDLE)))


def test_custom_markers() -> None:
    policy = PagePolicy(markers=("CONFIDENTIAL", "机密"))
    assert policy.marked(page(("CONFIDENTIAL", TOP)))
    assert policy.marked(page(("Confidential", BOTTOM)))  # short label, any case
    assert policy.marked(page(("绝密机密文件", TOP)))
    assert not policy.marked(page(("NONCONFIDENTIAL", TOP)))
    # the default markers are no longer markers
    assert not policy.marked(page(("RESTRICTED", TOP)))
    assert not policy.marked(page(("受限", TOP)))


def test_custom_multiword_marker() -> None:
    policy = PagePolicy(markers=("FOR INTERNAL USE ONLY",))
    assert policy.marked(page(("FOR INTERNAL USE ONLY", BOTTOM)))
    assert not policy.marked(page(("FOR INTERNAL USE ONLYX", BOTTOM)))


def test_marker_with_regex_characters_is_literal() -> None:
    policy = PagePolicy(markers=("C++ (SECRET)",))
    assert policy.marked(page(("C++ (SECRET)", TOP)))
    assert not policy.marked(page(("CC (SECRET)", TOP)))


def test_blank_markers_ignored_and_none_left_is_an_error() -> None:
    assert PagePolicy(markers=("", "  ", "RESTRICTED")).marked(page(("RESTRICTED", TOP)))
    with pytest.raises(ValueError, match="no classification markers"):
        PagePolicy(markers=())
    with pytest.raises(ValueError, match="no classification markers"):
        PagePolicy(markers=("", " "))


def test_marker_stripped_when_configured_with_spaces() -> None:
    assert PagePolicy(markers=(" RESTRICTED ",)).marked(page(("RESTRICTED", TOP)))


# -- labels, not words: the marker as a classification label vs. as a word of a phrase ---------
# Each line below was dropped by the rule before commit bc37982 (any case in a band line of at
# most LABEL_MAX_CHARS characters; the marker as configured in any band line or OCR stamp).

#: Lines of public filings: the word used as an adjective or in prose, never a classification.
FILING_PHRASES = [
    "equivalents, including restricted",  # Boeing 2018 cash-flow statement, pages 72-73
    "Summary of Restricted Stock Unit Activity",  # Costco
    "Form of Restricted Stock Agreement",  # Adobe exhibit index
    "Restricted Stock Units",
    "Restricted cash",
    "restricted to",
    "Cash restricted to capital projects",
    "Total cash, cash equivalents and restricted cash",
    "Long-Term Incentive Program Award Agreement (2019) – Restricted Shares",
    "Scheduled vesting—restricted stock units",
    "restricted-stock awards",
    "Cash – restricted",  # lower case after a separator: a caption, not a label
]
#: The same in capitals: the marker as configured, followed by a word of its own case that is
#: not label vocabulary (the noun it modifies).
FILING_PHRASES_UPPER = [
    "RESTRICTED STOCK UNITS",
    "RESTRICTED CASH",
    "CASH, CASH EQUIVALENTS AND RESTRICTED CASH",
    "FORM OF RESTRICTED STOCK AGREEMENT",
]
#: Chinese financial statements: 受限 inside a word or before the noun it modifies.
CHINESE_PHRASES = ["受限制的现金", "受限资产", "使用受限", "其他货币资金中使用受限的部分", "受限于", "所有权受限 资产"]


@pytest.mark.parametrize("text", FILING_PHRASES + FILING_PHRASES_UPPER + CHINESE_PHRASES)
def test_phrase_in_a_band_keeps_the_page(text: str) -> None:
    assert not PagePolicy().marked(page((text, TOP)))
    assert not PagePolicy().marked(page((text, BOTTOM)))


@pytest.mark.parametrize("text", FILING_PHRASES + FILING_PHRASES_UPPER + CHINESE_PHRASES)
def test_phrase_read_by_ocr_keeps_the_page(text: str) -> None:
    assert not PagePolicy().marked(ocr_page((text, TOP)))  # an OCR line in a band
    assert not PagePolicy().marked(ocr_page((text, MIDDLE)))  # as a would-be stamp


#: Label forms that must still drop the page (each: the marker and label vocabulary, numbers or
#: separators; or the marker as configured set apart from the words beside it).
LABELS = [
    "RESTRICTED - INTERNAL",
    "CONFIDENTIAL // RESTRICTED",
    "Restricted — Internal Use Only",
    "Sensitivity: Restricted",
    "Classification: Restricted. Do not forward this document outside Acme Corp.",
    "Restricted Distribution",
    "This document is restricted.",
    "Page 3 of 10 | RESTRICTED",
    "Restricted 2024-03-01",
    "FY2024 Q3 RESTRICTED",
    "Acme Corp – Restricted",  # a label part of the line, after a separator, capitalised
    "Project Falcon | Restricted",
    "ACME Corp RESTRICTED",  # the configured capitals beside words of another case
    "RESTRICTED Do not copy or forward",
    "R E S T R I C T E D",
    "ＲＥＳＴＲＩＣＴＥＤ",
    "Cash – Restricted",  # the price of "Acme Corp – Restricted": capitalised after a separator
    "受限",
    "密级：受限",
    "内部资料 受限",
    "本文件受限",
    "受限 内部使用",
    "受限，仅供内部参考",
    "2024年3月 受限",
    "第3页 共10页 受限",
    "Acme 受限",  # the CJK marker beside Latin words only
    "受限 Restricted",
]


@pytest.mark.parametrize("text", LABELS)
def test_label_forms_drop_the_page(text: str) -> None:
    assert PagePolicy().marked(page((text, TOP)))
    assert PagePolicy().marked(page((text, BOTTOM)))
    assert PagePolicy().marked(ocr_page((text, BOTTOM)))


@pytest.mark.parametrize(
    "text", ["RESTRICTED", "CONFIDENTIAL // RESTRICTED", "RESTRICTED - INTERNAL", "Classification: Restricted",
             "ACME Corp RESTRICTED", "受限", "密级：受限", "内部资料 受限", "R E S T R I C T E D"],
)
def test_stamp_forms_drop_the_page_anywhere(text: str) -> None:
    assert PagePolicy().marked(ocr_page((text, MIDDLE)))


@pytest.mark.parametrize("text", ["Restricted", "Acme Corp – Restricted", "restricted"])
def test_stamp_needs_the_marker_as_configured(text: str) -> None:
    # As before: outside the bands an OCR line counts only with the marker as configured (or
    # after a label word); in a band the same line is a label.
    assert not PagePolicy().marked(ocr_page((text, MIDDLE)))
    assert PagePolicy().marked(ocr_page((text, TOP)))


@pytest.mark.parametrize("text", ["NON-RESTRICTED", "Non-RESTRICTED", "non-restricted", "Un-Restricted", "NOT RESTRICTED"])
def test_negated_marker_is_not_a_label(text: str) -> None:
    assert not PagePolicy().marked(page((text, TOP)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("RESTRICTED Stock", True),  # capitals beside a word of another case stand apart
        ("RESTRICTED STOCK", False),  # beside a word of its own case: a phrase
        # In capitals only the word after the marker can make it a phrase: what stands before it
        # leaves it a label (leaking is worse than dropping), unless it negates it.
        ("STOCK RESTRICTED", True),
        ("ACME CORP RESTRICTED", True),
        ("EQUIVALENTS, INCLUDING RESTRICTED", True),  # a cash-flow caption in capitals drops: accepted
        ("DISTRIBUTION RESTRICTED TO NAMED RECIPIENTS", True),  # a preposition after it: a notice
        ("ACCESS RESTRICTED FOR CONTRACTORS", True),
        ("DISTRIBUTION RESTRICTED", True),  # beside label vocabulary
        ("RESTRICTED-EXTERNAL", True),
        ("RESTRICTED-STOCK", False),  # a hyphen joins like a space
        ("Distribution RESTRICTED. This document must not be shared outside the named recipients.", True),
        ("受限资产", False),  # the CJK run touching the marker: 资产 is not label vocabulary
        ("受限文件", True),
        ("本报告内容受限，仅供内部参考使用，不得对外分发。", True),
    ],
)
def test_set_apart_from_the_words_beside_it(text: str, expected: bool) -> None:
    assert PagePolicy().marked(page((text, TOP))) is expected


def test_any_configured_marker_follows_the_same_rule() -> None:
    policy = PagePolicy(markers=("CONFIDENTIAL", "机密"))
    assert policy.marked(page(("CONFIDENTIAL", TOP)))
    assert policy.marked(page(("Confidential Information", TOP)))  # label vocabulary
    assert policy.marked(page(("Acme Corp – Confidential", BOTTOM)))
    assert policy.marked(page(("TOP SECRET // CONFIDENTIAL", BOTTOM)))
    assert policy.marked(page(("绝密 机密文件", TOP)))
    assert not policy.marked(page(("Confidential Treatment Requested by Acme Corp", TOP)))
    assert not policy.marked(page(("CONFIDENTIAL TREATMENT REQUESTED", TOP)))
    assert not policy.marked(page(("Confidential treatment", TOP)))
    assert not policy.marked(page(("机密技术", TOP)))  # 技术 (technology) is the noun it modifies
    secret = PagePolicy(markers=("SECRET",))
    assert secret.marked(page(("TOP SECRET", TOP)))
    assert not secret.marked(page(("SECRET SAUCE RECIPE", TOP)))
    assert not secret.marked(page(("Trade secret protection", TOP)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("Page 3 of 10", True),
        ("Classification: Internal // Confidential", True),
        ("2024-03-01", True),
        ("FY2024 Q3 v2", True),
        ("March 2024", True),
        ("内部资料", True),
        ("第3页 共10页", True),
        ("2024年3月", True),
        ("本报告内容，仅供内部参考", True),
        ("stock", False),
        ("including", False),
        ("not", False),
        ("to", False),
        ("使用", False),
        ("资产", False),
        ("内部资产", False),
    ],
)
def test_label_words_only(text: str, expected: bool) -> None:
    assert label_words_only(text) is expected


# -- restricted_pages -----------------------------------------------------------------------


def _doc() -> list[PageContent]:
    return [
        page(("Annual Report 2021", TOP), number=1),
        page(("RESTRICTED", BOTTOM), number=2),
        page(("Page 3", BOTTOM), number=3),
        page(("受限", TOP), number=4),
        page(("Page 5", BOTTOM), number=5),
    ]


def test_restricted_pages_from_markers() -> None:
    assert PagePolicy().restricted_pages(_doc()) == [2, 4]
    assert PagePolicy().restricted_pages(_doc(), None) == [2, 4]
    assert PagePolicy().restricted_pages(_doc(), {}) == [2, 4]


def test_overrides_add_restriction() -> None:
    assert PagePolicy().restricted_pages(_doc(), {3: "RESTRICTED"}) == [2, 3, 4]
    assert PagePolicy().restricted_pages(_doc(), {1: " restricted ", 5: "Restricted"}) == [1, 2, 4, 5]


def test_override_keys_may_be_strings() -> None:
    # JSON objects have string keys.
    assert PagePolicy().restricted_pages(_doc(), {"3": "restricted"}) == [2, 3, 4]


def test_overrides_never_lift_a_marker() -> None:
    overrides = {2: "PUBLIC", 4: "unrestricted", 3: "public"}
    assert PagePolicy().restricted_pages(_doc(), overrides) == [2, 4]


def test_override_for_a_missing_page_is_ignored() -> None:
    assert PagePolicy().restricted_pages(_doc(), {99: "RESTRICTED"}) == [2, 4]


def test_restricted_pages_sorted_whatever_the_page_order() -> None:
    assert PagePolicy().restricted_pages(list(reversed(_doc())), {5: "RESTRICTED"}) == [2, 4, 5]


def test_restricted_pages_of_empty_document() -> None:
    assert PagePolicy().restricted_pages([], {1: "RESTRICTED"}) == []


def test_bad_override_value_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError):
        PagePolicy().restricted_pages(_doc(), {3: 1})  # type: ignore[dict-item]
