"""Ingest through the Engine: counts, honest citations, bad input, atomic replace, delete,
determinism and BM25 length re-weighting.

Expected values are worked out here from the PDFs the tests build (see ``tests/pdfs.py``),
not read back from the code under test.
"""

from __future__ import annotations

import math
import re
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import (
    CorruptPDFError,
    DocumentNotFoundError,
    EmptyPDFError,
    EncryptedPDFError,
    NotAPDFError,
    OversizeError,
    RagspineError,
)
from ragspine.catalog import AVGDL_DRIFT
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Where

LIB = "reports"
DOC = "report"

# Page 4: one paragraph of 30 sentences of 47 characters, joined by single spaces. With the
# default 480-character passages, greedy packing takes k sentences while 48k - 1 <= 480,
# i.e. 10, so the page gives exactly 3 passages of 10 sentences each.
SENTENCES = [f"Sentence {i:02d} covers turbine gearbox maintenance." for i in range(30)]
assert all(len(s) == 47 for s in SENTENCES)

REPORT_PAGES = [
    Page(
        [
            "Harbour division revenue rose sharply in the third quarter.",
            "The pageone chart shows container volumes at record levels.",
        ],
        header="Annual Report 2023",
    ),
    Page(["中国制造业采购经理指数继续扩张，服务业保持稳定。", "港口集装箱吞吐量创历史新高。"]),
    Page([]),  # a blank page in the middle: indexed as a page, no passages
    Page([" ".join(SENTENCES)]),
    Page(["Mixed page pagefive summary of offshore wind capacity.", "海上风电装机容量增长。"]),
]
#: Passages per page, worked out above: p1 two short paragraphs (one passage), p2 one,
#: p3 none, p4 three, p5 one.
EXPECTED_CHUNKS = {1: 1, 2: 1, 3: 0, 4: 3, 5: 1}
REPORT_META = {"doc_id": DOC, "title": "Annual report", "entity": "Harbour Co", "period": 2023}

#: Queries with the page each must find first.
PAGE_QUERIES = [
    ("pageone container", 1),
    ("吞吐量", 2),
    ("turbine gearbox", 4),
    ("pagefive offshore", 5),
    ("风电装机", 5),
]


def report() -> tuple[bytes, list[list[tuple[float, float, float, float]]]]:
    return pdfs.build_pdf(REPORT_PAGES, title="PDF metadata title")


def bm25(engine: Engine, query: str, libraries: list[str] | None = None, **kw: Any):
    return engine.search({"query": query, "libraries": libraries or [LIB], "mode": "bm25", **kw})


def snapshot(engine: Engine, queries: list[str], scores: bool = True) -> list[Any]:
    """Everything a user can see: hits of several queries (with their version), the document
    listing. ``scores=False`` leaves out the score values, keeping the ranking."""
    out: list[Any] = []
    for q in queries:
        hits = []
        for h in bm25(engine, q, top_k=20).hits:
            j = {**h.to_json(), "version": h.version}
            if not scores:
                del j["scores"]
            hits.append(j)
        out.append(hits)
    out.append(engine.documents(LIB))
    return out


SNAPSHOT_QUERIES = ["revenue", "turbine", "制造业", "pagefive", "report"]


def thumb_files(data_dir: Path) -> set[str]:
    root = data_dir / "thumbnails"
    return {str(p.relative_to(root)) for p in root.rglob("*.png")} if root.exists() else set()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def ingested(engine: Engine):
    engine.create_library(LIB)
    data, layout = report()
    res = engine.ingest(LIB, data, REPORT_META, filename="report.pdf")
    return engine, data, layout, res


# -- a normal ingest ------------------------------------------------------------------------


