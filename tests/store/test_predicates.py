"""Metadata predicates: JSON and text forms of every operator, every malformed case, type
checks against the libraries' field types, and merging of field types."""

from __future__ import annotations

from typing import Any

import pytest

from ragspine.errors import FilterError, RagspineError
from ragspine.store.predicates import (
    BUILTIN_FIELDS,
    OPS,
    Predicate,
    check_types,
    merge_field_types,
    parse_filters,
    parse_predicate,
    parse_predicate_text,
    value_type,
)


def P(field: str, op: str, value: Any) -> Predicate:  # noqa: N802
    return Predicate(field, op, value)


def test_filter_error_is_a_ragspine_error_mapped_to_4xx() -> None:
    assert issubclass(FilterError, RagspineError)
    assert 400 <= FilterError.status < 500


def test_all_operators_listed() -> None:
    assert set(OPS) == {"eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between"}


# -- JSON form ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"field": "region", "op": "eq", "value": "EU"}, P("region", "eq", "EU")),
        ({"field": "year", "op": "eq", "value": 2021}, P("year", "eq", 2021)),
        ({"field": "audited", "op": "eq", "value": True}, P("audited", "eq", True)),
        ({"field": "region", "op": "ne", "value": "US"}, P("region", "ne", "US")),
        ({"field": "region", "op": "in", "value": ["EU", "US"]}, P("region", "in", ("EU", "US"))),
        ({"field": "year", "op": "in", "value": [2020]}, P("year", "in", (2020,))),
        ({"field": "region", "op": "nin", "value": ["CN"]}, P("region", "nin", ("CN",))),
        ({"field": "year", "op": "gt", "value": 2019}, P("year", "gt", 2019)),
        ({"field": "year", "op": "gte", "value": 2020}, P("year", "gte", 2020)),
        ({"field": "ratio", "op": "lt", "value": 0.5}, P("ratio", "lt", 0.5)),
        ({"field": "ratio", "op": "lte", "value": -1.25}, P("ratio", "lte", -1.25)),
        ({"field": "year", "op": "between", "value": [2019, 2021]}, P("year", "between", (2019, 2021))),
        ({"field": "year", "op": "between", "value": [2020, 2020]}, P("year", "between", (2020, 2020))),
        ({"field": "ratio", "op": "between", "value": [0, 0.5]}, P("ratio", "between", (0, 0.5))),
        ({"field": "doc_id", "op": "eq", "value": "abc"}, P("doc_id", "eq", "abc")),
        ({"field": "page", "op": "lte", "value": 3}, P("page", "lte", 3)),
        ({"field": "_x9", "op": "eq", "value": "v"}, P("_x9", "eq", "v")),
    ],
)
def test_parse_predicate_every_operator(raw: dict[str, Any], expected: Predicate) -> None:
    assert parse_predicate(raw) == expected


def test_builtin_fields() -> None:
    assert BUILTIN_FIELDS == {"doc_id": "str", "page": "int"}
    assert P("page", "eq", 1).is_builtin
    assert P("doc_id", "eq", "d").is_builtin
    assert not P("year", "eq", 1).is_builtin


def test_parse_filters() -> None:
    assert parse_filters(None) == []
    assert parse_filters([]) == []
    assert parse_filters(
        [{"field": "year", "op": "gte", "value": 2020}, {"field": "region", "op": "eq", "value": "EU"}]
    ) == [P("year", "gte", 2020), P("region", "eq", "EU")]


@pytest.mark.parametrize("raw", ["year gte 2020", b"x", 5, {"field": "a"}])
def test_parse_filters_refuses_non_lists(raw: Any) -> None:
    with pytest.raises(FilterError):
        parse_filters(raw)


def test_parse_filters_reports_the_bad_one() -> None:
    with pytest.raises(FilterError, match="'region'"):
        parse_filters(
            [{"field": "year", "op": "gte", "value": 2020}, {"field": "region", "op": "gt", "value": "EU"}]
        )


