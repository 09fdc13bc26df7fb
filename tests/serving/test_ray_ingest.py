"""Bulk ingest on Ray Data (``ragspine ingest --engine ray``) on CPU Ray with a tiny page model:
the same index as a local ingest, RESTRICTED pages never encoded, restarts skip unchanged work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.data", reason="needs ragspine[serve]")
pytest.importorskip("colpali_engine", reason="needs ragspine[gpu] for the tiny page model")

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import ray_kit  # noqa: E402
from pdfs import Page, make_pdf  # noqa: E402
from serving_kit import clean_settings  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

LIB = "bulk"


def _corpus(folder: Path) -> list[Path]:
    folder.mkdir()
    docs = {
        "growth.pdf": make_pdf(["Revenue grew by twelve percent in Asia.", "Costs fell in Europe."]),
        "mixed.pdf": make_pdf([
            "Market share of mobile operators by region.",
            Page(["Secret merger plan."], header="RESTRICTED"),
            "Quarterly sales by region, with Asia leading.",
        ]),
        "secret.pdf": make_pdf([Page(["Everything here is classified."], footer="RESTRICTED")]),
    }
    for name, data in docs.items():
        (folder / name).write_bytes(data)
    return sorted(folder.glob("*.pdf"))


def _rankings(engine, queries: list[str]) -> list[list[tuple]]:  # type: ignore[no-untyped-def]
    out = []
    for q in queries:
        res = engine.search({"query": q, "libraries": [LIB], "mode": "hybrid", "top_k": 10})
        assert not res.degraded, res.degraded_reasons
        out.append([(h.doc_id, h.page, h.chunk_id, round(h.scores["fused"], 9),
                     round(h.scores["visual"] or 0.0, 5)) for h in res.hits])
    return out


def test_bulk_ingest_matches_local_and_skips_unchanged(tmp_path: Path) -> None:
    from ragspine.engine import Engine
    from ragspine.serving.ray_ingest import bulk_ingest

    model = ray_kit.tiny_models(tmp_path / "tiny", "colpali")["colpali"]
    paths = _corpus(tmp_path / "pdfs")
    kw = {"page_model": str(model), "device": "cpu", "reranker": "none"}
    ray_settings = clean_settings(data_dir=tmp_path / "ray", **kw)
    local_settings = clean_settings(data_dir=tmp_path / "local", **kw)
    lines: list[str] = []

    with ray_kit.local_ray(num_cpus=2):
        report = bulk_ingest(ray_settings, LIB, paths, {}, encoders=1, batch_size=4,
                             echo=lines.append, progress=False)
        assert (report.indexed, report.dropped, report.failed) == (2, 1, 0), lines
        # 6 pages in all; the two RESTRICTED pages were never rendered or encoded.
        assert report.pages_encoded == 4
        assert 0 < report.encoder_busy_fraction <= 1.0
        assert report.encoder_only_pages_per_s >= report.end_to_end_pages_per_s > 0
        again = bulk_ingest(ray_settings, LIB, paths, {}, echo=lines.append, progress=False)
        assert (again.unchanged, again.indexed, again.pages_encoded) == (2, 0, 0), lines

    local = Engine(local_settings)
    try:
        local.create_library(LIB)
        for p in paths:
            local.ingest(LIB, p)
        bulk = Engine(ray_settings)  # the bulk-built index, searched with the local models
        try:
            docs = {d["doc_id"]: d for d in bulk.documents(LIB)}
            assert docs["mixed"]["pages_dropped"] == [2] and docs["mixed"]["page_numbers"] == [1, 3]
            assert set(docs) == {d["doc_id"] for d in local.documents(LIB)} == {"growth", "mixed"}
            queries = ["revenue Asia", "market share operators", "secret merger"]
            assert _rankings(bulk, queries) == _rankings(local, queries)
        finally:
            bulk.close()
    finally:
        local.close()


def test_bulk_ingest_reads_pixels_once_and_drops_stamped_pages_before_encoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import scans
    from scans import RED, Line, ScanPage

    from ragspine.engine import Engine
    from ragspine.indexing.ocr import OcrStage
    from ragspine.serving.ray_ingest import bulk_ingest

    model = ray_kit.tiny_models(tmp_path / "tiny", "colpali")["colpali"]
    folder = tmp_path / "pdfs"
    folder.mkdir()
    (folder / "scanned.pdf").write_bytes(scans.scan_pdf([
        ScanPage([Line("Container volumes doubled", y=240)]),
        ScanPage([Line("Harbour tender figures", y=240), Line("RESTRICTED", x=200, y=450, size=40, color=RED)]),
        ScanPage([Line("Dredging finished early", y=240)]),
    ]))
    paths = sorted(folder.glob("*.pdf"))
    kw = {"page_model": str(model), "device": "cpu", "reranker": "none", "page_render_dpi": 36}
    ray_settings = clean_settings(data_dir=tmp_path / "ray", **kw)
    lines: list[str] = []

    def no_second_reading(*a: object, **k: object) -> None:
        raise AssertionError("the writer read the pixels again")

    with ray_kit.local_ray(num_cpus=2):
        monkeypatch.setattr(OcrStage, "apply", no_second_reading)  # the driver's; Ray workers read
        report = bulk_ingest(ray_settings, LIB, paths, {}, encoders=1, batch_size=4,
                             echo=lines.append, progress=False)
        monkeypatch.undo()
    assert (report.indexed, report.failed, report.pages_encoded) == (1, 0, 2), lines

    local = Engine(clean_settings(data_dir=tmp_path / "local", **kw))
    bulk = Engine(ray_settings)
    try:
        local.create_library(LIB)
        local.ingest(LIB, paths[0])
        for eng in (bulk, local):
            doc = eng.documents(LIB)[0]
            assert (doc["pages_dropped"], doc["page_numbers"]) == ([2], [1, 3])
            hit = eng.search({"query": "container volumes", "libraries": [LIB], "mode": "bm25"}).hits[0]
            assert (hit.page, hit.text_source) == (1, "ocr")
        queries = ["container volumes", "dredging", "harbour tender"]
        assert _rankings(bulk, queries) == _rankings(local, queries)
    finally:
        bulk.close()
        local.close()


def test_the_ocr_stage_reads_a_documents_pixels_and_passes_a_bad_pdf_on_as_an_error(tmp_path: Path) -> None:
    import json

    import scans
    from scans import Line, ScanPage

    from ragspine.serving.ray_ingest import read_pixels, render_pages

    good = tmp_path / "scan.pdf"
    good.write_bytes(scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])]))
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.7 not really")
    overrides = {"data_dir": str(tmp_path / "data")}
    row = read_pixels({"idx": 0, "path": str(good), "meta": "{}"}, overrides)
    lines = json.loads(row["ocr_json"])
    assert row["error"] == "" and list(lines) == ["1"]
    assert "container volumes doubled" in " ".join(t for t, _ in lines["1"]).lower()
    (page,) = render_pages(row, overrides)  # the lines join the page: it is kept and rendered
    assert (page["page"], page["error"]) == (1, "") and json.loads(page["ocr"]) == lines["1"]
    broken = read_pixels({"idx": 1, "path": str(bad), "meta": "{}"}, overrides)
    assert broken["error"] and broken["ocr_json"] == "{}"
    (out,) = render_pages(broken, overrides)
    assert out["error"] == broken["error"] and out["page"] == 0