def test_ingest_result_counts(ingested, data_dir: Path) -> None:
    engine, _data, _layout, res = ingested
    assert res.status == "indexed"
    assert res.library == LIB and res.doc_id == DOC and res.version == 1
    assert res.pages_total == 5 and res.pages_indexed == 5 and res.pages_dropped == []
    assert res.chunks == sum(EXPECTED_CHUNKS.values()) == 6
    store = engine.store
    assert store.count(LIB, Where(kind=KIND_CHUNK, doc_id=DOC)) == 6
    assert store.count(LIB, Where(kind=KIND_PAGE, doc_id=DOC)) == 5
    assert store.count(LIB, Where(live=False)) == 0  # nothing left staged
    per_page = Counter(c.payload["page"] for c in store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id=DOC)))
    assert {p: per_page.get(p, 0) for p in EXPECTED_CHUNKS} == EXPECTED_CHUNKS

    doc = engine.document(LIB, DOC)
    assert doc["title"] == "Annual report"  # the caller's title wins over the PDF's
    assert doc["version"] == 1 and doc["page_numbers"] == [1, 2, 3, 4, 5]
    assert doc["pages_total"] == 5 and doc["pages_indexed"] == 5 and doc["chunks"] == 6
    # doc_type: derived from page 1's "Annual Report 2023" (ragspine.indexing.profile), set by no caller.
    assert doc["metadata"] == {"title": "Annual report", "entity": "Harbour Co", "period": 2023, "doc_type": "annual_report"}
    assert doc["filename"] == "report.pdf"
    assert [d["doc_id"] for d in engine.documents(LIB)] == [DOC]

    # One thumbnail per page, at 72 dpi an A4 page is 595 x 842 pixels.
    for n in range(1, 6):
        path = engine.thumbnail(LIB, DOC, n)
        assert path == data_dir / "thumbnails" / LIB / DOC / "v1" / f"p{n}.png"
        assert png_size(path) == (595, 842)


def test_title_falls_back_to_pdf_metadata_then_doc_id(engine: Engine) -> None:
    engine.create_library(LIB)
    engine.ingest(LIB, pdfs.make_pdf(["some words"], title="From the PDF"), {"doc_id": "a"})
    engine.ingest(LIB, pdfs.make_pdf(["other words"]), {"doc_id": "b"})
    assert engine.document(LIB, "a")["title"] == "From the PDF"
    assert engine.document(LIB, "b")["title"] == "b"


def test_default_doc_id_from_filename_or_digest(engine: Engine, tmp_path: Path) -> None:
    engine.create_library(LIB)
    path = tmp_path / "Q3 results final.pdf"
    path.write_bytes(pdfs.make_pdf(["quarterly words"]))
    assert engine.ingest(LIB, path).doc_id == "Q3-results-final"
    res = engine.ingest(LIB, pdfs.make_pdf(["anonymous words"]))
    assert re.fullmatch(r"doc-[0-9a-f]{12}", res.doc_id or "")


@pytest.mark.parametrize("query,page", PAGE_QUERIES)
def test_pages_are_one_based(ingested, query: str, page: int) -> None:
    engine = ingested[0]
    hits = bm25(engine, query).hits
    assert hits, query
    assert hits[0].page == page and hits[0].doc_id == DOC


def test_hits_cite_page_text_and_bbox_in_points(ingested) -> None:
    """Invariant 2 (docs/invariants.md): a hit's text is a substring of the cited page's text, both as stored and as
    PyMuPDF extracts it from the PDF; bboxes lie on the page, where the text was drawn."""
    engine, data, layout, _ = ingested
    pdf_text = pdfs.page_texts(data)
    stored = {
        r.payload["page"]: r.payload for r in engine.store.scroll(LIB, Where(kind=KIND_PAGE, doc_id=DOC))
    }
    chunks = {r.payload["chunk_id"]: r.payload for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id=DOC))}
    seen = 0
    for q in ["harbour revenue", "制造业", "sentence 15 turbine", "风电", "container volumes", "pagefive",
              "sentence 29", "maintenance"]:
        for h in bm25(engine, q, top_k=10).hits:
            seen += 1
            page = stored[h.page]
            assert h.text and h.text in page["text"], (q, h.page)
            assert pdfs.squash(h.text) in pdfs.squash(pdf_text[h.page - 1]), (q, h.page)
            c = chunks[h.chunk_id]
            assert page["text"][c["start"] : c["end"]] == h.text
            assert c["page"] == h.page and h.chunk_id.startswith(f"{DOC}/p{h.page}/")
            x0, y0, x1, y1 = h.bbox
            w, hgt = page["width"], page["height"]
            assert (w, hgt) == pdfs.A4
            assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= hgt, h.bbox
            # Inside the union of the rects text was drawn in (3 pt of slack for glyph boxes).
            rects = layout[h.page - 1]
            ux0, uy0 = min(r[0] for r in rects) - 3, min(r[1] for r in rects) - 3
            ux1, uy1 = max(r[2] for r in rects) + 3, max(r[3] for r in rects) + 3
            assert ux0 <= x0 and y0 >= uy0 and x1 <= ux1 and y1 <= uy1, (h.bbox, rects)
    assert seen >= 8


