"""bench/first_stage.py at a tiny size: configurations parse (and a bad one is named), the
encodings are ragspine's MUVERA of bench/scale.py's pages and the exact top 10 is worked out by
numpy MaxSim, and when the candidates cover every page each configuration finds the whole
exhaustive top 10."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench_kit import load_bench
from ragspine.scoring.multivector import maxsim
from ragspine.scoring.muvera import Muvera, MuveraParams

fs = load_bench("first_stage")


def test_configurations_parse_and_a_bad_one_is_named() -> None:
    assert fs.parse_config("turbo4x4")["oversampling"] == 4.0
    assert fs.parse_config("int8")["oversampling"] == 2.0 and fs.parse_config("int8")["bits"] == 8
    assert fs.parse_config("f16")["quant"] is None
    assert fs.parse_config("bin1.5-q8x8")["bits"] == 1.5
    with pytest.raises(ValueError, match="unknown configuration 'turbo3'"):
        fs.parse_config("turbo3")
    for bad in (["--configs", "int9"], ["--candidates", "0"], ["--candidates", "ten"], ["--repeats", "0"],
                ["--pages", "10"]):
        with pytest.raises(SystemExit) as exc:
            fs.main(bad)
        assert exc.value.code == 2, bad  # argparse's usage error, before any work


def test_tiny_run_finds_the_exhaustive_top_10_when_every_page_is_a_candidate(tmp_path: Path) -> None:
    n = 60
    workload = fs.Workload(0, 3, n, run=1)
    fde, exact, enc = fs.encodings(workload, n, tmp_path / "cache")
    assert fde.shape == (n, 10240)
    np.testing.assert_allclose(fde[7], Muvera(MuveraParams(dim=128)).document(workload.page(7)), rtol=1e-6)
    want = [sorted(range(n), key=lambda k: (-maxsim(q, workload.page(k)), k))[:10] for q in workload.queries]
    assert exact == want
    again, exact2, _ = fs.encodings(workload, n, tmp_path / "cache")  # read back from the cache
    np.testing.assert_array_equal(again, fde)
    assert exact2 == exact and len(list((tmp_path / "cache").iterdir())) == 1
    queries = np.stack([enc.query(q) for q in workload.queries])
    for name in ("f16", "int8x2", "turbo2x4", "bin1-q8x8"):
        row = fs.measure(fs.parse_config(name), fde, queries, exact, [n], tmp_path / "shards", repeats=1)
        assert row[str(n)]["recall"] == 1.0 and row[str(n)]["p50_ms"] > 0, name
