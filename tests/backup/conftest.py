"""Fixtures of the backup tests: the demo corpus, and a pristine source library (page, MUVERA
and dense vectors from numpy models, relations, a glossary, a knowledge gap, a scanned
document whose OCR is still owed) built once per session; tests work on copies."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for p in (str(_HERE), str(_HERE.parent)):
    if p not in sys.path:  # ``import backup_kit`` / ``import scans`` whatever pytest's import mode
        sys.path.insert(0, p)

import backup_kit as bk  # noqa: E402
import scans  # noqa: E402
from backup_kit import SCANNED  # noqa: E402

from ragspine.demo import DEMO_LIBRARY, DemoDocument, build_demo_corpus  # noqa: E402
from ragspine.engine import Engine  # noqa: E402


@pytest.fixture(scope="session")
def demo_docs(tmp_path_factory: pytest.TempPathFactory) -> list[DemoDocument]:
    return build_demo_corpus(tmp_path_factory.mktemp("backup-demo-pdfs"))


@pytest.fixture(scope="session")
def source_dir(tmp_path_factory: pytest.TempPathFactory, demo_docs: list[DemoDocument]) -> Path:
    d = tmp_path_factory.mktemp("backup-source") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGSPINE_OCR_WORKERS", "1")
        eng = Engine(bk.settings(d), models=bk.models())
        try:
            bk.build_source(eng, demo_docs)
            scan = scans.scan_pdf([scans.ScanPage([scans.Line("Harbour traffic grew strongly", y=200)])])
            res = eng.ingest(DEMO_LIBRARY, scan, {"doc_id": SCANNED, "title": "Scanned memo"}, defer_ocr=True)
            assert res.status == "ocr_pending" and eng.libraries.doc_entry(DEMO_LIBRARY, SCANNED)["ocr"] == "pending"
        finally:
            eng.close()
    return d


@pytest.fixture
def source(source_dir: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a private copy of the source data dir."""
    d = tmp_path / "source"
    shutil.copytree(source_dir, d)
    eng = Engine(bk.settings(d), models=bk.models())
    try:
        yield eng
    finally:
        eng.close()