def test_long_page_passages(ingested) -> None:
    engine = ingested[0]
    chunks = sorted(
        (r.payload for r in engine.store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id=DOC)) if r.payload["page"] == 4),
        key=lambda p: p["start"],
    )
    assert [c["text"] for c in chunks] == [" ".join(SENTENCES[i : i + 10]) for i in (0, 10, 20)]
    assert [c["chunk_id"] for c in chunks] == [f"{DOC}/p4/c{i}" for i in range(3)]
    # Each passage's bbox covers its lines only: later passages start lower on the page.
    assert chunks[0]["bbox"][1] <= chunks[1]["bbox"][1] <= chunks[2]["bbox"][1]
    hit = bm25(engine, "sentence 25").hits[0]
    assert hit.page == 4 and "Sentence 25 " in hit.text and hit.chunk_id == f"{DOC}/p4/c2"


# -- bad input ------------------------------------------------------------------------------

#: Settings for the bad-input tests: small limits so oversize files stay tiny.
LIMITS = {"max_pages": 6, "max_page_side_pt": 1000.0}


def _bad_inputs(tmp: Path) -> list[tuple[str, bytes, type[RagspineError]]]:
    good = report()[0]
    return [
        ("not-a-pdf", pdfs.NOT_A_PDF, NotAPDFError),
        ("text-file", b"Quarterly numbers, plain text, no PDF here.\n", NotAPDFError),
        ("zero-bytes", b"", EmptyPDFError),
        ("blank-pages", pdfs.blank_pdf(3), EmptyPDFError),
        ("garbage-after-magic", pdfs.GARBAGE_AFTER_MAGIC, CorruptPDFError),
        ("magic-only", b"%PDF-", CorruptPDFError),
        ("truncated-10", pdfs.truncated(good, 0.1), CorruptPDFError),
        ("truncated-30", pdfs.truncated(good, 0.3), CorruptPDFError),
        ("truncated-60", pdfs.truncated(good, 0.6), CorruptPDFError),
        ("truncated-95", pdfs.truncated(good, 0.95), CorruptPDFError),
        ("encrypted", pdfs.encrypted_pdf(tmp), EncryptedPDFError),
        ("too-many-pages", pdfs.make_pdf([f"page {i} words" for i in range(7)]), OversizeError),
        ("page-too-large", pdfs.oversize_page_pdf(1200.0), OversizeError),
    ]


