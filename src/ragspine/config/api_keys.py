"""The format of RAGSPINE_API_KEYS: which key may search which libraries."""

from __future__ import annotations


def parse_api_keys(text: str) -> dict[str, frozenset[str]]:
    """Parse ``"KEY1=lib-a,lib-b;KEY2=*"``; raises ValueError naming the bad entry."""
    out: dict[str, frozenset[str]] = {}
    for n, entry in enumerate(e for e in text.split(";") if e.strip()):
        key, sep, libs = entry.partition("=")
        key = key.strip()
        names = frozenset(x.strip() for x in libs.split(",") if x.strip())
        if not sep or len(key) < 8 or not names:
            raise ValueError(
                f"api_keys entry {n + 1} is not 'KEY=lib1,lib2' with a key of 8+ characters "
                "and at least one library (or '*')"
            )
        out[key] = names
    return out
