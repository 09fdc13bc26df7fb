"""bench/encode_overlap.py runs end to end on a small PDF, each variant ingesting every page, and
its device-shaped encoder prepares pages as ColPali's processor does and answers one page each."""

from __future__ import annotations

import re
from pathlib import Path

import pdfs
import pytest

from bench_kit import load_bench

pytest.importorskip("transformers")
eo = load_bench("encode_overlap")


def test_the_device_shaped_encoder_prepares_448_squares_and_answers_every_page() -> None:
    from PIL import Image

    enc = eo.DeviceShapedEncoder(rate=10_000, prep_threads=1, batch_size=2)
    images = [Image.new("RGB", (300, 400), (i * 40, 0, 0)) for i in range(3)]
    prepared = enc.prepare_pages(images)
    assert [b.shape for b in prepared.batches] == [(2, 3, 448, 448), (1, 3, 448, 448)]
    pages = enc.encode_prepared(prepared)
    assert len(pages) == 3 and all(p.vectors.shape == (1030, 128) for p in pages)


def test_every_variant_ingests_every_page(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "documents"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(pdfs.make_pdf([f"Page {i} of the tonnage report." for i in range(1, 6)]))
    monkeypatch.setattr("sys.argv", ["encode_overlap.py", "--data", str(tmp_path), "--docs", "1", "--rounds", "1",
                                     "--device-rates", "500", "--render-workers", "1", "--batch-size", "2",
                                     "--muvera-on-encoder"])
    assert eo.main() == 0
    out = capsys.readouterr().out
    rows = re.findall(r"model 500 pages/s, (inline|ahead|ahead, MUVERA on the encode thread): +[\d.]+ pages/s", out)
    assert rows == ["inline", "ahead", "ahead, MUVERA on the encode thread"]
    assert out.count("; 5 pages, 1 files at once") == 3
    assert "medians: inline" in out
    from ragspine.indexing import encode_stage

    assert encode_stage.ENCODE_AHEAD == 1 and encode_stage.FIRST_STAGE_DEVICES == ("cuda",)  # put back