def test_bad_inputs_raise_typed_errors_and_lose_nothing(data_dir: Path, tmp_path: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir, **LIMITS))
    try:
        engine.create_library(LIB)
        good, _ = report()
        engine.ingest(LIB, good, REPORT_META)
        other = pdfs.make_pdf(["A second document about dredging permits."])
        engine.ingest(LIB, other, {"doc_id": "other"})
        before = snapshot(engine, SNAPSHOT_QUERIES)
        n_points = engine.store.count(LIB, Where())
        thumbs = thumb_files(data_dir)
        assert before[0] and before[1] and before[2]  # the snapshot is not vacuous

        for name, data, err in _bad_inputs(tmp_path):
            # Aimed at an existing document id (a failed replace) and at a new one.
            for meta in (dict(REPORT_META), {"doc_id": "fresh"}):
                with pytest.raises(err) as info:
                    engine.ingest(LIB, data, meta, filename=f"{name}.pdf")
                assert type(info.value) is err, name
                assert info.value.detail and 400 <= info.value.status < 500, name
                assert snapshot(engine, SNAPSHOT_QUERIES) == before, name
                assert engine.store.count(LIB, Where()) == n_points, name
                assert thumb_files(data_dir) == thumbs, name
                with pytest.raises(DocumentNotFoundError):
                    engine.document(LIB, "fresh")
    finally:
        engine.close()
    # And still there after a restart.
    engine = Engine(Settings(data_dir=data_dir, **LIMITS))
    try:
        assert snapshot(engine, SNAPSHOT_QUERIES) == before
    finally:
        engine.close()


def test_page_larger_than_default_limit(engine: Engine) -> None:
    engine.create_library(LIB)
    with pytest.raises(OversizeError, match="14400"):
        engine.ingest(LIB, pdfs.oversize_page_pdf(15000.0))


def test_page_count_limit_is_inclusive(data_dir: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir, max_pages=3))
    try:
        engine.create_library(LIB)
        assert engine.ingest(LIB, pdfs.make_pdf(["one", "two", "three"])).pages_total == 3
        with pytest.raises(OversizeError, match="4 pages; the limit is 3"):
            engine.ingest(LIB, pdfs.make_pdf(["one", "two", "three", "four"]))
    finally:
        engine.close()


# -- versions -------------------------------------------------------------------------------


def test_same_content_is_unchanged(ingested, data_dir: Path) -> None:
    engine, data, _layout, first = ingested
    before = snapshot(engine, SNAPSHOT_QUERIES)
    thumbs = thumb_files(data_dir)
    again = engine.ingest(LIB, data, dict(REPORT_META), filename="report.pdf")
    assert again.status == "unchanged"
    assert (again.version, again.pages_total, again.pages_indexed, again.chunks) == (
        first.version, first.pages_total, first.pages_indexed, first.chunks
    )
    assert snapshot(engine, SNAPSHOT_QUERIES) == before
    assert thumb_files(data_dir) == thumbs


def test_changed_metadata_makes_a_new_version(ingested, data_dir: Path) -> None:
    engine, data, _layout, _ = ingested
    res = engine.ingest(LIB, data, {**REPORT_META, "entity": "Harbour Group"})
    assert res.status == "indexed" and res.version == 2
    hits = bm25(engine, "revenue").hits
    assert hits and all(h.version == 2 and h.metadata["entity"] == "Harbour Group" for h in hits)
    assert engine.document(LIB, DOC)["version"] == 2
    assert engine.store.count(LIB, Where(doc_id=DOC, version=1)) == 0
    assert engine.store.count(LIB, Where(kind=KIND_CHUNK, doc_id=DOC)) == 6
    assert not (data_dir / "thumbnails" / LIB / DOC / "v1").exists()
    assert thumb_files(data_dir) == {f"{LIB}/{DOC}/v2/p{n}.png" for n in range(1, 6)}


def test_changed_content_replaces_old_text(ingested) -> None:
    engine = ingested[0]
    res = engine.ingest(LIB, pdfs.make_pdf(["Completely rewritten dredging outlook."]), dict(REPORT_META))
    assert res.version == 2 and res.pages_total == 1
    assert bm25(engine, "turbine").hits == []
    assert bm25(engine, "pageone").hits == []
    assert [(h.doc_id, h.page, h.version) for h in bm25(engine, "dredging").hits] == [(DOC, 1, 2)]


STEPS = ["staged_entry", "written", "live", "committed"]


class Boom(RuntimeError):
    pass


def _fail_at(step: str) -> Callable[[str], None]:
    def hook(name: str) -> None:
        if name == step:
            raise Boom(step)

    return hook


V2_TEXT = "Version two talks about dredging permits only."