# -- malformed JSON form --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "must_name"),
    [
        # unknown operator: names the operator and the field, and lists what is allowed
        ({"field": "year", "op": "like", "value": 2020}, ["'like'", "'year'", "between"]),
        ({"field": "year", "op": ">=", "value": 2020}, ["'>='", "'year'"]),
        ({"field": "year", "op": None, "value": 2020}, ["None", "'year'"]),
        ({"field": "year", "op": "EQ", "value": 2020}, ["'EQ'", "'year'"]),
        # missing value
        ({"field": "year", "op": "eq"}, ["'year'", "value"]),
        # bad field names
        ({"field": "1year", "op": "eq", "value": 1}, ["'1year'"]),
        ({"field": "fiscal-year", "op": "eq", "value": 1}, ["'fiscal-year'"]),
        ({"field": "meta.year", "op": "eq", "value": 1}, ["'meta.year'"]),
        ({"field": "", "op": "eq", "value": 1}, ["''"]),
        ({"field": "y" * 65, "op": "eq", "value": 1}, ["y" * 65]),
        ({"field": 5, "op": "eq", "value": 1}, ["5"]),
        ({"op": "eq", "value": 1}, ["None"]),
        # unknown keys
        ({"field": "year", "op": "eq", "value": 1, "negate": True}, ["negate"]),
        # in / nin need a non-empty list of scalars
        ({"field": "region", "op": "in", "value": "EU"}, ["'in'", "'region'", "list"]),
        ({"field": "region", "op": "in", "value": []}, ["'in'", "'region'", "non-empty"]),
        ({"field": "region", "op": "nin", "value": None}, ["'nin'", "'region'"]),
        ({"field": "region", "op": "in", "value": ["EU", ["US"]]}, ["'in'", "'region'", "list"]),
        ({"field": "region", "op": "in", "value": [{"a": 1}]}, ["'in'", "'region'", "dict"]),
        ({"field": "region", "op": "nin", "value": [None]}, ["'nin'", "'region'", "NoneType"]),
        # between: [low, high] of numbers with low <= high
        ({"field": "year", "op": "between", "value": [2021, 2019]}, ["'between'", "'year'", "2021", "2019"]),
        ({"field": "year", "op": "between", "value": [2019]}, ["'between'", "'year'", "[low, high]"]),
        ({"field": "year", "op": "between", "value": [1, 2, 3]}, ["'between'", "'year'"]),
        ({"field": "year", "op": "between", "value": 2019}, ["'between'", "'year'"]),
        ({"field": "year", "op": "between", "value": ["a", "b"]}, ["'between'", "'year'", "numbers"]),
        ({"field": "year", "op": "between", "value": [True, 2]}, ["'between'", "'year'", "numbers"]),
        ({"field": "year", "op": "between", "value": [None, 2]}, ["'between'", "'year'"]),
        # ranges on strings / booleans
        ({"field": "region", "op": "gt", "value": "EU"}, ["'gt'", "'region'", "number"]),
        ({"field": "region", "op": "gte", "value": "2020"}, ["'gte'", "'region'", "number"]),
        ({"field": "region", "op": "lt", "value": True}, ["'lt'", "'region'", "number"]),
        ({"field": "region", "op": "lte", "value": "x"}, ["'lte'", "'region'", "number"]),
        # non-scalar values for scalar operators
        ({"field": "region", "op": "eq", "value": ["EU"]}, ["'eq'", "'region'", "list"]),
        ({"field": "region", "op": "ne", "value": None}, ["'ne'", "'region'", "NoneType"]),
        ({"field": "region", "op": "eq", "value": {"a": 1}}, ["'eq'", "'region'", "dict"]),
    ],
)
def test_malformed_predicate_names_the_problem(raw: dict[str, Any], must_name: list[str]) -> None:
    with pytest.raises(FilterError) as ei:
        parse_predicate(raw)
    msg = str(ei.value)
    for part in must_name:
        assert part in msg, (part, msg)


@pytest.mark.parametrize("raw", [["year", "eq", 1], "year eq 1", None, 3])
def test_predicate_must_be_an_object(raw: Any) -> None:
    with pytest.raises(FilterError, match="field, op and value"):
        parse_predicate(raw)


