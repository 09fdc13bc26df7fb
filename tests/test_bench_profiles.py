"""bench/profiles.py: a folder's profiles, with the pages that print a number other than their place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pdfs
from bench_kit import load_bench
from pdfs import Page

bp = load_bench("profiles")


def test_it_counts_the_printed_page_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # a cover without a number, then pages printing 1..4: 4 pages print a number other than their place
    shifted = [Page(["Cover of the report."])] + [Page([f"Body text of part {n}."], footer=str(n)) for n in range(1, 5)]
    (tmp_path / "shifted.pdf").write_bytes(pdfs.make_pdf(shifted))
    (tmp_path / "plain.pdf").write_bytes(pdfs.make_pdf([Page(["Only page."])]))
    monkeypatch.setattr(sys, "argv", ["profiles.py", str(tmp_path)])
    assert bp.main() == 0
    out = capsys.readouterr().out
    assert "2 documents:" in out
    assert "(4 pages of 1 documents print a number other than their place)" in out
    assert "printed   4" in out and "printed   0" in out