@pytest.mark.parametrize("crash", [False, True], ids=["exception", "crash"])
@pytest.mark.parametrize("step", STEPS)
def test_replace_is_atomic(data_dir: Path, step: str, crash: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure at any step of a replace leaves the previous version served; the next open
    cleans up whatever was left. ``crash`` also skips the in-process cleanup, as a killed
    process would."""
    engine = Engine(Settings(data_dir=data_dir))
    engine.create_library(LIB)
    v1 = engine.ingest(LIB, pdfs.make_pdf(["Version one talks about harbour revenue.", "Second page of version one."]), {"doc_id": DOC})
    assert v1.version == 1
    # Scores are left out: Qdrant Edge keeps deleted points in its IDF statistics until the
    # shard is reloaded (see test_scores_forget_deleted_documents), so a cleaned-up failed
    # write shifts scores without changing what is found or its order.
    v1_view = snapshot(engine, ["harbour revenue", "version"], scores=False)
    engine.indexer.step_hook = _fail_at(step)
    if crash:
        monkeypatch.setattr(engine.indexer.versions, "abort", lambda *a, **k: None)
    with pytest.raises(Boom):
        engine.ingest(LIB, pdfs.make_pdf([V2_TEXT]), {"doc_id": DOC})
    committed = step == "committed"
    if not committed:
        assert snapshot(engine, ["harbour revenue", "version"], scores=False) == v1_view
        assert bm25(engine, "dredging").hits == []
        assert engine.document(LIB, DOC)["version"] == 1
    else:
        hits = bm25(engine, "version").hits
        assert [(h.page, h.version, h.text) for h in hits] == [(1, 2, V2_TEXT)]
        assert bm25(engine, "harbour").hits == []
    engine.close()

    # Reopen: recovery runs on first use of the library.
    engine = Engine(Settings(data_dir=data_dir))
    try:
        store = engine.store
        if not committed:
            assert snapshot(engine, ["harbour revenue", "version"], scores=False) == v1_view
            for kind in (KIND_CHUNK, KIND_PAGE):
                assert store.count(LIB, Where(kind=kind, doc_id=DOC, not_version=1)) == 0
            assert thumb_files(data_dir) == {f"{LIB}/{DOC}/v1/p1.png", f"{LIB}/{DOC}/v1/p2.png"}
        else:
            assert [(h.page, h.version) for h in bm25(engine, "version").hits] == [(1, 2)]
            assert store.count(LIB, Where(doc_id=DOC, version=1)) == 0
            assert thumb_files(data_dir) == {f"{LIB}/{DOC}/v2/p1.png"}
        assert store.count(LIB, Where(live=False)) == 0
        entry = engine.libraries.doc_entry(LIB, DOC)
        assert entry is not None and not entry.get("staging_version") and not entry.get("retiring_version")
        # The document can be replaced again, with a version number never used before.
        res = engine.ingest(LIB, pdfs.make_pdf([V2_TEXT + " Retried."]), {"doc_id": DOC})
        assert res.status == "indexed" and res.version is not None and res.version >= 2
        hits = bm25(engine, "retried").hits
        assert [(h.version, h.page) for h in hits] == [(res.version, 1)]
        assert store.count(LIB, Where(doc_id=DOC, not_version=res.version)) == 1  # the manifest entry
        assert thumb_files(data_dir) == {f"{LIB}/{DOC}/v{res.version}/p1.png"}
    finally:
        engine.close()


def test_failed_first_ingest_leaves_no_document(data_dir: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir))
    try:
        engine.create_library(LIB)
        engine.indexer.step_hook = _fail_at("live")
        with pytest.raises(Boom):
            engine.ingest(LIB, pdfs.make_pdf(["brand new words"]), {"doc_id": "new"})
        engine.indexer.step_hook = None
        assert engine.documents(LIB) == []
        assert engine.store.count(LIB, Where(doc_id="new")) == 0
        assert bm25(engine, "brand").hits == []
        assert thumb_files(data_dir) == set()
    finally:
        engine.close()


# -- delete ---------------------------------------------------------------------------------


def test_delete_document_removes_every_trace(ingested, data_dir: Path) -> None:
    engine = ingested[0]
    engine.ingest(LIB, pdfs.make_pdf(["Other document mentions turbine once."]), {"doc_id": "other"})
    assert {h.doc_id for h in bm25(engine, "turbine").hits} == {DOC, "other"}
    engine.delete_document(LIB, DOC)
    assert engine.store.count(LIB, Where(doc_id=DOC)) == 0
    assert not (data_dir / "thumbnails" / LIB / DOC).exists()
    assert [d["doc_id"] for d in engine.documents(LIB)] == ["other"]
    with pytest.raises(DocumentNotFoundError):
        engine.document(LIB, DOC)
    with pytest.raises(DocumentNotFoundError):
        engine.thumbnail(LIB, DOC, 1)
    with pytest.raises(DocumentNotFoundError):
        engine.delete_document(LIB, DOC)
    assert {h.doc_id for h in bm25(engine, "turbine").hits} == {"other"}
    assert bm25(engine, "pageone").hits == []
    # Length statistics no longer count the deleted document.
    rec = engine.libraries.get(LIB)
    assert (rec.stats[SPARSE_CHUNK].count, rec.stats[SPARSE_PAGE].count) == (1, 1)
    # The same document can come back.
    assert engine.ingest(LIB, report()[0], REPORT_META).status == "indexed"
    assert bm25(engine, "pageone").hits[0].doc_id == DOC


# -- determinism ----------------------------------------------------------------------------

DET_DOCS = [
    ("dup-b", ["Identical twin page about grain exports."]),
    ("dup-a", ["Identical twin page about grain exports."]),
    ("mix", ["Grain exports fell.", "粮食出口下降。", "Exports of grain and grain products."]),
    ("long", [" ".join(SENTENCES)]),
]


def _det_engine(root: Path) -> Engine:
    engine = Engine(Settings(data_dir=root))
    engine.create_library(LIB)
    for doc_id, pages in DET_DOCS:
        engine.ingest(LIB, pdfs.make_pdf(pages), {"doc_id": doc_id})
    return engine


def test_identical_engines_rank_identically(tmp_path: Path) -> None:
    a, b = _det_engine(tmp_path / "a"), _det_engine(tmp_path / "b")
    try:
        for q in ["grain exports", "identical twin", "粮食", "turbine sentence", "grain"]:
            ra = [(h.doc_id, h.page, h.chunk_id, h.text, h.scores) for h in bm25(a, q, top_k=20).hits]
            rb = [(h.doc_id, h.page, h.chunk_id, h.text, h.scores) for h in bm25(b, q, top_k=20).hits]
            assert ra == rb, q
            assert ra == [(h.doc_id, h.page, h.chunk_id, h.text, h.scores) for h in bm25(a, q, top_k=20).hits]
        # Equal scores are ordered by id, not by insertion order (dup-b was indexed first).
        twins = [h.doc_id for h in bm25(a, "identical twin").hits]
        assert twins == ["dup-a", "dup-b"]
    finally:
        a.close()
        b.close()


# -- BM25 length re-weighting ---------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def exact_bm25(docs: dict[str, str], query: str, k1: float = 1.5, b: float = 0.75) -> dict[str, float]:
    """Okapi BM25 with Lucene's IDF ln(1 + (N - n + 0.5) / (n + 0.5)), from first principles."""
    toks = {k: _tokens(v) for k, v in docs.items()}
    n_docs = len(toks)
    avgdl = sum(len(t) for t in toks.values()) / n_docs
    df = Counter(t for ts in toks.values() for t in set(ts))
    out: dict[str, float] = {}
    for k, ts in toks.items():
        tf = Counter(ts)
        s = 0.0
        for q, qc in Counter(_tokens(query)).items():
            if tf[q]:
                idf = math.log(1 + (n_docs - df[q] + 0.5) / (df[q] + 0.5))
                s += qc * idf * tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(ts) / avgdl))
        if s > 0:
            out[k] = s
    return out