@pytest.mark.parametrize(
    "raw",
    [
        {"field": "x", "op": "gt", "value": float("nan")},
        {"field": "x", "op": "eq", "value": float("inf")},
        {"field": "x", "op": "between", "value": [float("-inf"), 5]},
        {"field": "x", "op": "in", "value": [1, float("nan")]},
    ],
)
def test_non_finite_numbers_are_refused(raw: dict[str, Any]) -> None:
    # Python's json accepts NaN and Infinity; a filter on them cannot be applied exactly.
    with pytest.raises(FilterError, match="'x'"):
        parse_predicate(raw)


# -- text form ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region eq EU", P("region", "eq", "EU")),
        ("year eq 2021", P("year", "eq", 2021)),
        ('year eq "2021"', P("year", "eq", "2021")),
        ("code eq 007", P("code", "eq", "007")),  # not valid JSON -> the string as typed
        ("audited eq true", P("audited", "eq", True)),
        ("audited eq True", P("audited", "eq", "True")),
        ("title eq Annual report 2021", P("title", "eq", "Annual report 2021")),
        ("  region   ne   US  ", P("region", "ne", "US")),
        ("region in EU,US", P("region", "in", ("EU", "US"))),
        ("region in EU, US , CN", P("region", "in", ("EU", "US", "CN"))),
        ('region in ["EU", "US"]', P("region", "in", ("EU", "US"))),
        ('region in "EU", "US"', P("region", "in", ("EU", "US"))),
        ('region in "EU,US"', P("region", "in", ("EU,US",))),
        ("region in EU", P("region", "in", ("EU",))),
        ("year in 2020,2021", P("year", "in", (2020, 2021))),
        ("year in 2020", P("year", "in", (2020,))),
        ("year nin [2019]", P("year", "nin", (2019,))),
        ("region nin CN", P("region", "nin", ("CN",))),
        ("year gt 2019", P("year", "gt", 2019)),
        ("year gte 2020", P("year", "gte", 2020)),
        ("ratio lt 0.5", P("ratio", "lt", 0.5)),
        ("ratio lte -1e3", P("ratio", "lte", -1000.0)),
        ("year between 2019,2021", P("year", "between", (2019, 2021))),
        ("year between 2019, 2021", P("year", "between", (2019, 2021))),
        ("year between [2019, 2021]", P("year", "between", (2019, 2021))),
        ("ratio between 0.1,0.9", P("ratio", "between", (0.1, 0.9))),
    ],
)
def test_parse_predicate_text_every_operator(text: str, expected: Predicate) -> None:
    assert parse_predicate_text(text) == expected


def test_text_value_may_be_chinese() -> None:
    assert parse_predicate_text("region eq 华东") == P("region", "eq", "华东")
    assert parse_predicate_text("region in 华东,华南") == P("region", "in", ("华东", "华南"))


@pytest.mark.parametrize(
    ("text", "must_name"),
    [
        ("", ["FIELD OP VALUE"]),
        ("year", ["'year'", "FIELD OP VALUE"]),
        ("year gte", ["'year gte'", "FIELD OP VALUE"]),
        ("year >= 2020", ["'>='", "'year'"]),
        ("year like 2020", ["'like'", "'year'"]),
        ("地区 eq 华东", ["'地区'"]),
        ("year between 2021,2019", ["'between'", "'year'", "2021", "2019"]),
        ("year between 2019", ["'between'", "'year'", "[low, high]"]),
        ("year between 2019,2020,2021", ["'between'", "'year'"]),
        ("year between a,b", ["'between'", "'year'", "numbers"]),
        ("region gt EU", ["'gt'", "'region'", "number"]),
        ("region lte true", ["'lte'", "'region'", "number"]),
        ("region in []", ["'in'", "'region'", "non-empty"]),
        ("region in [[1]]", ["'in'", "'region'"]),
        ('region eq {"a": 1}', ["'eq'", "'region'", "dict"]),
        ("region eq [1]", ["'eq'", "'region'", "list"]),
        ("x gt NaN", ["'x'"]),
        ("x between -Infinity,5", ["'x'"]),
    ],
)
def test_malformed_text_predicate_names_the_problem(text: str, must_name: list[str]) -> None:
    with pytest.raises(FilterError) as ei:
        parse_predicate_text(text)
    msg = str(ei.value)
    for part in must_name:
        assert part in msg, (part, msg)


