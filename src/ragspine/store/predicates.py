"""Metadata predicates: ``{"field", "op", "value"}`` parsed and type-checked.

A predicate that cannot be applied exactly is a :class:`FilterError` naming the problem —
never a silently wider search (docs/invariants.md, 3). Stores compile :class:`Predicate` lists to their
own filter types.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ragspine.errors import FilterError

OPS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between")
RANGE_OPS = ("gt", "gte", "lt", "lte", "between")
LIST_OPS = ("in", "nin")
FIELD_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

#: Fields every point carries besides the caller's metadata, with their types.
BUILTIN_FIELDS: dict[str, str] = {"doc_id": "str", "page": "int"}

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Predicate:
    field: str
    op: str
    value: Scalar | tuple[Scalar, ...]

    @property
    def is_builtin(self) -> bool:
        return self.field in BUILTIN_FIELDS


def value_type(v: Any) -> str:
    """The type name recorded for a metadata value: bool, int, float, str or list[...]."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):
        inner = {value_type(x) for x in v}
        return f"list[{inner.pop()}]" if len(inner) == 1 else "list"
    raise FilterError(f"unsupported metadata value {v!r} of type {type(v).__name__}")


def _scalar_of(field: str, op: str, v: Any) -> Scalar:
    if isinstance(v, float) and not math.isfinite(v):
        # Python's json reads NaN/Infinity; sent to a Qdrant server they serialise as null,
        # which would drop the bound and widen the search (docs/invariants.md, 3).
        raise FilterError(f"filter on '{field}' with '{op}': value {v!r} is not a finite number")
    if isinstance(v, (bool, int, float, str)):
        return v
    raise FilterError(
        f"filter on '{field}' with '{op}': value {v!r} is a {type(v).__name__}, "
        "expected a string, number or boolean"
    )


def parse_predicate(raw: Mapping[str, Any]) -> Predicate:
    """A predicate from its JSON form ``{"field": ..., "op": ..., "value": ...}``."""
    if not isinstance(raw, Mapping):
        raise FilterError(f"a filter must be an object with field, op and value, got {raw!r}")
    unknown = set(raw) - {"field", "op", "value"}
    if unknown:
        raise FilterError(f"unknown key(s) {sorted(unknown)} in filter; allowed: field, op, value")
    field, op = raw.get("field"), raw.get("op")
    if "value" not in raw:
        raise FilterError(f"filter {dict(raw)!r} has no 'value'")
    value = raw["value"]
    if not isinstance(field, str) or not FIELD_NAME_RE.match(field):
        raise FilterError(
            f"filter field {field!r} is not a valid field name (letters, digits, underscore)"
        )
    if op not in OPS:
        raise FilterError(f"unknown filter operator {op!r} on '{field}'; allowed: {', '.join(OPS)}")
    if op in LIST_OPS:
        if not isinstance(value, list) or not value:
            raise FilterError(f"'{op}' on '{field}' needs a non-empty list, got {value!r}")
        return Predicate(field, op, tuple(_scalar_of(field, op, v) for v in value))
    if op == "between":
        if not isinstance(value, list) or len(value) != 2:
            raise FilterError(f"'between' on '{field}' needs [low, high], got {value!r}")
        lo, hi = (_scalar_of(field, op, v) for v in value)
        if not _is_number(lo) or not _is_number(hi):
            raise FilterError(f"'between' on '{field}' needs two numbers, got {value!r}")
        if lo > hi:  # type: ignore[operator]
            raise FilterError(f"'between' on '{field}': low {lo} is greater than high {hi}")
        return Predicate(field, op, (lo, hi))
    v = _scalar_of(field, op, value)
    if op in RANGE_OPS and not _is_number(v):
        raise FilterError(f"'{op}' on '{field}' needs a number, got {value!r}")
    return Predicate(field, op, v)


def parse_predicate_text(text: str) -> Predicate:
    """``'FIELD OP VALUE'`` as typed on the command line.

    VALUE is read as JSON when it parses (``2021``, ``"2021"``, ``[2019, 2021]``), else as a
    string; for ``in``/``nin``/``between`` a comma-separated list is accepted too, bare or in
    brackets (``emea,apac`` or ``[emea, apac]``).
    """
    parts = text.strip().split(None, 2)
    if len(parts) != 3:
        raise FilterError(f"filter {text!r} is not 'FIELD OP VALUE' (e.g. 'period gte 2020')")
    field, op, raw = parts
    value: Any
    try:
        value = json.loads(raw)
        is_json = True
    except json.JSONDecodeError:
        value, is_json = raw, False
    if op in LIST_OPS + ("between",) and not isinstance(value, list):
        # Only text that is not JSON is a comma-separated list: '"EU,US"' is the one string EU,US.
        # Brackets around it are a list's, as JSON would have them: '[emea, apac]'.
        bare = raw[1:-1] if not is_json and raw.startswith("[") and raw.endswith("]") else raw
        items = [raw] if is_json else bare.split(",")
        value = []
        for item in items:
            try:
                value.append(json.loads(item.strip()))
            except json.JSONDecodeError:
                value.append(item.strip())
    return parse_predicate({"field": field, "op": op, "value": value})


def parse_filters(raw: Iterable[Mapping[str, Any]] | None) -> list[Predicate]:
    if raw is None:
        return []
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise FilterError(f"filters must be a list of {{field, op, value}} objects, got {raw!r}")
    return [parse_predicate(r) for r in raw]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_types(preds: Iterable[Predicate], field_types: Mapping[str, str]) -> None:
    """Refuse predicates whose field is unknown or whose value cannot match the field's type.

    ``field_types`` maps every metadata field present in the searched libraries to its type
    (see :func:`value_type`); a field seen with several types maps to ``"mixed"``.
    """
    known = {**BUILTIN_FIELDS, **field_types}
    for p in preds:
        ftype = known.get(p.field)
        if ftype is None:
            allowed = ", ".join(sorted(known)) or "(none)"
            raise FilterError(f"unknown filter field '{p.field}'; fields in these libraries: {allowed}")
        base = ftype[5:-1] if ftype.startswith("list[") else ftype
        values = p.value if isinstance(p.value, tuple) else (p.value,)
        if p.op in RANGE_OPS:
            if base not in ("int", "float", "mixed"):
                raise FilterError(
                    f"'{p.op}' on '{p.field}' needs a numeric field, but '{p.field}' holds {ftype}"
                )
            continue
        for v in values:
            if base == "mixed" or ftype == "list":
                continue
            if base in ("int", "float"):
                ok = _is_number(v) and (base == "float" or float(v).is_integer())
            elif base == "bool":
                ok = isinstance(v, bool)
            else:
                ok = isinstance(v, str)
            if not ok:
                raise FilterError(
                    f"filter on '{p.field}' compares with {v!r} ({type(v).__name__}), "
                    f"but '{p.field}' holds {ftype} values"
                )
        if base == "float" and p.op in ("eq", "ne", "in", "nin"):
            raise FilterError(
                f"'{p.op}' on float field '{p.field}' is not supported (exact float match); "
                "use gte/lte or between"
            )


def merge_field_types(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, str]:
    out = dict(a)
    for k, t in b.items():
        if k in out and out[k] != t:
            numeric = {"int", "float"}
            out[k] = "float" if {out[k], t} <= numeric else "mixed"
        else:
            out[k] = t
    return out