# Short documents first, then long ones: the average length drifts far past AVGDL_DRIFT.
RW_DOCS = [
    ("short1", ["alpha beta gamma", "beta gamma delta"]),
    ("short2", ["gamma alpha alpha"]),
    # Pages stay under 480 characters: one passage each, so passage and page scores agree.
    ("long1", [pdfs.join(["alpha"] * 3 + ["epsilon"] * 40 + ["beta"]), pdfs.words(40) + " gamma"]),
    ("long2", [pdfs.words(60, "pad") + " delta alpha", pdfs.words(45, "more") + " beta beta"]),
]
RW_QUERIES = ["alpha", "beta gamma", "delta alpha", "epsilon beta"]


def _rw_engine(root: Path, order: list[int]) -> Engine:
    engine = Engine(Settings(data_dir=root))
    engine.create_library(LIB)
    for i in order:
        doc_id, pages = RW_DOCS[i]
        engine.ingest(LIB, pdfs.make_pdf(pages), {"doc_id": doc_id})
    return engine


def _page_texts(engine: Engine) -> dict[str, str]:
    return {
        f"{r.payload['doc_id']}/{r.payload['page']}": r.payload["text"]
        for r in engine.store.scroll(LIB, Where(kind=KIND_PAGE))
    }


def _scores(engine: Engine, q: str) -> dict[str, tuple[float | None, float | None]]:
    return {f"{h.doc_id}/{h.page}": (h.scores["bm25"], h.scores["bm25_page"]) for h in bm25(engine, q, top_k=50).hits}