# -- check_types ----------------------------------------------------------------------------

FIELD_TYPES = {
    "year": "int",
    "ratio": "float",
    "region": "str",
    "audited": "bool",
    "tags": "list[str]",
    "codes": "list[int]",
    "misc": "list",
    "anything": "mixed",
}


@pytest.mark.parametrize(
    "pred",
    [
        P("year", "eq", 2021),
        P("year", "eq", 2021.0),  # integral float matches an int field
        P("year", "in", (2020, 2021)),
        P("year", "nin", (2019,)),
        P("year", "gte", 2020),
        P("year", "lt", 2020.5),
        P("year", "between", (2019, 2021)),
        P("ratio", "gt", 0.5),
        P("ratio", "lte", 1),
        P("ratio", "between", (0, 0.5)),
        P("region", "eq", "EU"),
        P("region", "ne", "EU"),
        P("region", "in", ("EU", "US")),
        P("region", "nin", ("CN",)),
        P("audited", "eq", True),
        P("audited", "ne", False),
        P("tags", "eq", "esg"),
        P("tags", "in", ("esg", "risk")),
        P("codes", "eq", 7),
        P("codes", "gte", 3),
        P("misc", "eq", "a"),
        P("misc", "eq", 1),
        P("anything", "eq", "x"),
        P("anything", "gt", 3),
        P("doc_id", "eq", "d1"),
        P("doc_id", "in", ("d1", "d2")),
        P("page", "eq", 3),
        P("page", "between", (1, 5)),
    ],
)
def test_check_types_accepts_compatible_predicates(pred: Predicate) -> None:
    check_types([pred], FIELD_TYPES)


def test_check_types_accepts_no_predicates() -> None:
    check_types([], {})


def test_builtin_fields_known_without_field_types() -> None:
    check_types([P("page", "gte", 2), P("doc_id", "eq", "x")], {})


@pytest.mark.parametrize(
    ("pred", "must_name"),
    [
        # unknown field: named, and the known ones listed
        (P("yeer", "eq", 2021), ["'yeer'", "year", "region", "doc_id", "page"]),
        # range on a non-numeric field
        (P("region", "gt", 3), ["'gt'", "'region'", "str"]),
        (P("region", "between", (1, 2)), ["'between'", "'region'", "str"]),
        (P("audited", "gte", 1), ["'gte'", "'audited'", "bool"]),
        (P("tags", "lt", 3), ["'lt'", "'tags'", "list[str]"]),
        (P("doc_id", "gt", 3), ["'gt'", "'doc_id'"]),
        (P("misc", "gt", 3), ["'gt'", "'misc'"]),
        # value type mismatch
        (P("year", "eq", "2021"), ["'year'", "'2021'", "int"]),
        (P("year", "eq", True), ["'year'", "True", "int"]),
        (P("year", "eq", 2021.5), ["'year'", "2021.5", "int"]),
        (P("year", "in", (2020, "2021")), ["'year'", "'2021'"]),
        (P("region", "eq", 5), ["'region'", "5", "str"]),
        (P("region", "nin", ("EU", 1)), ["'region'", "1", "str"]),
        (P("audited", "eq", "true"), ["'audited'", "'true'", "bool"]),
        (P("audited", "eq", 1), ["'audited'", "1", "bool"]),
        (P("tags", "eq", 1), ["'tags'", "list[str]"]),
        (P("codes", "eq", "7"), ["'codes'", "list[int]"]),
        (P("page", "eq", "3"), ["'page'", "'3'"]),
        (P("doc_id", "eq", 3), ["'doc_id'", "3"]),
        # exact match on floats refused
        (P("ratio", "eq", 0.5), ["'eq'", "'ratio'", "float"]),
        (P("ratio", "ne", 0.5), ["'ne'", "'ratio'", "float"]),
        (P("ratio", "in", (0.5, 1)), ["'in'", "'ratio'", "float"]),
        (P("ratio", "nin", (0.5,)), ["'nin'", "'ratio'", "float"]),
        (P("ratio", "eq", "x"), ["'ratio'", "'x'"]),
    ],
)
def test_check_types_refuses(pred: Predicate, must_name: list[str]) -> None:
    with pytest.raises(FilterError) as ei:
        check_types([pred], FIELD_TYPES)
    msg = str(ei.value)
    for part in must_name:
        assert part in msg, (part, msg)


