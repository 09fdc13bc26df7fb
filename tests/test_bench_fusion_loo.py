"""bench/fusion_loo.py: the leave-one-dataset-out choice and the recommendation rule, on toy
nDCG@10 tables worked out by hand (scores are multiples of 1/16, so every mean is exact)."""

from __future__ import annotations

from bench_kit import load_bench

fl = load_bench("fusion_loo")

DEFAULT = (1.0, 2.0)  # the old defaults
HALF = (0.5, 1.0)  # a multiple of the defaults: RRF ranks it the same, so it scores the same
PLAIN = (0.0, 1.0)  # the baseline
CHUNK = (1.0, 0.0)
TABLE = {
    "a": {DEFAULT: 0.5, HALF: 0.5, PLAIN: 0.375, CHUNK: 0.625},
    "b": {DEFAULT: 0.5, HALF: 0.5, PLAIN: 0.4375, CHUNK: 0.25},
    "c": {DEFAULT: 0.25, HALF: 0.25, PLAIN: 0.3125, CHUNK: 0.4375},
}
BASELINE = {s: scores[PLAIN] for s, scores in TABLE.items()}


def test_leave_one_out_picks_the_best_mean_of_the_other_sets() -> None:
    # Held out a: means over b, c are DEFAULT/HALF/PLAIN 0.375 (a tie: DEFAULT is nearest the
    # defaults), CHUNK 0.34375. Held out b: over a, c CHUNK 0.53125 beats 0.375. Held out c:
    # over a, b DEFAULT and HALF 0.5 (DEFAULT nearest), CHUNK 0.4375, PLAIN 0.40625.
    assert fl.leave_one_out(TABLE, DEFAULT) == {"a": DEFAULT, "b": CHUNK, "c": DEFAULT}


def test_ties_go_to_the_point_nearest_the_defaults() -> None:
    assert fl.choose(TABLE, ["c"], DEFAULT) == CHUNK
    assert fl.choose(TABLE, ["a", "b"], DEFAULT) == DEFAULT
    assert fl.choose(TABLE, ["a", "b"], HALF) == HALF


def test_recommend_keeps_only_points_at_or_above_the_baseline_everywhere() -> None:
    # DEFAULT is below the baseline on c, CHUNK on b: only the baseline itself qualifies.
    assert fl.recommend(TABLE, BASELINE, DEFAULT) == (PLAIN, True)
    # A point equal to the baseline on b and above it on a and c qualifies, with the best mean.
    better = (1.0, 3.0)
    table = {s: {**scores, better: v} for (s, scores), v in zip(TABLE.items(), (0.5625, 0.4375, 0.375))}
    assert fl.recommend(table, BASELINE, DEFAULT) == (better, True)


def test_without_a_qualifying_point_the_best_worst_case_wins() -> None:
    # Worst differences to this baseline: DEFAULT/HALF -0.25 (a), CHUNK -0.25 (b), PLAIN -0.375;
    # of the tied three CHUNK has the best mean (1.3125/3 against 1.25/3).
    assert fl.recommend(TABLE, {"a": 0.75, "b": 0.5, "c": 0.375}, DEFAULT) == (CHUNK, False)


def test_grid_and_ratio_classes() -> None:
    assert len(fl.grid("bm25")) == 17 and len(fl.grid("hybrid")) == 85
    assert len({fl.ratio_class(p) for p in fl.grid("bm25")}) == 9
    assert len({fl.ratio_class(p) for p in fl.grid("hybrid")}) == 61
    assert fl.ratio_class(HALF) == fl.ratio_class(DEFAULT) != fl.ratio_class((1.0, 3.0))


def test_a_subset_check_vetoes_a_point_below_the_baseline_there_without_entering_the_mean() -> None:
    better = (1.0, 3.0)
    table = {s: {**scores, better: v} for (s, scores), v in zip(TABLE.items(), (0.5625, 0.4375, 0.375))}
    # The long-report subset: `better` loses to the baseline there, DEFAULT does not.
    checks = {"c: long": {DEFAULT: 0.25, HALF: 0.25, PLAIN: 0.25, CHUNK: 0.125, better: 0.1875}}
    baseline = {**BASELINE, "c: long": 0.25}
    # Without the check `better` wins (above); with it only PLAIN qualifies (DEFAULT is below
    # the baseline on c). Had the subset been averaged in, better's mean would still be best.
    assert fl.recommend(table, baseline, DEFAULT, checks) == (PLAIN, True)
    assert fl.recommend(table, baseline, DEFAULT) == (better, True)


