"""bench/ingest_cores.py: its variants are read as written, and a malformed one is refused."""

from __future__ import annotations

import pytest

from bench_kit import load_bench

ic = load_bench("ingest_cores")


def test_variants_are_names_with_their_settings() -> None:
    got = ic.parse_variants("thread=RAGSPINE_RENDER_WORKERS=1, two=RAGSPINE_RENDER_WORKERS=2+RAGSPINE_OCR_WORKERS=1")
    assert got == {"thread": {"RAGSPINE_RENDER_WORKERS": "1"},
                   "two": {"RAGSPINE_RENDER_WORKERS": "2", "RAGSPINE_OCR_WORKERS": "1"}}
    assert ic.parse_variants("plain=") == {"plain": {}}


@pytest.mark.parametrize("bad", ["", "=X=1", "a=X", "a=X=1+Y"])
def test_a_malformed_variant_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit):
        ic.parse_variants(bad)
