"""A long PDF's pages read on worker processes (ragspine.indexing.parse).

What must hold: the pages come back exactly as the ingesting thread reads them (text, blocks,
lines, tables, flags), in order; a page's error is the same error; a short document, or a pool
that broke, is read on the ingesting thread; and an ingest with parse processes indexes the same
passages as one without.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pymupdf
import pytest

import pdfs
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import OversizeError
from ragspine.indexing.parse import PARSE_MIN_PAGES, ParseProcesses, page_ranges, parse_workers
from ragspine.indexing.pdf import open_pdf

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mmlongbench_dev" / "documents"


@pytest.mark.parametrize(("setting", "cpus", "expected"), [
    (1, 64, 0),  # 1: the ingesting thread, whatever the machine
    (3, 2, 3),  # a number of processes is taken as given
    (0, 2, 0),  # auto: none below 8 cores (both cores already busy on 2)
    (0, 7, 0),
    (0, 8, 2),  # one per 4 cores
    (0, 16, 4),
    (0, 64, 4),  # at most 4
])
def test_parse_workers_by_setting_and_cores(setting: int, cpus: int, expected: int) -> None:
    assert parse_workers(setting, cpus=cpus) == expected


def test_page_ranges_cover_every_page_once_in_order() -> None:
    assert page_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert page_ranges(3, 8) == [(0, 1), (1, 2), (2, 3)]
    assert page_ranges(16, 1) == [(0, 16)]


def _table_page(i: int) -> pdfs.Page:
    rows = "\n".join(f"Region {r}    {100 + i * r}    {200 + i * r}    {300 + r}" for r in range(1, 7))
    return pdfs.Page([f"Section {i}: revenue by region, page {i} of the report.", rows],
                     header=f"Annual report {i}", footer=f"page {i}")


@pytest.fixture(scope="module")
def parses() -> Iterator[ParseProcesses]:
    pool = ParseProcesses(2)
    yield pool
    pool.close()


def _parse(data: bytes, pool: ParseProcesses | None) -> Any:
    parsed = open_pdf(data, read_pages=pool.read if pool is not None else None)
    try:
        return parsed.pages
    finally:
        parsed.close()


def test_worker_pages_equal_the_ingesting_threads(parses: ParseProcesses) -> None:
    data = pdfs.make_pdf([_table_page(i) for i in range(1, 21)])
    here = _parse(data, None)
    there = _parse(data, parses)
    assert parses._pool is not None  # they were read on the workers
    assert [p.number for p in there] == list(range(1, 21))
    assert there == here
    assert any(p.lines for p in there) and all(p.text for p in there)


@pytest.mark.skipif(not DATA.is_dir(), reason=f"no evaluation PDFs at {DATA}")
def test_worker_pages_equal_on_real_reports(parses: ParseProcesses) -> None:
    """Real reports: tables read as tables, images, many blocks a page."""
    for name in ("2024.ug.eprospectus.pdf", "2305.13186v3.pdf"):
        data = (DATA / name).read_bytes()
        here, there = _parse(data, None), _parse(data, parses)
        assert len(here) >= PARSE_MIN_PAGES and there == here


def test_a_pages_error_is_the_same_error(parses: ParseProcesses) -> None:
    doc = pymupdf.open(stream=pdfs.make_pdf([f"page {i} words" for i in range(1, 18)]), filetype="pdf")
    doc.new_page(width=20000, height=600).insert_text((72, 72), "a poster-wide page")
    data = doc.tobytes()
    doc.close()
    with pytest.raises(OversizeError) as here:
        _parse(data, None)
    with pytest.raises(OversizeError) as there:
        _parse(data, parses)
    assert "page 18" in there.value.detail and there.value.detail == here.value.detail


def test_a_short_document_is_read_here() -> None:
    pool = ParseProcesses(2)
    try:
        data = pdfs.make_pdf([f"page {i}" for i in range(1, PARSE_MIN_PAGES)])
        assert pool.read(data, PARSE_MIN_PAGES - 1, 14400.0, True) is None
        assert len(_parse(data, pool)) == PARSE_MIN_PAGES - 1
        assert pool._pool is None  # no process was started for it
    finally:
        pool.close()


class _BrokenPool:
    """An executor whose every task fails as a pool whose worker died does."""

    def submit(self, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_exception(BrokenProcessPool("a worker died"))
        return fut

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_a_broken_pool_is_given_up_and_pages_are_read_here() -> None:
    pool = ParseProcesses(2)
    pool._pool = _BrokenPool()  # type: ignore[assignment]
    data = pdfs.make_pdf([f"page {i} text" for i in range(1, 21)])
    pages = _parse(data, pool)
    assert [p.text for p in pages] == [f"page {i} text" for i in range(1, 21)]
    assert pool.broken and pool._pool is None
    assert pool.read(data, 20, 14400.0, True) is None  # for good


def test_an_ingest_with_parse_processes_indexes_the_same_passages(tmp_path: Path) -> None:
    data = pdfs.make_pdf([_table_page(i) for i in range(1, 21)])
    got = {}
    for workers in (1, 2):
        eng = Engine(Settings(data_dir=tmp_path / str(workers), ocr="off", parse_workers=workers,
                              render_workers=1, dense_model="none"))
        try:
            eng.create_library("lib")
            res = eng.ingest("lib", data, {"doc_id": "report"})
            assert res.status == "indexed" and res.pages_indexed == 20
            assert eng.indexer.parses.started == (workers == 2)
            hits = eng.search({"query": "Region 5 revenue section 13", "libraries": ["lib"], "mode": "bm25",
                               "top_k": 5}).hits
            got[workers] = (res.chunks, [(h.doc_id, h.page, h.text, tuple(h.bbox)) for h in hits])
        finally:
            eng.close()
    assert got[1] == got[2] and got[2][1]


def test_a_spool_that_cannot_be_written_reads_the_pages_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """No room in the temp dir for the PDF the workers would open: this document is read on the
    ingesting thread, and the pool stays for the next one."""
    from ragspine.indexing import parse

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    data = pdfs.make_pdf([f"page {i} text" for i in range(1, 21)])
    pool = ParseProcesses(2)
    try:
        monkeypatch.setattr(parse.tempfile, "mkstemp", full)
        assert pool.read(data, 20, 14400.0, True) is None
        assert [p.text for p in _parse(data, pool)] == [f"page {i} text" for i in range(1, 21)]
        assert not pool.broken
    finally:
        pool.close()


def test_a_closed_pool_reads_nothing_more() -> None:
    """After close (the indexer's), a late document is read on the ingesting thread: no pool is
    made again."""
    data = pdfs.make_pdf([f"page {i} text" for i in range(1, 21)])
    pool = ParseProcesses(2)
    pool.close()
    assert pool.read(data, 20, 14400.0, True) is None
    assert not pool.started and not pool.broken
