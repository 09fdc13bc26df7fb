"""The formats of API keys: which key may read which libraries, and through which filter.

``RAGSPINE_API_KEYS`` holds entries separated by ``;``::

    KEY=lib-a,lib-b                      the whole of two libraries
    KEY=*                                every library
    KEY=filings(region in [emea]),public  filings, only where region is emea; all of public
    KEY=filings(region in [emea] & year gte 2020)
    KEY=*(project eq atlas)              every library, only the documents of project atlas

A filter is one or more ``FIELD OP VALUE`` conditions joined by ``&`` (the CLI's ``--filter``
language). ``RAGSPINE_API_KEYS_FILE`` names a JSON file for anything longer, for values holding
``;``, ``&`` or parentheses, and for keys stored as SHA-256 digests instead of secrets::

    {"keys": [{"name": "sales-emea", "sha256": "<hex digest of the key>",
               "libraries": {"filings": ["region in [emea]"], "public": []}},
              {"key": "a-secret-of-8+-chars", "libraries": {"*": [{"field": "project", "op": "eq",
                                                                   "value": "atlas"}]}}]}

This module checks the shape only and returns each filter as written: the filter language
belongs to the store layer, and the server parses it (:mod:`ragspine.serving.auth`), failing at
start when a condition is not valid.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A condition as written: ``"FIELD OP VALUE"`` text or a ``{"field", "op", "value"}`` object.
Condition = str | dict[str, Any]
MIN_KEY_CHARS = 8
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class KeyEntry:
    """One key: its SHA-256 digest (the secret itself is not kept), a name for logs and job
    ownership (never the secret), and per library (or ``*``) the conditions that bound what it
    reads (none: the whole library)."""

    digest: str
    name: str
    libraries: dict[str, tuple[Condition, ...]] = field(default_factory=dict)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses and brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _library_item(item: str, where: str) -> tuple[str, tuple[Condition, ...]]:
    item = item.strip()
    name, paren, rest = item.partition("(")
    name = name.strip()
    if not paren:
        return name, ()
    if not rest.endswith(")") or not rest[:-1].strip():
        raise ValueError(f"{where}: library '{name}' has a filter that is not '(FIELD OP VALUE & ...)'")
    conds = tuple(c.strip() for c in rest[:-1].split("&"))
    if any(not c for c in conds):
        raise ValueError(f"{where}: library '{name}' has an empty condition between '&'")
    return name, conds


def parse_api_keys(text: str) -> dict[str, KeyEntry]:
    """Parse ``RAGSPINE_API_KEYS`` (see the module): digest -> entry. Raises ValueError naming
    the bad entry (by number: the secret is never repeated)."""
    out: dict[str, KeyEntry] = {}
    for n, entry in enumerate(e for e in text.split(";") if e.strip()):
        where = f"api_keys entry {n + 1}"
        key, sep, libs = entry.partition("=")
        key = key.strip()
        if not sep or len(key) < MIN_KEY_CHARS or not libs.strip():
            raise ValueError(
                f"{where} is not 'KEY=lib1,lib2' with a key of {MIN_KEY_CHARS}+ characters "
                "and at least one library (or '*')"
            )
        if libs.count("(") != libs.count(")"):
            raise ValueError(f"{where}: unbalanced parentheses")
        grants: dict[str, tuple[Condition, ...]] = {}
        for item in _split_top(libs, ","):
            if not item.strip():
                continue
            name, conds = _library_item(item, where)
            _add(grants, name, conds, where)
        d = digest(key)
        out[d] = KeyEntry(d, f"key-{d[:8]}", grants)
    return out


def _add(grants: dict[str, tuple[Condition, ...]], name: str, conds: tuple[Condition, ...], where: str) -> None:
    if not name:
        raise ValueError(f"{where}: a library name is empty")
    if name in grants:
        raise ValueError(f"{where}: library '{name}' is listed twice")
    grants[name] = conds


def read_keys_file(path: Path) -> dict[str, KeyEntry]:
    """Parse ``RAGSPINE_API_KEYS_FILE`` (see the module): digest -> entry. Raises ValueError
    naming the file and the bad entry."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"the API keys file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the API keys file {path} is not readable JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list) or set(raw) - {"keys"}:
        raise ValueError(f"the API keys file {path} must be an object {{\"keys\": [...]}}")
    out: dict[str, KeyEntry] = {}
    names: set[str] = set()
    for n, e in enumerate(raw["keys"]):
        where = f"{path}: key {n + 1}"
        if not isinstance(e, dict) or set(e) - {"key", "sha256", "name", "libraries"}:
            raise ValueError(f"{where} must be an object with key or sha256, libraries and an optional name")
        if ("key" in e) == ("sha256" in e):
            raise ValueError(f"{where} needs exactly one of 'key' and 'sha256'")
        if "key" in e:
            if not isinstance(e["key"], str) or len(e["key"].strip()) < MIN_KEY_CHARS:
                raise ValueError(f"{where}: 'key' must be a string of {MIN_KEY_CHARS}+ characters")
            d = digest(e["key"].strip())
        else:
            d = str(e["sha256"]).strip().lower()
            if not _HEX64.match(d):
                raise ValueError(f"{where}: 'sha256' must be 64 hexadecimal digits")
        name = e.get("name", f"key-{d[:8]}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: 'name' must be a non-empty string")
        if name in names or d in out:
            raise ValueError(f"{where}: name '{name}' or its key is listed twice")
        libs = e.get("libraries")
        if not isinstance(libs, dict) or not libs:
            raise ValueError(f"{where}: 'libraries' must map at least one library (or '*') to its conditions")
        grants: dict[str, tuple[Condition, ...]] = {}
        for lib, conds in libs.items():
            conds = [] if conds is None else conds
            if not isinstance(conds, list) or not all(isinstance(c, (str, dict)) for c in conds):
                raise ValueError(f"{where}: library '{lib}' must map to a list of conditions "
                                 "('FIELD OP VALUE' or {field, op, value})")
            _add(grants, str(lib).strip(), tuple(conds), where)
        names.add(name)
        out[d] = KeyEntry(d, name, grants)
    return out
