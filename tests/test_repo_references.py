"""Comments and docstrings point only at what a reader of the repository has: files in it
(``docs/``), never at documents or issue numbers outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What a reader of the code cannot open: the outside design notes and tracker numbers.
OUTSIDE = re.compile(r"DESIGN\.md|\b[Ii]ssue \d+\b|\(invariant \d\)|\b[Ii]nvariant \d\b(?! \(docs/)")
DOC_REF = re.compile(r"\bdocs/[\w./-]+\.md\b")


def outside_references(text: str) -> list[str]:
    """Lines of ``text`` that point outside the repository."""
    out = []
    for line in text.splitlines():
        for m in OUTSIDE.finditer(line):
            if "docs/invariants.md" in line and m.group().lower().startswith("invariant"):
                continue  # "Invariant 2 (docs/invariants.md)" names the in-repo list
            out.append(line.strip())
    return out


def _sources() -> list[Path]:
    files = []
    for folder in ("src", "tests", "bench", "k8s", ".ci"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".yml", "")
                  and "__pycache__" not in p.parts and ".egg-info" not in str(p)]
    here = Path(__file__).resolve()  # its own examples are the point
    return [p for p in files if p.resolve() != here] + [ROOT / "Makefile", ROOT / "pyproject.toml", ROOT / "Dockerfile.gpu"]


def test_the_check_fires_on_outside_references() -> None:
    assert outside_references("# see DESIGN.md for the numbers") == ["# see DESIGN.md for the numbers"]
    assert outside_references("x = 1  # issue 4: at least 200") == ["x = 1  # issue 4: at least 200"]
    assert outside_references('"""never leaves (invariant 1)."""') == ['"""never leaves (invariant 1)."""']
    assert outside_references("# (docs/invariants.md, 1): never leaves") == []
    assert outside_references('"""Invariant 2 (docs/invariants.md): citations"""') == []
    assert outside_references("# see the issues tracker") == []


def test_no_comment_points_outside_the_repository() -> None:
    bad = {str(p.relative_to(ROOT)): lines for p in _sources() if p.is_file()
           for lines in [outside_references(p.read_text(errors="replace"))] if lines}
    assert not bad, bad


def test_every_docs_reference_resolves() -> None:
    refs = {m.group() for p in _sources() if p.is_file() for m in DOC_REF.finditer(p.read_text(errors="replace"))}
    refs |= {m.group() for m in DOC_REF.finditer((ROOT / "README.md").read_text())}
    assert refs, "the code points at docs/"
    missing = sorted(r for r in refs if not (ROOT / r).is_file())
    assert not missing, missing
