"""Invariant 1 (docs/invariants.md) with canaries: RESTRICTED text never leaves the index build.

Unique canary words are placed only on RESTRICTED pages (marker in the header band, marker
label in the footer band, per-page override) and in a RESTRICTED document (body, title,
custom metadata, file name, PDF metadata). After ingest none of them may come back from any
search, listing or thumbnail, appear in any file under the data dir, be a term of any stored
sparse vector, count in any BM25 statistic, or appear in any log record.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pdfs
from pdfs import Page
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import DocumentNotFoundError, NotFoundError
from ragspine.scoring.tokenizer import token_id, tokenize
from ragspine.store import Store
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Where
from ragspine.store.edge import EdgeStore
from ragspine.store.server import PREFIX, ServerStore

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

LIB = "secure"
MIXED = "mixed-report"
SECRET_DOC = "secret-report"

C_HEADER = "zqxheadercanary"  # page 2: RESTRICTED in the header band
C_FOOTER = "zqxfootercanary"  # page 3: "Classification: restricted" label in the footer band
C_OVERRIDE = "zqxoverridecanary"  # page 4: page_sensitivity override
C_DOC = "zqxdocumentcanary"  # body of the RESTRICTED document
C_TITLE = "zqxtitlecanary"  # its title (metadata), PDF title, file name, custom field
C_CJK = "鹦鹉螺旋桨"  # CJK text on the header-marked page
ASCII_CANARIES = [C_HEADER, C_FOOTER, C_OVERRIDE, C_DOC, C_TITLE]
ALL_CANARIES = ASCII_CANARIES + [C_CJK]

PUBLIC_P1 = "Harbour traffic grew strongly this year across every terminal."
PUBLIC_P5 = "Harbour dredging finished early and the restricted stock units vested."
MIXED_PAGES = [
    Page([PUBLIC_P1], header="Annual Report"),
    Page([f"Harbour secret plan {C_HEADER} for expansion.", f"港口{C_CJK}计划。"], header="RESTRICTED"),
    Page([f"Harbour secret budget {C_FOOTER} numbers."], footer="Classification: restricted"),
    Page([f"Harbour secret tender {C_OVERRIDE} details."]),
    # "restricted" in body prose, outside the bands: not a marker, the page is kept.
    Page([PUBLIC_P5]),
]
MIXED_META = {"doc_id": MIXED, "title": "Mixed report", "page_sensitivity": {4: "restricted"}}
#: The text of the kept pages, header included.
PUBLIC_PAGES = {1: "Annual Report " + PUBLIC_P1, 5: PUBLIC_P5}

SECRET_META = {
    "doc_id": SECRET_DOC,
    "title": f"Board minutes {C_TITLE}",
    "sensitivity": " Restricted ",
    "project": f"{C_TITLE}-project",
}


def secret_pdf() -> bytes:
    return pdfs.make_pdf([f"Harbour merger talks {C_DOC} confidential."], title=f"PDF title {C_TITLE}")


# -- helpers --------------------------------------------------------------------------------


def all_sparse_indices(store: Store, lib: str) -> set[int]:
    """Every term id of every stored sparse vector, read from the backend itself."""
    out: set[int] = set()
    if isinstance(store, EdgeStore):
        import qdrant_edge as qe

        shard = store._shard(lib)
        offset = None
        while True:
            recs, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=1000, with_payload=False, with_vector=True))
            for r in recs:
                for v in (r.vector or {}).values():
                    out.update(int(i) for i in getattr(v, "indices", []))
            if offset is None:
                return out
    assert isinstance(store, ServerStore)
    offset = None
    while True:
        recs, offset = store.client.scroll(PREFIX + lib, limit=1000, offset=offset, with_vectors=True)
        for r in recs:
            for v in (r.vector or {}).values():  # type: ignore[union-attr]
                out.update(int(i) for i in getattr(v, "indices", []))
        if offset is None:
            return out


def files_containing(root: Path, needles: list[str]) -> dict[str, list[str]]:
    """``needle -> files`` for every needle whose UTF-8 bytes occur in a file under ``root``."""
    found: dict[str, list[str]] = {}
    encoded = [(n, n.encode("utf-8")) for n in needles]
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        for n, b in encoded:
            if b in data:
                found.setdefault(n, []).append(str(p.relative_to(root)))
    return found


def bm25(engine: Engine, query: str, **kw: Any):
    return engine.search({"query": query, "libraries": [LIB], "mode": "bm25", "top_k": 50, **kw})


def exact_bm25(docs: dict[Any, str], query: str, k1: float = 1.5, b: float = 0.75) -> dict[Any, float]:
    """Okapi BM25 (Lucene IDF) over ``docs``, from first principles, ASCII words only."""
    toks = {k: re.findall(r"[a-z0-9]+", v.lower()) for k, v in docs.items()}
    n = len(toks)
    avgdl = sum(len(t) for t in toks.values()) / n
    df = Counter(t for ts in toks.values() for t in set(ts))
    out = {}
    for k, ts in toks.items():
        tf = Counter(ts)
        s = sum(
            math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5)) * tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(ts) / avgdl))
            for q in set(re.findall(r"[a-z0-9]+", query.lower()))
            if tf[q]
        )
        if s:
            out[k] = s
    return out


@pytest.fixture(params=["edge", "server"])
def engine(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[Engine]:
    store = ServerStore.from_url(":memory:") if request.param == "server" else None
    eng = Engine(Settings(data_dir=data_dir), store=store)
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture
def loaded(engine: Engine, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    engine.create_library(LIB)
    mixed = engine.ingest(LIB, pdfs.make_pdf(MIXED_PAGES), MIXED_META, filename="mixed.pdf")
    secret = engine.ingest(LIB, secret_pdf(), SECRET_META, filename=f"{C_TITLE}.pdf")
    return engine, mixed, secret


# -- after a fresh ingest -------------------------------------------------------------------


def test_policy_results(loaded) -> None:
    _engine, mixed, secret = loaded
    assert mixed.status == "indexed"
    assert (mixed.pages_total, mixed.pages_indexed, mixed.pages_dropped) == (5, 2, [2, 3, 4])
    assert secret.status == "dropped_by_policy"
    assert secret.doc_id is None and secret.version is None and secret.chunks == 0
    assert not any(c in json.dumps(secret.to_json(), ensure_ascii=False) for c in ALL_CANARIES)


@pytest.mark.parametrize("mode", ["bm25", "auto", "lexical", "economy", "hybrid"])
def test_no_search_returns_restricted_text(loaded, mode: str) -> None:
    engine = loaded[0]
    queries = ALL_CANARIES + [
        "harbour secret plan expansion budget numbers tender details merger talks confidential",
        "港口计划",
        "board minutes",
        " ".join(ALL_CANARIES),
    ]
    for q in queries:
        resp = bm25(engine, q, mode=mode)
        body = json.dumps(resp.to_json(), ensure_ascii=False)
        assert not any(c in body for c in ALL_CANARIES), q
        for h in resp.hits:
            assert (h.doc_id, h.page) in {(MIXED, 1), (MIXED, 5)}, (q, h.doc_id, h.page)
    for c in ALL_CANARIES:
        assert bm25(engine, c, mode=mode).hits == []
    # The public pages are found, including the one saying "restricted" in its prose.
    assert {h.page for h in bm25(engine, "harbour", mode=mode).hits} == {1, 5}
    assert [h.page for h in bm25(engine, "restricted stock", mode=mode).hits] == [5]


def test_listing_shows_no_restricted_document_or_text(loaded) -> None:
    engine = loaded[0]
    docs = engine.documents(LIB)
    assert [d["doc_id"] for d in docs] == [MIXED]
    assert docs[0]["page_numbers"] == [1, 5] and docs[0]["pages_dropped"] == [2, 3, 4]
    listing = json.dumps([docs, engine.document(LIB, MIXED)], ensure_ascii=False)
    assert not any(c in listing for c in ALL_CANARIES)
    with pytest.raises(DocumentNotFoundError):
        engine.document(LIB, SECRET_DOC)
    with pytest.raises(DocumentNotFoundError):
        engine.thumbnail(LIB, SECRET_DOC, 1)
    assert engine.libraries.doc_entry(LIB, SECRET_DOC) is None


def test_dropped_page_thumbnail_is_exactly_as_absent_as_a_missing_page(loaded, data_dir: Path) -> None:
    engine = loaded[0]
    assert engine.thumbnail(LIB, MIXED, 1).is_file() and engine.thumbnail(LIB, MIXED, 5).is_file()

    def failure(page: int) -> NotFoundError:
        with pytest.raises(NotFoundError) as info:
            engine.thumbnail(LIB, MIXED, page)
        return info.value

    missing = failure(99)
    for page in (2, 3, 4):
        err = failure(page)
        assert type(err) is type(missing)
        assert (err.status, err.type, err.title) == (missing.status, missing.type, missing.title)
        assert str(err).replace(str(page), "N") == str(missing).replace("99", "N")
    pngs = sorted(p.name for p in (data_dir / "thumbnails").rglob("*.png"))
    assert pngs == ["p1.png", "p5.png"]


def test_no_canary_in_any_file(loaded, data_dir: Path) -> None:
    engine = loaded[0]
    engine.store.flush(LIB)
    if isinstance(engine.store, EdgeStore):
        engine.close()  # everything the store keeps is on disk now
    # The scan is not vacuous: public text is found in the store's files (Edge only;
    # the server double keeps nothing on disk).
    found = files_containing(data_dir, ALL_CANARIES + ["Harbour traffic grew"])
    if isinstance(engine.store, EdgeStore):
        assert "Harbour traffic grew" in found
    assert {c: found[c] for c in ALL_CANARIES if c in found} == {}


def test_no_canary_term_in_any_sparse_vector(loaded) -> None:
    engine = loaded[0]
    indices = all_sparse_indices(engine.store, LIB)
    public_ids = {token_id(t) for p in PUBLIC_PAGES.values() for t in tokenize(p)}
    public_ids |= {token_id(t) for t in tokenize(MIXED_META["title"])}  # the passages' context
    assert public_ids <= indices  # the read-back works
    canary_ids = {token_id(c) for c in ASCII_CANARIES}
    canary_ids |= {token_id(C_CJK[i : i + 2]) for i in range(len(C_CJK) - 1)}  # its bigrams
    canary_ids |= {token_id(t) for t in ("secret", "expansion", "tender", "merger", "minutes")}
    assert indices & canary_ids == set()
    # Only the public pages' terms are stored at all.
    assert indices == public_ids


def test_bm25_statistics_count_public_pages_only(loaded) -> None:
    engine = loaded[0]
    rec = engine.libraries.get(LIB)
    n_tokens = sum(len(re.findall(r"[a-z0-9]+", t.lower())) for t in PUBLIC_PAGES.values())
    # Each of the two pages and of their two passages is indexed with its context, the document's
    # title "Mixed report" (two tokens).
    assert (rec.stats[SPARSE_PAGE].count, rec.stats[SPARSE_PAGE].tokens) == (2, n_tokens + 2 * 2)
    assert (rec.stats[SPARSE_CHUNK].count, rec.stats[SPARSE_CHUNK].tokens) == (2, n_tokens + 2 * 2)
    # IDF and lengths: "harbour" is on every page, RESTRICTED ones included; its scores must be
    # those of a corpus of the two public pages (as indexed: title, then text).
    want = exact_bm25({p: f"Mixed report {t}" for p, t in PUBLIC_PAGES.items()}, "harbour terminal")
    got = {h.page: h.scores["bm25_page"] for h in bm25(engine, "harbour terminal").hits}
    assert got.keys() == want.keys()
    for page, s in want.items():
        assert got[page] == pytest.approx(s, rel=1e-4)
    assert engine.store.count(LIB, Where(kind=KIND_PAGE)) == 2
    assert engine.store.count(LIB, Where(kind=KIND_CHUNK)) == 2


def test_no_canary_in_any_log_record(loaded, caplog: pytest.LogCaptureFixture) -> None:
    engine = loaded[0]
    for c in ALL_CANARIES:
        bm25(engine, c)
    engine.documents(LIB)
    with pytest.raises(NotFoundError):
        engine.thumbnail(LIB, MIXED, 2)
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert records  # the capture works: ingest logs at INFO
    for r in records:
        text = " ".join([r.getMessage(), repr(r.args), r.exc_text or "", str(r.__dict__.get("extra", ""))])
        assert not any(c in text for c in ALL_CANARIES), (r.name, r.levelname)


@pytest.mark.parametrize("level", [" Restricted ", "restricted", "RESTRICTED", "\tReStRiCtEd\n"])
def test_document_sensitivity_is_trimmed_and_case_insensitive(engine: Engine, level: str) -> None:
    engine.create_library(LIB)
    res = engine.ingest(LIB, secret_pdf(), {**SECRET_META, "sensitivity": level})
    assert res.status == "dropped_by_policy"
    assert engine.documents(LIB) == [] and bm25(engine, C_DOC).hits == []
    assert engine.store.count(LIB, Where(doc_id=SECRET_DOC)) == 0


def test_restricted_document_is_not_even_opened(engine: Engine) -> None:
    """Dropped before parsing: a RESTRICTED upload that is not even a valid PDF is no error."""
    engine.create_library(LIB)
    res = engine.ingest(LIB, pdfs.NOT_A_PDF, {"doc_id": "x", "sensitivity": "RESTRICTED"})
    assert res.status == "dropped_by_policy"


def test_all_pages_restricted_drops_the_document(engine: Engine, data_dir: Path) -> None:
    engine.create_library(LIB)
    data = pdfs.make_pdf([Page([f"only secret {C_HEADER}"], header="RESTRICTED"), Page([f"more {C_OVERRIDE}"])])
    res = engine.ingest(LIB, data, {"doc_id": "all", "page_sensitivity": {2: "RESTRICTED"}})
    assert res.status == "dropped_by_policy" and res.pages_dropped == [1, 2] and res.pages_indexed == 0
    assert engine.documents(LIB) == []
    assert engine.store.count(LIB, Where(doc_id="all")) == 0
    assert not (data_dir / "thumbnails" / LIB / "all").exists()


# -- a public document re-classified as RESTRICTED ------------------------------------------

C_RECLASS = "zqxreclasscanary"
C_RECLASS_PAGE = "zqxreclasspagecanary"
OTHER_TEXT = "Harbour pilots report calm seas and steady harbour traffic."
RECLASS_P1 = f"Harbour expansion memo {C_RECLASS} for the board."
RECLASS_P2 = f"Harbour expansion annex {C_RECLASS_PAGE} with harbour figures."


def _public_then(engine: Engine, then: dict[str, Any]):
    engine.create_library(LIB)
    engine.ingest(LIB, pdfs.make_pdf([OTHER_TEXT]), {"doc_id": "other"})
    meta = {"doc_id": "memo"}
    first = engine.ingest(LIB, pdfs.make_pdf([RECLASS_P1, RECLASS_P2]), meta)
    assert first.status == "indexed"
    assert [h.doc_id for h in bm25(engine, C_RECLASS).hits] == ["memo"]  # it was public
    return engine.ingest(LIB, pdfs.make_pdf([RECLASS_P1, RECLASS_P2]), {**meta, **then})


def test_public_document_reclassified_restricted_disappears(engine: Engine, data_dir: Path) -> None:
    res = _public_then(engine, {"sensitivity": "Restricted"})
    assert res.status == "dropped_by_policy"
    for c in (C_RECLASS, C_RECLASS_PAGE):
        assert bm25(engine, c).hits == []
    assert {h.doc_id for h in bm25(engine, "harbour expansion").hits} == {"other"}
    assert [d["doc_id"] for d in engine.documents(LIB)] == ["other"]
    with pytest.raises(DocumentNotFoundError):
        engine.document(LIB, "memo")
    assert engine.store.count(LIB, Where(doc_id="memo")) == 0
    assert not (data_dir / "thumbnails" / LIB / "memo").exists()
    indices = all_sparse_indices(engine.store, LIB)
    assert token_id(C_RECLASS) not in indices and token_id(C_RECLASS_PAGE) not in indices
    assert token_id("pilots") in indices
    rec = engine.libraries.get(LIB)
    n_other = len(re.findall(r"[a-z0-9]+", OTHER_TEXT.lower()))
    assert (rec.stats[SPARSE_PAGE].count, rec.stats[SPARSE_PAGE].tokens) == (1, n_other)


def test_page_reclassified_restricted_disappears(engine: Engine, data_dir: Path) -> None:
    res = _public_then(engine, {"page_sensitivity": {2: "restricted"}})
    assert res.status == "indexed" and res.pages_dropped == [2] and res.version == 2
    assert bm25(engine, C_RECLASS_PAGE).hits == []
    assert [(h.doc_id, h.page, h.version) for h in bm25(engine, C_RECLASS).hits] == [("memo", 1, 2)]
    assert engine.store.count(LIB, Where(doc_id="memo", version=1)) == 0
    assert engine.store.count(LIB, Where(kind=KIND_PAGE, doc_id="memo")) == 1
    assert token_id(C_RECLASS_PAGE) not in all_sparse_indices(engine.store, LIB)
    with pytest.raises(NotFoundError):
        engine.thumbnail(LIB, "memo", 2)
    assert sorted(p.name for p in (data_dir / "thumbnails" / LIB / "memo").rglob("*.png")) == ["p1.png"]


def test_reclassified_text_leaves_no_bytes_on_disk(
    engine: Engine, data_dir: Path, request: pytest.FixtureRequest
) -> None:
    _public_then(engine, {"sensitivity": "RESTRICTED"})
    engine.close()
    assert files_containing(data_dir, [C_RECLASS, C_RECLASS_PAGE]) == {}


def test_reclassified_document_leaves_no_bm25_statistics(
    engine: Engine, request: pytest.FixtureRequest
) -> None:
    """After removal, scores are those of a corpus without the removed document: its pages no
    longer count in N or in any term's document frequency."""
    _public_then(engine, {"sensitivity": "RESTRICTED"})
    want = exact_bm25({1: OTHER_TEXT}, "harbour pilots")
    got = {h.page: h.scores["bm25_page"] for h in bm25(engine, "harbour pilots").hits}
    assert got.keys() == want.keys()
    assert got[1] == pytest.approx(want[1], rel=1e-4)
