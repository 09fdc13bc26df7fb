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


def test_label_length_boundary() -> None:
    at_limit = ("restricted " + "y" * LABEL_MAX_CHARS)[:LABEL_MAX_CHARS]
    assert len(at_limit) == LABEL_MAX_CHARS
    assert PagePolicy().marked(page((at_limit, TOP)))
    over = at_limit + "z"
    assert not PagePolicy().marked(page((over, TOP)))
    # surrounding whitespace does not count towards the length
    assert PagePolicy().marked(page(("   " + at_limit + "   ", TOP)))


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
