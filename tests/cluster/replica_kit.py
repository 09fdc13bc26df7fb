"""Helpers for the replica tests: two Engines over one ``QdrantClient(":memory:")`` and one
data dir, and the consistency check every scenario ends with (see test_replicas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient

import pdfs
from ragspine.catalog import LIBRARY_POINT
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.scoring.tokenizer import tokenize
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, SPARSE_CHUNK, SPARSE_PAGE, Where
from ragspine.store.server import ServerStore

LIB = "reports"


def replica(client: QdrantClient, data_dir: Path, **kw: Any) -> Engine:
    # qdrant_url says "a Qdrant server": leases on (writer_leases=auto), manifest re-read each second
    s = Settings(data_dir=data_dir, qdrant_url=":memory:", reranker="none", ocr="off", **kw)
    return Engine(s, store=ServerStore(client))


def close(*engines: Engine, client: QdrantClient) -> None:
    """Close the replicas, then the client they share."""
    for e in engines:
        e.close(keep_store=True)
    client.close()


def report(n_pages: int, word: str) -> bytes:
    """``n_pages`` pages, each with its own words: page i holds ``word`` and ``p<i>``."""
    return pdfs.make_pdf([f"{word} annual report page p{i} revenue grew {word} {pdfs.words(30, word)}"
                          for i in range(1, n_pages + 1)])


def committed(store: ServerStore) -> dict[str, dict[str, Any]]:
    return {r.payload["doc_id"]: r.payload for r in store.scroll(LIB, Where(kind="doc"))}


def assert_consistent(engine: Engine, expected: dict[str, int]) -> None:
    """``expected``: doc_id -> pages it must have, committed, for every document there is."""
    store = engine.store
    entries = committed(store)
    assert {d for d, e in entries.items() if e.get("active_version")} == set(expected), entries.keys()
    for doc_id, e in entries.items():
        assert e.get("staging_version") in (None, e.get("active_version")), e
        assert not e.get("retiring_version"), e
    points = store.scroll(LIB, Where(), fields=["kind", "doc_id", "version", "state"])
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if p.payload.get("kind") in (KIND_PAGE, KIND_CHUNK):
            by_doc.setdefault(p.payload["doc_id"], []).append(p.payload)
    assert set(by_doc) == set(expected), "points of a document that is not committed (orphans)"
    for doc_id, pages in expected.items():
        active = entries[doc_id]["active_version"]
        pts = by_doc[doc_id]
        assert {p["version"] for p in pts} == {active}, f"{doc_id}: mixed or orphan versions"
        assert all(p.get("state") == "live" for p in pts)
        assert sum(1 for p in pts if p["kind"] == KIND_PAGE) == pages
        assert sum(1 for p in pts if p["kind"] == KIND_CHUNK) == entries[doc_id]["chunks"] > 0
    # BM25 length statistics as a rebuild from scratch counts them: the tokens of every stored
    # passage and page text.
    rec = store.retrieve(LIB, [LIBRARY_POINT])[0].payload
    texts = store.scroll(LIB, Where(), fields=["kind", "text"])
    for fname, kind in ((SPARSE_CHUNK, KIND_CHUNK), (SPARSE_PAGE, KIND_PAGE)):
        lengths = [len(tokenize(p.payload.get("text") or "")) for p in texts if p.payload.get("kind") == kind]
        got = rec["stats"].get(fname, {})
        assert (got.get("tokens", 0), got.get("count", 0)) == (sum(lengths), len(lengths)), fname
    page_count = sum(1 for p in points if p.payload.get("kind") == KIND_PAGE)
    assert page_count == sum(expected.values())


def readable(engine: Engine, doc_id: str, word: str, pages: int) -> None:
    engine.libraries.invalidate(LIB)
    out = engine.search({"query": f"{word} p{pages}", "libraries": [LIB], "mode": "bm25", "top_k": 5})
    assert out.hits and out.hits[0].doc_id == doc_id and out.hits[0].page == pages


