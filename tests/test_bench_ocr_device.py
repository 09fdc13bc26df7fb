"""bench/ocr_device.py replay: every engine reads the recorded images, the first is the
baseline the others are compared with line by line, the worker-pool rows read what one
process reads, and an engine that cannot start costs its row with the reason, not the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pymupdf
import pytest
from PIL import Image

from bench_kit import BENCH

pytestmark = pytest.mark.slow  # the real PP-OCRv4 models, in three processes


DRAWN = (("Revenue grew 12 percent", "Operating margin 8.5"), ("Shipments fell in 2023", "Cloud share by region"))


def _record(folder: Path) -> None:
    """Two images the engine is asked to read, as `record` saves them: two lines of text each."""
    images = []
    for i, words in enumerate(DRAWN):
        doc = pymupdf.open()
        page = doc.new_page(width=300, height=120)
        for k, text in enumerate(words):
            page.insert_text((20, 40 + 40 * k), text, fontsize=16)
        pix = page.get_pixmap(dpi=120)
        Image.fromarray(np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 3)).save(
            folder / f"{i:04d}.png")
        images.append({"file": f"{i:04d}.png", "page": f"doc.pdf#p{i + 1}", "h": pix.height, "w": pix.width})
    manifest = {"dpi": 120, "mode": "auto", "pages": {"doc.pdf#p1": "scanned", "doc.pdf#p2": "chart"},
                "images": images}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_replay_compares_every_engine_and_pool_with_the_first(tmp_path: Path) -> None:
    _record(tmp_path)
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(BENCH / "ocr_device.py"), "replay", str(tmp_path),
                        "--engines", "cpu:onnxruntime", "cpu:tpu", "--processes", "3", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    # An engine that cannot start is an error line, and the exit code says a row is missing.
    assert r.returncode == 1, r.stderr
    printed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    # Three workers asked for, two images: two workers (each warms up on one image).
    assert [p["engine"] for p in printed] == ["cpu:onnxruntime", "cpu:tpu",
                                              "cpu:onnxruntime x 2 one-thread processes"]
    assert "OcrInputError: OCR backend must be one of" in printed[1]["error"]
    rows = json.loads(out.read_text())
    base, pool = rows
    # What the engine reads of each image, read here directly: every drawn word, in some number
    # of detected lines (the detector may cut a line in two at a wide space).
    from ragspine.ocr import RapidOcrEngine

    engine = RapidOcrEngine(backend="onnxruntime")
    direct = [[ln.text for ln in engine.recognize(np.asarray(Image.open(tmp_path / f"{i:04d}.png").convert("RGB")))]
              for i in range(2)]
    assert [" ".join(lines).split() for lines in direct] == [" ".join(words).split() for words in DRAWN]
    assert (base["pages"], base["images"], base["lines"]) == (2, 2, sum(map(len, direct)))
    assert base["pages_per_s"] == pytest.approx(2 / base["wall_s"], rel=0.05)
    assert pool["lines"] == base["lines"] and pool["same_text_share_of_first"] == 1.0
    # The first engine recorded the models' input shapes for the models-only command.
    shapes = json.loads((tmp_path / "shapes.json").read_text())
    assert shapes["pages"] == 2 and len(shapes["calls"]) == 2
    for calls in shapes["calls"]:  # one detection, then recognition batches of 48 px high crops
        assert calls[0][0] == "detection" and calls[0][1][:2] == [1, 3]
        assert all(key == "recognition" and shape[1:3] == [3, 48] for key, shape in calls[1:])
    # The models alone on those shapes: onnxruntime and torch only; another backend is an error row.
    m = subprocess.run([sys.executable, str(BENCH / "ocr_device.py"), "models", str(tmp_path),
                        "--engines", "cpu:onnxruntime", "cpu:openvino"], capture_output=True, text=True, timeout=300)
    assert m.returncode == 1, m.stderr
    rows = [json.loads(line) for line in m.stdout.splitlines() if line.startswith("{")]
    assert rows[0]["engine"] == "cpu:onnxruntime" and rows[0]["images"] == 2
    assert rows[1] == {"engine": "cpu:openvino", "error": "models-only runs onnxruntime or torch"}


@pytest.mark.parametrize("command", ["replay", "models"])
def test_a_folder_without_a_record_is_a_one_line_error(tmp_path: Path, command: str) -> None:
    r = subprocess.run([sys.executable, str(BENCH / "ocr_device.py"), command, str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    want = "manifest.json" if command == "replay" else "shapes.json"
    assert r.returncode == 2 and r.stderr.strip().startswith(f"no {tmp_path / want}:"), r.stderr
