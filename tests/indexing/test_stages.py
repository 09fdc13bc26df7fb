"""Where an ingest spends its time (``ragspine.indexing.stages``): every written version reports
its stages, they cover the ingesting thread's time, the slow stage is named as the bound, and
``ragspine ingest`` and ``/metrics`` show them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pdfs
import pytest
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.indexing.stages import STAGES, THREAD_STAGES, bound, summary
from ragspine.models.base import EncodedPage
from ragspine.models.modelset import ModelSet

PAGES = [f"Page {i} of the harbour report: revenue, tonnage and berths." for i in range(1, 13)]


class SlowPages:
    """A page model that takes ``delay`` seconds a batch."""

    model_id, revision, dim = "test/slow-pages", "1", 16

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
        time.sleep(self.delay)
        v = np.eye(4, 16, dtype=np.float32)
        return [EncodedPage(v, np.ones(4, dtype=bool), (2, 2)) for _ in images]

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.eye(2, 16, dtype=np.float32) for _ in texts]


def ingest(tmp_path: Path, models: ModelSet | None = None, **kw: Any) -> Any:
    # OCR off: parsing stays small beside the slow stage each test makes.
    eng = Engine(Settings(data_dir=tmp_path / "data", dense_model="none", reranker="none", ocr="off", **kw),
                 models=models)
    try:
        eng.create_library("lib")
        pdf = tmp_path / "report.pdf"
        pdf.write_bytes(pdfs.make_pdf(PAGES))
        return eng, eng.ingest("lib", pdf, {"doc_id": "report"})
    except BaseException:
        eng.close()
        raise


def test_a_written_version_reports_every_stage_and_they_cover_its_time(tmp_path: Path) -> None:
    eng, r = ingest(tmp_path)
    try:
        assert set(r.stages) == set(STAGES)
        assert all(v >= 0 for v in r.stages.values())
        thread = sum(r.stages[k] for k in THREAD_STAGES)
        assert thread <= r.seconds + 1e-3 and thread >= 0.7 * r.seconds, (thread, r.seconds)
        # An unchanged ingest wrote nothing: no stages.
        again = eng.ingest("lib", tmp_path / "report.pdf", {"doc_id": "report"})
        assert again.status == "unchanged" and again.stages == {}
    finally:
        eng.close()


def test_a_slow_encoder_is_named_the_bound(tmp_path: Path) -> None:
    eng, r = ingest(tmp_path, ModelSet(page=SlowPages(0.5)), page_batch_size=3, page_vector_dtype="float32")
    try:
        # 12 pages in batches of 3, each batch sleeping 0.5 s on the encode thread; the ingesting
        # thread waits for all but what overlapped its own points (the first batch at least).
        assert r.stages["encode"] >= 4 * 0.5 and r.stages["encode_wait"] >= 0.5
        assert bound(r.stages) == "encode_wait"
    finally:
        eng.close()


def test_a_slow_store_is_named_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = Engine(Settings(data_dir=tmp_path / "data", dense_model="none", reranker="none", page_batch_size=3,
                          page_vector_dtype="float32", ocr="off"), models=ModelSet(page=SlowPages(0.0)))
    try:
        eng.create_library("lib")
        real = eng.store.upsert

        def slow(name: str, points: Any) -> None:
            time.sleep(0.5)
            real(name, points)

        monkeypatch.setattr(eng.store, "upsert", slow)
        pdf = tmp_path / "report.pdf"
        pdf.write_bytes(pdfs.make_pdf(PAGES))
        r = eng.ingest("lib", pdf, {"doc_id": "report"})
        # Every batch's write sleeps 0.5 s while encoding is instant: the encoder waits for each.
        assert r.stages["write"] >= 4 * 0.5 and r.stages["write_wait"] >= 3 * 0.5
        assert bound(r.stages) == "write_wait"
    finally:
        eng.close()


def test_the_summary_names_shares_and_the_bound() -> None:
    times = {"parse": 1.0, "render_wait": 0.5, "encode_wait": 1.5, "points": 0.5, "write_wait": 0.25, "commit": 0.25,
             "encode": 2.5, "write": 0.8}
    assert summary(times) == ("time by stage: parse 25%, render wait 12%, encode wait 38%, points 12%, write wait 6%, "
                              "commit 6% (encode thread 2.5 s (busy 91% of the pages' time), writer thread 0.8 s): "
                              "encode_wait bounds it")
    assert bound({}) is None and summary({}) == "no stage timed"


def test_ragspine_ingest_prints_the_bound_and_metrics_count_the_stages(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient
    from ragspine.cli.main import main
    from ragspine.serving.app import create_app

    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(pdfs.make_pdf(PAGES))
    data = tmp_path / "cli"
    assert main(["--data-dir", str(data), "ingest", str(pdf), "--library", "lib"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("time by stage:"))
    assert line.strip().endswith("bounds it") and "parse" in line and "commit" in line
    with TestClient(create_app(Settings(data_dir=tmp_path / "srv", dense_model="none"))) as c:
        assert c.post("/v1/libraries", json={"name": "lib"}).status_code == 201
        r = c.post("/v1/libraries/lib/documents", params={"wait": "true"},
                   files={"file": ("report.pdf", pdf.read_bytes(), "application/pdf")})
        assert r.status_code == 201, r.text
        stages = r.json()["result"]["stages"]
        assert set(stages) == set(STAGES)
        text = c.get("/metrics").text
        parse = next(float(x.split()[-1]) for x in text.splitlines()
                     if x.startswith('ragspine_ingest_stage_seconds_total{stage="parse"}'))
        assert parse == pytest.approx(stages["parse"], abs=1e-3)