def test_check_table_reads_the_financial_reports_of_mmlongbench() -> None:
    res = {"mmlongbench_dev": {PLAIN: {"ndcg@10": 0.3, "by_document_type": {"Financial report": {"ndcg@10": 0.1}}},
                               DEFAULT: {"ndcg@10": 0.4, "by_document_type": {"Financial report": {"ndcg@10": 0.2}}}},
           "cranfield": {PLAIN: {"ndcg@10": 0.3}, DEFAULT: {"ndcg@10": 0.3}}}
    assert fl.check_table(res) == {"mmlongbench_dev: Financial report": {PLAIN: 0.1, DEFAULT: 0.2}}
    assert len(fl.grid("hybrid", (0.5, 1.0, 2.0))) == 51


def test_modes_are_refused_before_any_work_when_unknown_or_without_bm25(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    for modes, says in (("bm25,dense", "comma list of bm25, hybrid"), ("hybrid", "must include bm25")):
        monkeypatch.setattr("sys.argv", ["fusion_loo.py", "--modes", modes])
        with pytest.raises(SystemExit) as exc:
            fl.main()
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_finer_passage_weights_add_ratio_classes_and_must_keep_the_baseline_and_defaults(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    # c in {0, 0.25, 0.5, 1} x p in {0, 0.5, 1, 1.5, 2, 3}, not both 0: 23 points. c = 0.25 adds
    # the ratios c/p = 1/8 (p=2) and 1/12 (p=3) to the 9 classes of the default grid; its other
    # points are there already (p=0: passage alone; 1/2 = 0.5/1, 1/4 = 0.5/2, 1/6 = 0.5/3).
    points = fl.grid("bm25", chunk_weights=(0.0, 0.25, 0.5, 1.0))
    assert len(points) == 23 and len({fl.ratio_class(p) for p in points}) == 11
    # c=0 is the baseline, c=0.5 (p=2) today's BM25-alone default, c=1 (p=2, d=1) the hybrid one.
    for weights, says in (("0.25,0.5,1", "must include 0 ("), ("0,0.25,0.5", "must include 1 ("),
                          ("0,0.25,1", "must include 0.5 (")):
        monkeypatch.setattr("sys.argv", ["fusion_loo.py", "--chunk-weights", weights])
        with pytest.raises(SystemExit) as exc:
            fl.main()
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_rrf_k_is_a_grid_coordinate_that_ratio_classes_never_scale() -> None:
    # c in {0, 0.5, 1} x p in {1, 2} x d in {0.5, 1} = 12 weight points; (0, 2, 1) = 2 x (0, 1, 0.5)
    # and (1, 2, 1) = 2 x (0.5, 1, 0.5) are the only multiples: 10 classes, at each of two k.
    points = fl.grid("hybrid", (0.5, 1.0), (0.0, 0.5, 1.0), (1.0, 2.0), (60.0, 10.0))
    assert len(points) == 24 and len({fl.ratio_class(p) for p in points}) == 20
    assert fl.ratio_class((1.0, 2.0, 1.0, 10.0)) == (0.5, 1.0, 0.5, 10.0) == fl.ratio_class((0.5, 1.0, 0.5, 10.0))
    assert fl.ratio_class((1.0, 2.0, 1.0, 10.0)) != fl.ratio_class((1.0, 2.0, 1.0, 60.0))
    assert fl.label((1.0, 2.0, 1.0, 10.0)) == "c=1 p=2 d=1 k=10"
    values = fl.setting_values((1.0, 2.0, 1.0, 10.0), "hybrid")
    assert values == {"bm25_chunk_weight": 1.0, "bm25_page_weight": 2.0, "dense_weight": 1.0, "rrf_k_dense": 10,
                      "dense_fusion": "rrf"}
    assert isinstance(values["rrf_k_dense"], int)
    assert fl.setting_values((0.5, 2.0), "bm25") == {"bm25_chunk_weight": 0.5, "bm25_page_weight": 2.0}


def test_the_convex_grid_sets_the_convex_weights_and_its_ratio_classes_merge_multiples() -> None:
    # passage {0, 0.1, 0.2} x page {0.2, 0.4} x dense {0.4}: 6 points; (0, 0.2, 0.4) and (0, 0.4, 0.4)
    # are not multiples, (0.1, 0.2, 0.4) and (0.2, 0.4, 0.4) are not either (dense fixed), so 6
    # classes; with dense {0.2, 0.4}, (0.1, 0.2, 0.2) = (0.2, 0.4, 0.4) / 2 and (0, 0.2, 0.2) =
    # (0, 0.4, 0.4) / 2 merge: 12 points, 10 classes.
    one = fl.grid("convex", convex=((0.0, 0.1, 0.2), (0.2, 0.4), (0.4,)))
    assert len(one) == 6 and len({fl.ratio_class(p) for p in one}) == 6
    two = fl.grid("convex", convex=((0.0, 0.1, 0.2), (0.2, 0.4), (0.2, 0.4)))
    assert len(two) == 12 and len({fl.ratio_class(p) for p in two}) == 10
    assert fl.grid("convex", convex=((0.0,), (0.0, 0.5), (0.4,))) == [(0.0, 0.5, 0.4)]  # passage and page not both 0
    assert fl.setting_values((0.1, 0.5, 0.4), "convex") == {
        "convex_passage_weight": 0.1, "convex_page_weight": 0.5, "convex_dense_weight": 0.4, "dense_fusion": "convex"}


def test_grid_lists_must_hold_the_baseline_and_the_defaults(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    full = ((0.0, 0.5, 1.0), (1.0, 2.0), (1.0,), (10.0,))
    assert fl.grid_lists_missing(*full) == []
    # the convex defaults are passage 0.2, page 0.4, dense 0.4
    assert fl.grid_lists_missing(*full, ((0.0, 0.2), (0.4, 0.5), (0.3,))) == [
        "--convex-dense must include 0.4 (the baseline and the defaults); got 0.3"]
    # the defaults are c=0.5 p=2 (bm25) and c=1 p=2 d=1 k=10 (hybrid); the baseline c=0 p=1
    assert fl.grid_lists_missing((0.0, 0.5, 1.0), (2.0,), (0.5,), (60.0,)) == [
        "--page-weights must include 1 (the baseline and the defaults); got 2",
        "--dense-weights must include 1 (the baseline and the defaults); got 0.5",
        "--rrf-ks must include 10 (the baseline and the defaults); got 60"]
    for flag, value, says in (("--rrf-ks", "60,20", "--rrf-ks must include 10"),
                              ("--rrf-ks", "10,7.5", "--rrf-ks takes integers >= 1"),
                              ("--rrf-ks", "10,0", "--rrf-ks takes integers >= 1"),
                              ("--page-weights", "1,x", "not a comma list of numbers"),
                              ("--page-weights", "1.5,2", "--page-weights must include 1"),
                              ("--convex-passage", "0,0.1", "--convex-passage must include 0.2"),
                              ("--convex-page", "0.4,y", "not a comma list of numbers")):
        monkeypatch.setattr("sys.argv", ["fusion_loo.py", flag, value])
        with pytest.raises(SystemExit) as exc:
            fl.main()
        assert exc.value.code == 2 and says in capsys.readouterr().err, (flag, value)


def test_every_grid_point_varies_only_query_time_settings() -> None:
    # evaluate_variants refuses any other setting over one index (the convex keys were once missing)
    from ragspine.evaluation import QUERY_TIME_SETTINGS

    for mode in fl.MODES:
        for point in fl.grid(mode, rrf_ks=(10.0, 60.0)):
            assert set(fl.setting_values(point, mode)) <= QUERY_TIME_SETTINGS, (mode, point)
