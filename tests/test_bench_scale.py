"""bench/scale.py at a tiny size: the figures it reports have the expected shape, its numpy
exhaustive MaxSim top 10 is the brute force worked out here with ragspine's own ``maxsim``, and
the fast path finds it all when the first stage's candidates cover the whole library (40 pages <
100, MUVERA's default)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench_kit import load_bench
from ragspine.scoring.multivector import maxsim

# The page-model path renders PIL images: Pillow comes with the gpu extra (which `make test`
# requires; see tests/conftest.py).
pytest.importorskip("PIL")

sc = load_bench("scale")

N, QUERIES, PER_PDF = 40, 3, 10
TINY = {"page_render_dpi": 36, "thumbnail_dpi": 36}  # small renders: the vectors ignore them anyway


def test_workload_pages_are_unit_colpali_shaped_and_planted_pages_score_in_grades() -> None:
    w = sc.Workload(seed=1, n_queries=2, plant_within=30)
    p = w.page(5)
    assert p.shape == (1030, 128) and p.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(w.page(5), p)  # a pure function of the seed and the index
    # Query 0's planted pages, best first: 20, 19, ... 11 planted tokens, above every other page.
    scores = [maxsim(w.queries[0], w.page(k)) for k in range(30)]
    planted = w.planted[0]
    assert sorted(range(30), key=lambda k: -scores[k])[:10] == planted
    with pytest.raises(ValueError, match="need at least"):
        sc.Workload(seed=1, n_queries=4, plant_within=30)


def test_tiny_run_reports_every_figure_and_recall_is_exact(tmp_path: Path) -> None:
    lines: list[str] = []
    result = sc.run_scale([N], n_queries=QUERIES, pages_per_pdf=PER_PDF, baseline_queries=1, store_only=N,
                          optimize=True, prefetch_sweep=[10, 50], data_dir=tmp_path / "data", settings_overrides=TINY, log=lambda *a: lines.append(" ".join(map(str, a))))
    sc.print_summary(result, log=lambda *a: lines.append(" ".join(map(str, a))))
    json.dumps(result, default=float)  # what --json writes

    (row,) = result["sizes"]
    assert row["pages"] == N and row["pages_added"] == N and row["pages_ocr"] == 0
    assert row["ingest_pages_per_s"] > 0 and row["disk_kb_per_page"] > 0 and row["stored_vectors_checked"] >= 3
    assert {"parse", "first stage (MUVERA / pool)", "render thumbnail", "render model image",
            "store upsert"} <= set(row["ingest_stages"])
    assert row["first_stage"] == "muvera" and row["prefetch_limit"] == 100 and row["optimize_seconds"] >= 0
    for mode in ("vector", "hybrid"):
        s = row["search"][mode]
        assert len(s["latencies_ms"]) == QUERIES and 0 < s["p50_ms"] <= s["p99_ms"]
        assert 0 < s["store_share"] <= 1
    assert row["search"]["store_exhaustive"]["agrees_with_numpy_at_10"] == 1.0
    assert row["planted_in_exact_top10"] == 1.0
    # 40 pages < the 100 candidates: the fast path is exact, so recall@10 must be 1.
    assert row["search"]["recall_at_10"] == 1.0
    sweep = row["prefetch_sweep"]
    assert set(sweep) == {"10", "50"} and sweep["50"]["recall_at_10"] == 1.0 and sweep["10"]["p50_ms"] > 0

    # The bench's exhaustive top 10 against a brute force over every page, query by query.
    w = sc.Workload(seed=0, n_queries=QUERIES, plant_within=N)
    pages = [w.page(k) for k in range(N)]
    for i in range(QUERIES):
        scores = [maxsim(w.queries[i], p) for p in pages]
        brute = sorted(range(N), key=lambda k: (-scores[k], k))[:10]
        assert row["exact_top10"][i] == brute

    so = result["store_only"]
    assert so["pages"] == N and so["stored_vectors_checked"] >= 3 and so["optimize_seconds"] >= 0
    assert so["search"]["recall_at_10"] == 1.0 and so["exact_top10"] == row["exact_top10"]
    assert any("summary" in line for line in lines) and any("recall@10" in line for line in lines)
