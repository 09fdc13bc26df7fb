"""User-declared relations: parse a CSV or JSON file, validate it, turn it into a contribution.

CSV: a header with ``source,relation,target,provenance`` (any order) and optionally
``source_type,target_type,source_aliases,target_aliases``; aliases are separated by ``|``.
Rows are numbered as a spreadsheet shows them (the header is row 1). JSON: the same rows as a
list of objects (or ``{"relations": [...]}``), numbered from 1; aliases as a list or a
``|``-separated string.

Every problem is an error naming the row: unknown relation or type, empty field, an entity
related to itself, an alias given to two entities, and cycles in ``subsidiary_of`` or
``derived_from`` (listing the rows of the cycle).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragspine.graph._model import (
    ACYCLIC,
    CITE_DECLARED,
    DECLARABLE,
    ENTITY_TYPES,
    MAX_NAME_CHARS,
    RANK_DECLARED,
    RANK_EXPLICIT,
    RELATIONS,
    Contribution,
    EdgeSpec,
    NodeSpec,
    canonical,
    norm,
    normalize_relation,
    slug,
)
from ragspine.graph.errors import (
    RelationCycleError,
    RelationsFileError,
    RelationsTooLargeError,
    SelfLoopError,
    UnknownRelationError,
)

#: Largest relations file accepted, in bytes.
MAX_RELATIONS_BYTES = 16 * 1024 * 1024
#: Longest provenance text accepted, in characters.
MAX_PROVENANCE_CHARS = 2000
REQUIRED_COLUMNS: tuple[str, ...] = ("source", "relation", "target", "provenance")
OPTIONAL_COLUMNS: tuple[str, ...] = ("source_type", "target_type", "source_aliases", "target_aliases")
ALIAS_SEPARATOR = "|"
#: How a declared relation types its endpoints when the file gives no type, and how strongly:
#: a node that is the source of ``subsidiary_of`` is a subsidiary even if it is also a peer.
_INFERRED: dict[str, tuple[tuple[str, int], tuple[str, int]]] = {
    "subsidiary_of": (("subsidiary", 2), ("company", 1)),
    "peer_of": (("company", 1), ("company", 1)),
    "derived_from": (("metric", 2), ("metric", 2)),
}


@dataclass(frozen=True)
class DeclaredRow:
    row: int
    source: str
    relation: str
    target: str
    provenance: str
    source_type: str | None = None
    target_type: str | None = None
    source_aliases: tuple[str, ...] = ()
    target_aliases: tuple[str, ...] = ()


def parse_relations(data: bytes, filename: str) -> list[DeclaredRow]:
    """Rows of a relations file (CSV or JSON, told apart by extension, else by content)."""
    if len(data) > MAX_RELATIONS_BYTES:
        raise RelationsTooLargeError(
            f"the relations file is {len(data)} bytes; the limit is {MAX_RELATIONS_BYTES} bytes"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RelationsFileError(
            f"{filename}: not UTF-8 text (bad byte at offset {exc.start}); save the file as UTF-8"
        ) from None
    if not text.strip():
        raise RelationsFileError(f"{filename}: the file is empty; expected a CSV header "
                                 f"'{','.join(REQUIRED_COLUMNS)}' or a JSON list of rows")
    lower = filename.lower()
    is_json = lower.endswith(".json") or (not lower.endswith(".csv") and text.lstrip()[:1] in "[{")
    return _parse_json(text, filename) if is_json else _parse_csv(text, filename)


def _parse_csv(text: str, filename: str) -> list[DeclaredRow]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        records = list(reader)
    except csv.Error as exc:
        raise RelationsFileError(f"{filename} row {reader.line_num}: not valid CSV ({exc})") from None
    header = [h.strip().lower() for h in records[0]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    unknown = [h for h in header if h not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    dup = sorted({h for h in header if header.count(h) > 1})
    if missing or unknown or dup:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown column(s) {', '.join(unknown)}")
        if dup:
            parts.append(f"repeated column(s) {', '.join(dup)}")
        raise RelationsFileError(
            f"{filename} row 1 (header): {'; '.join(parts)}. Required: {', '.join(REQUIRED_COLUMNS)}; "
            f"optional: {', '.join(OPTIONAL_COLUMNS)}"
        )
    rows = []
    for n, rec in enumerate(records[1:], start=2):
        if not any(cell.strip() for cell in rec):
            continue  # blank line
        if len(rec) != len(header):
            raise RelationsFileError(
                f"{filename} row {n}: {len(rec)} fields, but the header has {len(header)}"
            )
        rows.append(_row(dict(zip(header, rec)), n, filename))
    return rows


def _parse_json(text: str, filename: str) -> list[DeclaredRow]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RelationsFileError(f"{filename}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(doc, Mapping):
        if set(doc) != {"relations"}:
            raise RelationsFileError(f"{filename}: a JSON object must have exactly one key, 'relations' "
                                     f"(a list of rows); got keys {sorted(doc)}")
        doc = doc["relations"]
    if not isinstance(doc, list):
        raise RelationsFileError(f"{filename}: expected a JSON list of rows, got {type(doc).__name__}")
    rows = []
    for n, item in enumerate(doc, start=1):
        if not isinstance(item, Mapping):
            raise RelationsFileError(f"{filename} row {n}: expected an object, got {type(item).__name__}")
        unknown = sorted(set(item) - set(REQUIRED_COLUMNS + OPTIONAL_COLUMNS))
        if unknown:
            raise RelationsFileError(
                f"{filename} row {n}: unknown key(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}"
            )
        rows.append(_row(item, n, filename))
    return rows


def _row(rec: Mapping[str, Any], n: int, filename: str) -> DeclaredRow:
    where = f"{filename} row {n}"

    def text(key: str, *, required: bool, limit: int = MAX_NAME_CHARS) -> str | None:
        v = rec.get(key)
        if v is None or (isinstance(v, str) and not v.strip()):
            if required:
                raise RelationsFileError(f"{where}: '{key}' is empty")
            return None
        if not isinstance(v, str):
            raise RelationsFileError(f"{where}: '{key}' must be a string, got {type(v).__name__}")
        v = v.strip()
        if len(v) > limit:
            raise RelationsFileError(f"{where}: '{key}' is {len(v)} characters; the limit is {limit}")
        return v

    def aliases(key: str) -> tuple[str, ...]:
        v = rec.get(key)
        if v is None:
            return ()
        items = v.split(ALIAS_SEPARATOR) if isinstance(v, str) else v
        if not isinstance(items, list | tuple) or not all(isinstance(a, str) for a in items):
            raise RelationsFileError(f"{where}: '{key}' must be a list of strings or '|'-separated text")
        out = []
        for a in items:
            a = a.strip()
            if not a:
                continue
            if len(a) > MAX_NAME_CHARS:
                raise RelationsFileError(f"{where}: alias {a[:40]!r}… is longer than {MAX_NAME_CHARS} characters")
            out.append(a)
        return tuple(out)

    def type_(key: str) -> str | None:
        t = text(key, required=False)
        if t is None:
            return None
        t = t.lower()
        if t not in ENTITY_TYPES:
            raise RelationsFileError(f"{where}: unknown {key} {t!r}; allowed: {', '.join(ENTITY_TYPES)}")
        return t

    raw_rel = text("relation", required=True)
    assert raw_rel is not None
    rel = normalize_relation(raw_rel)
    if rel not in DECLARABLE:
        why = (" (it is derived from documents and cannot be declared)" if rel in RELATIONS else "")
        raise UnknownRelationError(
            f"{where}: unknown relation {raw_rel!r}{why}; a relations file may declare "
            f"{', '.join(DECLARABLE)}"
        )
    return DeclaredRow(
        row=n,
        source=text("source", required=True) or "",
        relation=rel,
        target=text("target", required=True) or "",
        provenance=text("provenance", required=True, limit=MAX_PROVENANCE_CHARS) or "",
        source_type=type_("source_type"),
        target_type=type_("target_type"),
        source_aliases=aliases("source_aliases"),
        target_aliases=aliases("target_aliases"),
    )


def declared_contribution(
    rows: Sequence[DeclaredRow], filename: str, base: Contribution | None = None
) -> Contribution:
    """The ``declared`` source from validated rows, merged onto ``base`` (a previous upload)
    when given. Raises on alias conflicts, type conflicts, self-loops and cycles."""
    base = base or Contribution()
    # 1. Who is who: every alias first (so a row may name an entity by an alias declared in a
    # later row), then every name. A name that is an alias of another entity means that entity.
    ref: dict[str, tuple[str, str]] = {}  # norm(name or alias) -> (node id, where it was declared)
    names: dict[str, str] = {}
    aliases: dict[str, list[str]] = {}
    for spec in base.nodes:
        names.setdefault(spec.id, spec.name)
        aliases.setdefault(spec.id, [])
        for a in (spec.name, *spec.aliases):
            ref.setdefault(norm(a), (spec.id, "a previous upload"))
            if a != spec.name:
                aliases[spec.id].append(a)

    def owner(name: str) -> str:
        hit = ref.get(norm(name))
        return hit[0] if hit else slug(name)

    sides = [(r, name, al) for r in rows
             for name, al in ((r.source, r.source_aliases), (r.target, r.target_aliases))]
    for r, name, al in sorted(sides, key=lambda s: not s[2]):  # sides with aliases first
        nid = owner(name)
        names.setdefault(nid, name)
        ref.setdefault(norm(name), (nid, f"row {r.row}"))
        for a in al:
            prev = ref.get(norm(a))
            if prev is not None and prev[0] != nid:
                raise RelationsFileError(
                    f"{filename} row {r.row}: alias {a!r} of {name!r} already names "
                    f"{names.get(prev[0], prev[0])!r} ({prev[1]}); an alias may name one entity only"
                )
            ref[norm(a)] = (nid, f"row {r.row}")
            known = {norm(x) for x in aliases.setdefault(nid, [])} | {norm(names[nid])}
            if norm(a) not in known:
                aliases[nid].append(a)

    # 2. Types: explicit columns must agree; otherwise inferred from the relations.
    explicit: dict[str, tuple[str, str]] = {s.id: (s.type, "a previous upload") for s in base.nodes
                                            if s.rank >= RANK_EXPLICIT}
    inferred: dict[str, tuple[int, str]] = {s.id: (0, s.type) for s in base.nodes if s.rank < RANK_EXPLICIT}
    edges: list[EdgeSpec] = list(base.edges)
    for r in rows:
        u, v = owner(r.source), owner(r.target)
        if u == v:
            same = "" if norm(r.source) == norm(r.target) else f" ({r.source!r} and {r.target!r} name the same entity)"
            raise SelfLoopError(
                f"{filename} row {r.row}: {r.source!r} {r.relation} {r.target!r} relates an entity to itself{same}"
            )
        (su_t, su_w), (tv_t, tv_w) = _INFERRED[r.relation]
        for nid, given, (inf_t, inf_w) in ((u, r.source_type, (su_t, su_w)), (v, r.target_type, (tv_t, tv_w))):
            if given is not None:
                prev = explicit.get(nid)
                if prev is not None and prev[0] != given:
                    raise RelationsFileError(
                        f"{filename} row {r.row}: {names[nid]!r} is declared a {given}, but {prev[1]} "
                        f"declares it a {prev[0]}"
                    )
                explicit.setdefault(nid, (given, f"row {r.row}"))
            cur = inferred.get(nid)
            if cur is None or inf_w > cur[0]:
                inferred[nid] = (inf_w, inf_t)
        a, b = canonical(u, r.relation, v)
        edges.append(EdgeSpec(a, r.relation, b, {
            "kind": CITE_DECLARED, "provenance": r.provenance, "file": filename, "row": r.row,
        }))
    _check_acyclic(edges, names, filename)

    nodes = []
    for nid in sorted(names):
        if nid in explicit:
            t, rank = explicit[nid][0], RANK_EXPLICIT
        else:
            t, rank = inferred.get(nid, (0, "company"))[1], RANK_DECLARED
        nodes.append(NodeSpec(nid, names[nid], t, rank, tuple(aliases.get(nid, ()))))
    return Contribution(tuple(nodes), tuple(edges))


def declared_index(contrib: Contribution | None) -> dict[str, str]:
    """``norm(name or alias) → node id`` of the declared entities (metadata resolves against it)."""
    out: dict[str, str] = {}
    for spec in (contrib.nodes if contrib else ()):
        for a in (spec.name, *spec.aliases):
            out.setdefault(norm(a), spec.id)
    return out


def _check_acyclic(edges: Sequence[EdgeSpec], names: Mapping[str, str], filename: str) -> None:
    import networkx as nx

    for rel in ACYCLIC:
        g = nx.DiGraph()
        for e in edges:
            if e.relation == rel and not g.has_edge(e.source, e.target):
                g.add_edge(e.source, e.target, cite=e.citation)
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            continue
        steps = []
        for u, v in cycle:
            c = g.edges[u, v]["cite"]
            at = f"row {c.get('row')}" if c.get("file") == filename else f"row {c.get('row')} of {c.get('file')}"
            steps.append(f"{names.get(u, u)!r} {rel} {names.get(v, v)!r} ({at})")
        raise RelationCycleError(
            f"{filename}: {rel} relations form a cycle: " + "; ".join(steps)
            + f". {rel} must not loop back; remove or correct one of these rows"
        )