def test_reweight_matches_exact_bm25(tmp_path: Path) -> None:
    engine = _rw_engine(tmp_path / "a", [0, 1, 2, 3])
    try:
        rec = engine.libraries.get(LIB)
        for name in (SPARSE_CHUNK, SPARSE_PAGE):
            st = rec.stats[name]
            assert st.count == 7  # one passage per page here, 7 pages
            assert abs(st.avgdl - st.basis) / st.avgdl <= AVGDL_DRIFT  # drift was corrected
        engine.indexer.reweight(LIB)
        rec = engine.libraries.get(LIB)
        texts = _page_texts(engine)
        assert sum(len(_tokens(t)) for t in texts.values()) == rec.stats[SPARSE_CHUNK].tokens
        for name in (SPARSE_CHUNK, SPARSE_PAGE):
            assert rec.stats[name].basis == pytest.approx(rec.stats[name].avgdl)
        for q in RW_QUERIES:
            want = exact_bm25(texts, q)
            got = _scores(engine, q)
            assert got.keys() == want.keys(), q
            for key, s in want.items():
                assert got[key][0] == pytest.approx(s, rel=1e-4), (q, key)
                assert got[key][1] == pytest.approx(s, rel=1e-4), (q, key)  # one passage = page
    finally:
        engine.close()


def test_automatic_reweight_makes_order_irrelevant(tmp_path: Path) -> None:
    """After the drift correction that the last ingest triggers, a library built in another
    order ranks and scores exactly like one built in one go, and like exact BM25."""
    a = _rw_engine(tmp_path / "a", [0, 1, 2, 3])
    b = _rw_engine(tmp_path / "b", [3, 1, 2, 0])
    try:
        for e in (a, b):
            e.indexer.reweight(LIB)
        texts = _page_texts(a)
        for q in RW_QUERIES:
            ra = [(h.doc_id, h.page, h.scores) for h in bm25(a, q, top_k=50).hits]
            rb = [(h.doc_id, h.page, h.scores) for h in bm25(b, q, top_k=50).hits]
            assert [x[:2] for x in ra] == [x[:2] for x in rb], q
            for (_, _, sa), (_, _, sb) in zip(ra, rb):
                assert sa["bm25"] == pytest.approx(sb["bm25"], rel=1e-6)
            want = exact_bm25(texts, q)
            order = sorted(want, key=lambda k: (-round(want[k], 9), k))
            assert [f"{d}/{p}" for d, p, _ in ra] == order, q
    finally:
        a.close()
        b.close()