def test_check_types_unknown_field_with_no_metadata() -> None:
    with pytest.raises(FilterError, match="unknown filter field 'year'.*doc_id, page"):
        check_types([P("year", "eq", 1)], {})


def test_check_types_stops_at_the_first_bad_predicate() -> None:
    with pytest.raises(FilterError, match="'region'"):
        check_types([P("year", "eq", 2021), P("region", "gt", 1)], FIELD_TYPES)


def test_parsed_then_checked_end_to_end() -> None:
    preds = parse_filters(
        [{"field": "year", "op": "between", "value": [2019, 2021]}, {"field": "region", "op": "in", "value": ["EU"]}]
    )
    check_types(preds, FIELD_TYPES)
    with pytest.raises(FilterError, match="'ratio'"):
        check_types([parse_predicate_text("ratio eq 0.5")], FIELD_TYPES)


# -- value_type and merge_field_types -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "bool"),
        (False, "bool"),
        (3, "int"),
        (3.0, "float"),
        ("x", "str"),
        (["a", "b"], "list[str]"),
        ([1, 2], "list[int]"),
        ([True], "list[bool]"),
        ([1, "a"], "list"),
        ([1, 2.0], "list"),
        ([], "list"),
    ],
)
def test_value_type(value: Any, expected: str) -> None:
    assert value_type(value) == expected


@pytest.mark.parametrize("value", [None, {"a": 1}, (1, 2), b"x"])
def test_value_type_refuses_unsupported(value: Any) -> None:
    with pytest.raises(FilterError, match="unsupported metadata value"):
        value_type(value)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({}, {}, {}),
        ({"year": "int"}, {}, {"year": "int"}),
        ({}, {"year": "int"}, {"year": "int"}),
        ({"year": "int"}, {"year": "int"}, {"year": "int"}),
        ({"year": "int"}, {"region": "str"}, {"year": "int", "region": "str"}),
        ({"x": "int"}, {"x": "float"}, {"x": "float"}),
        ({"x": "float"}, {"x": "int"}, {"x": "float"}),
        ({"x": "int"}, {"x": "str"}, {"x": "mixed"}),
        ({"x": "bool"}, {"x": "int"}, {"x": "mixed"}),
        ({"x": "list[str]"}, {"x": "str"}, {"x": "mixed"}),
        ({"x": "mixed"}, {"x": "int"}, {"x": "mixed"}),
        ({"x": "int"}, {"x": "mixed"}, {"x": "mixed"}),
    ],
)
def test_merge_field_types(a: dict[str, str], b: dict[str, str], expected: dict[str, str]) -> None:
    assert merge_field_types(a, b) == expected


def test_merge_field_types_does_not_mutate_inputs() -> None:
    a, b = {"x": "int"}, {"x": "str"}
    merge_field_types(a, b)
    assert a == {"x": "int"} and b == {"x": "str"}


def test_merged_mixed_field_accepts_any_value_and_ranges() -> None:
    types = merge_field_types({"x": "int"}, {"x": "str"})
    check_types([P("x", "eq", "a"), P("x", "eq", 1), P("x", "gte", 1)], types)


def test_merged_int_float_field_refuses_exact_match() -> None:
    types = merge_field_types({"x": "int"}, {"x": "float"})
    check_types([P("x", "gte", 1)], types)
    with pytest.raises(FilterError, match="'x'"):
        check_types([P("x", "eq", 1)], types)