def test_drift_triggers_reweight_without_being_asked(tmp_path: Path) -> None:
    engine = _rw_engine(tmp_path / "a", [0, 1])
    try:
        basis_before = engine.libraries.get(LIB).stats[SPARSE_PAGE].basis
        engine.ingest(LIB, pdfs.make_pdf(RW_DOCS[2][1]), {"doc_id": RW_DOCS[2][0]})
        st = engine.libraries.get(LIB).stats[SPARSE_PAGE]
        # The long document pushed the average far past the drift bound: re-weighted.
        assert st.basis == pytest.approx(st.avgdl) and st.basis > basis_before * (1 + AVGDL_DRIFT)
        texts = _page_texts(engine)
        for q in RW_QUERIES:
            want = exact_bm25(texts, q)
            got = _scores(engine, q)
            assert got.keys() == want.keys()
            for key, s in want.items():
                assert got[key][1] == pytest.approx(s, rel=1e-4), (q, key)
    finally:
        engine.close()


def test_scores_forget_deleted_documents(data_dir: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir))
    try:
        engine.create_library(LIB)
        engine.ingest(LIB, pdfs.make_pdf(["alpha beta", "alpha gamma delta"]), {"doc_id": "keep"})
        engine.ingest(LIB, pdfs.make_pdf(["alpha alpha beta", "beta"]), {"doc_id": "gone"})
        engine.delete_document(LIB, "gone")
        engine.indexer.reweight(LIB)  # lengths are exact; only IDF is left to check
        want = exact_bm25({"keep/1": "alpha beta", "keep/2": "alpha gamma delta"}, "beta gamma")
        assert _scores(engine, "beta gamma") == {k: (pytest.approx(v, rel=1e-4),) * 2 for k, v in want.items()}
    finally:
        engine.close()


def test_scores_are_exact_after_a_delete_and_a_restart(data_dir: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir))
    engine.create_library(LIB)
    engine.ingest(LIB, pdfs.make_pdf(["alpha beta", "alpha gamma delta"]), {"doc_id": "keep"})
    engine.ingest(LIB, pdfs.make_pdf(["alpha alpha beta", "beta"]), {"doc_id": "gone"})
    engine.delete_document(LIB, "gone")
    engine.indexer.reweight(LIB)
    engine.close()
    engine = Engine(Settings(data_dir=data_dir))
    try:
        want = exact_bm25({"keep/1": "alpha beta", "keep/2": "alpha gamma delta"}, "beta gamma")
        assert _scores(engine, "beta gamma") == {k: (pytest.approx(v, rel=1e-4),) * 2 for k, v in want.items()}
    finally:
        engine.close()


def test_interrupted_commit_still_updates_the_library_record(data_dir: Path) -> None:
    engine = Engine(Settings(data_dir=data_dir))
    engine.create_library(LIB)
    engine.ingest(LIB, pdfs.make_pdf(["market one"]), {"doc_id": DOC, "year": 2020})
    engine.indexer.step_hook = _fail_at("committed")
    with pytest.raises(Boom):
        engine.ingest(LIB, pdfs.make_pdf(["market two three four"]), {"doc_id": DOC, "year": 2020, "region": "x"})
    engine.close()
    engine = Engine(Settings(data_dir=data_dir))
    try:
        assert engine.document(LIB, DOC)["metadata"] == {"year": 2020, "region": "x"}
        rec = engine.libraries.get(LIB)
        assert (rec.stats[SPARSE_PAGE].count, rec.stats[SPARSE_PAGE].tokens) == (1, 4)
        # The committed version's new field can be filtered on.
        resp = bm25(engine, "market", filters=[{"field": "region", "op": "eq", "value": "x"}])
        assert [h.doc_id for h in resp.hits] == [DOC]
    finally:
        engine.close()
