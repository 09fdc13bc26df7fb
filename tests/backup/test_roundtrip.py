"""A backup restores to the same library: identical hits (document, page, chunk, box, text and
every channel's score), documents, thumbnails, graph, glossary and gap log; across backends;
refused for other models unless BM25 only; never over an existing library."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import backup_kit as bk
import pytest
from backup_kit import SCANNED

from ragspine.backup.archive import ArchiveReader
from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY
from ragspine.engine import Engine
from ragspine.errors import (
    ConflictError,
    InvalidRequestError,
    LibraryNotFoundError,
    ModelMismatchError,
)
from ragspine.models.modelset import ModelSet
from ragspine.store.server import ServerStore

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

QUERIES = ["revenue growth by region", "employees at year end", "wind and solar generation",
           "风电 装机容量", "Acme Robotics warehouse automation"]
MODES = ["hybrid", "bm25", "vector", "economy"]


def hits(engine: Engine, library: str, mode: str, query: str) -> list[tuple[Any, ...]]:
    r = engine.search({"query": query, "libraries": [library], "mode": mode, "top_k": 10})
    return [(h.doc_id, h.page, h.chunk_id, h.bbox, h.text, sorted(h.scores.items())) for h in r.hits]


def documents(engine: Engine, library: str) -> list[dict[str, Any]]:
    return engine.documents(library)


def take_backup(engine: Engine, path: Path, names: list[str] | None = None) -> Path:
    with open(path, "wb") as fh:
        engine.backup(names or [DEMO_LIBRARY], fh)
    return path


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(bk.settings(tmp_path / "target"), models=bk.models())
    yield eng
    eng.close()


def assert_same_library(a: Engine, la: str, b: Engine, lb: str, exact: bool = True) -> None:
    for q in QUERIES:
        for mode in MODES:
            ha, hb = hits(a, la, mode, q), hits(b, lb, mode, q)
            assert ha, (q, mode)
            if exact:
                assert ha == hb, (q, mode)
            else:  # another backend's arithmetic: same ranking and fused scores, channels to 1e-6
                assert [h[:5] for h in ha] == [h[:5] for h in hb], (q, mode)
                for x, y in zip(ha, hb, strict=True):
                    for (ka, va), (kb, vb) in zip(x[5], y[5], strict=True):
                        assert ka == kb and (va == vb or abs(va - vb) <= 1e-6 * max(1.0, abs(va))), (q, mode, ka)
    assert documents(a, la) == documents(b, lb)
    for d in documents(a, la):
        for n in d["page_numbers"]:
            assert a.thumbnail(la, d["doc_id"], n).read_bytes() == b.thumbnail(lb, d["doc_id"], n).read_bytes()
    assert a.graph.snapshot(la) == b.graph.snapshot(lb)
    ga, gb = a.glossaries.get(la), b.glossaries.get(lb)
    assert ga.pop("library") == la and gb.pop("library") == lb
    assert ga == gb
    gaps_a = [{k: v for k, v in g.items() if k != "library"} for g in a.gaps.list(la)]
    assert gaps_a and gaps_a == [{k: v for k, v in g.items() if k != "library"} for g in b.gaps.list(lb)]


def test_a_round_trip_on_the_embedded_store_gives_identical_hits(source: Engine, target: Engine,
                                                                  tmp_path: Path) -> None:
    path = take_backup(source, tmp_path / "demo.rsbak")
    report = target.restore(path, as_name="copy")
    (c,) = report.libraries
    assert (c.name, c.source) == ("copy", DEMO_LIBRARY)
    assert c.documents == len(source.libraries.doc_entries(DEMO_LIBRARY))
    assert c.thumbnails == sum(len(d["page_numbers"]) for d in documents(source, DEMO_LIBRARY))
    assert c.pending_ocr == 1 and c.graph_sources > 0
    assert c.vectors == {"page_full": "kept", "page_fde": "kept", "dense_chunk": "kept"}
    assert_same_library(source, DEMO_LIBRARY, target, "copy")
    # The document whose OCR was owed: its PDF came along, and its second phase runs here.
    assert target.libraries.doc_entry("copy", SCANNED)["ocr"] in ("pending", "failed")
    fut = target.resume_ocr("copy")[("copy", SCANNED)]
    fut.result(timeout=300)
    assert target.document("copy", SCANNED)["ocr"] == "done"
    assert any(h.doc_id == SCANNED for h in target.search({"query": "harbour traffic", "libraries": ["copy"],
                                                           "mode": "bm25"}).hits)


def test_embedded_to_a_qdrant_server_and_back(source: Engine, tmp_path: Path) -> None:
    """Laptop to cluster: a Qdrant server (qdrant-client's in-process double) takes the backup;
    int8 page vectors become float32 there (exact), and go back to int8 on the way home."""
    server = Engine(bk.settings(tmp_path / "srv"), store=ServerStore.from_url(":memory:"), models=bk.models())
    home = Engine(bk.settings(tmp_path / "home"), models=bk.models())
    try:
        (c,) = server.restore(take_backup(source, tmp_path / "a.rsbak")).libraries
        assert c.vectors["page_full"].startswith("int8 -> float32")
        assert server.libraries.get(DEMO_LIBRARY).encoders["page_full"]["datatype"] == "float32"
        assert_same_library(source, DEMO_LIBRARY, server, DEMO_LIBRARY, exact=False)
        (c2,) = home.restore(take_backup(server, tmp_path / "b.rsbak")).libraries
        assert c2.vectors["page_full"].startswith("float32 -> int8")
        assert home.libraries.get(DEMO_LIBRARY).encoders["page_full"] == \
            source.libraries.get(DEMO_LIBRARY).encoders["page_full"]
        # The server normalises cosine vectors once more (float64 in the double): 1e-7 apart.
        assert_same_library(source, DEMO_LIBRARY, home, DEMO_LIBRARY, exact=False)
    finally:
        server.close()
        home.close()


def test_a_cluster_keeps_the_graph_in_the_store_and_it_comes_back(source: Engine, tmp_path: Path) -> None:
    settings = bk.settings(tmp_path / "cluster", writer_leases="on")
    cluster = Engine(settings, store=ServerStore.from_url(":memory:"), models=bk.models())
    home = Engine(bk.settings(tmp_path / "home"), models=bk.models())
    try:
        assert type(cluster.graph.graphs).__name__ == "StoredGraphStore"
        cluster.restore(take_backup(source, tmp_path / "a.rsbak"))
        assert cluster.graph.snapshot(DEMO_LIBRARY) == source.graph.snapshot(DEMO_LIBRARY)
        home.restore(take_backup(cluster, tmp_path / "b.rsbak"))
        assert home.graph.snapshot(DEMO_LIBRARY) == source.graph.snapshot(DEMO_LIBRARY)
        assert not list((tmp_path / "cluster").rglob("graph.sqlite"))  # the cluster kept it in Qdrant
    finally:
        cluster.close()
        home.close()


@pytest.mark.parametrize("other", [
    ModelSet(dense=bk.NumpyDense()),  # no page model
    ModelSet(page=type("Other", (bk.NumpyPages,), {"revision": "2"})(), dense=bk.NumpyDense()),
])
def test_other_models_are_refused_unless_bm25_only(source: Engine, tmp_path: Path, other: ModelSet) -> None:
    path = take_backup(source, tmp_path / "demo.rsbak")
    eng = Engine(bk.settings(tmp_path / "t"), models=other)
    try:
        with pytest.raises(ModelMismatchError, match="--bm25-only") as exc:
            eng.restore(path)
        assert "page_full vectors from test/numpy-pages (revision 1, dim 16)" in str(exc.value)
        assert eng.list_libraries() == [] and not (tmp_path / "t" / "thumbnails" / DEMO_LIBRARY).exists()
        (c,) = eng.restore(path, bm25_only=True).libraries
        assert set(c.vectors.values()) == {"dropped (BM25 only)"}
        assert set(eng.libraries.get(DEMO_LIBRARY).encoders) == {"bm25_chunk", "bm25_page"}
        for q in QUERIES:
            assert hits(eng, DEMO_LIBRARY, "bm25", q) == hits(source, DEMO_LIBRARY, "bm25", q)
        r = eng.search({"query": QUERIES[0], "libraries": [DEMO_LIBRARY], "mode": "hybrid"})
        assert r.hits and all(h.scores["visual"] is None and h.scores["dense"] is None for h in r.hits)
    finally:
        eng.close()


def test_bm25_parameters_must_match(source: Engine, tmp_path: Path) -> None:
    path = take_backup(source, tmp_path / "demo.rsbak")
    eng = Engine(bk.settings(tmp_path / "t", bm25_k1=1.2), models=bk.models())
    try:
        with pytest.raises(ModelMismatchError, match="RAGSPINE_BM25_K1"):
            eng.restore(path, bm25_only=True)
        assert eng.list_libraries() == []
    finally:
        eng.close()


def test_an_existing_library_is_never_overwritten(source: Engine, tmp_path: Path) -> None:
    path = take_backup(source, tmp_path / "demo.rsbak")
    before = documents(source, DEMO_LIBRARY)
    with pytest.raises(ConflictError, match="--as NAME"):
        source.restore(path)
    assert documents(source, DEMO_LIBRARY) == before
    source.restore(path, as_name="second")
    assert documents(source, "second") == before


def test_several_libraries_in_one_file(source: Engine, target: Engine, tmp_path: Path) -> None:
    source.create_library("notes")
    source.ingest_text("notes", "n1", "quarterly dividend policy notes")
    path = take_backup(source, tmp_path / "all.rsbak", [DEMO_LIBRARY, "notes"])
    with pytest.raises(InvalidRequestError, match="holds 2"):
        target.restore(path, as_name="x")
    names = [c.name for c in target.restore(path).libraries]
    assert names == [DEMO_LIBRARY, "notes"]
    assert hits(target, "notes", "bm25", "dividend") == hits(source, "notes", "bm25", "dividend")


@pytest.mark.parametrize("how", ["points", "native"])
def test_a_failure_while_writing_leaves_nothing(source: Engine, target: Engine, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """From the points: the record, then one batch, then the disk is full. From the native copy
    (the embedded store's files, moved into place whole): the disk is full when the record is
    saved at the end, after the files, the graph and the thumbnails."""
    import ragspine.backup.load as load

    path = take_backup(source, tmp_path / "demo.rsbak")
    real = target.store.upsert
    calls = {"n": 0}
    fail_at = 2 if how == "points" else 1
    if how == "points":
        monkeypatch.setattr(load, "NATIVE_INDEX", "native/not-in-this-file.json")

    def failing(name: str, points: Any) -> None:
        calls["n"] += 1
        if calls["n"] == fail_at and name == DEMO_LIBRARY:
            raise OSError("disk full")
        real(name, points)

    monkeypatch.setattr(target.store, "upsert", failing)
    with pytest.raises(OSError, match="disk full"):
        target.restore(path)
    monkeypatch.undo()
    assert target.list_libraries() == []
    data = tmp_path / "target"
    assert not (data / "thumbnails" / DEMO_LIBRARY).exists() and not (data / "graphs" / DEMO_LIBRARY).exists()
    assert sorted(p.name for p in (data / "libraries").iterdir()) == [".lock"]  # no library, no staging folder
    target.restore(path)  # and the same file then restores
    assert_same_library(source, DEMO_LIBRARY, target, DEMO_LIBRARY)


def test_a_library_whose_restore_did_not_finish_is_refused_and_can_be_deleted(source: Engine) -> None:
    rec = source.libraries.get(DEMO_LIBRARY)
    rec.restoring = True
    source.libraries.save(rec)
    with pytest.raises(ConflictError, match="being restored, or its restore was interrupted"):
        source.search({"query": "revenue", "libraries": [DEMO_LIBRARY]})
    source.delete_library(DEMO_LIBRARY)
    with pytest.raises(LibraryNotFoundError):
        source.documents(DEMO_LIBRARY)


def test_a_backup_is_consistent_while_an_ingest_commits(source: Engine, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is taken under the library's write lock: an ingest that starts meanwhile commits
    after it (the backup holds the old state whole), and searches go on."""
    real = source.store.scroll_points
    ingest_done = threading.Event()
    searched: list[int] = []
    order: list[str] = []

    def ingest() -> None:
        source.ingest_text(DEMO_LIBRARY, "late-note", "a note about zeppelin logistics", title="Late")
        order.append("ingest committed")
        ingest_done.set()

    def slow(name: str, where: Any, offset: Any = None, limit: int = 256) -> Any:
        if offset is None and not order:
            order.append("backup started")
            threading.Thread(target=ingest, daemon=True).start()
            time.sleep(0.5)  # the ingest parses and stages now; its commit waits for the lock
            searched.append(len(source.search({"query": "revenue", "libraries": [DEMO_LIBRARY]}).hits))
        return real(name, where, offset=offset, limit=limit)

    monkeypatch.setattr(source.store, "scroll_points", slow)
    path = take_backup(source, tmp_path / "demo.rsbak")
    order.append("backup done")
    assert ingest_done.wait(60)
    assert order == ["backup started", "backup done", "ingest committed"] and searched[0] > 0
    monkeypatch.undo()
    eng = Engine(bk.settings(tmp_path / "t"), models=bk.models())
    try:
        eng.restore(path)
        assert "late-note" not in {d["doc_id"] for d in documents(eng, DEMO_LIBRARY)}
        for d in documents(eng, DEMO_LIBRARY):
            stored = eng.store.count(DEMO_LIBRARY, __import__("ragspine.store.base", fromlist=["Where"]).Where(
                kind="chunk", doc_id=d["doc_id"]))
            assert stored == d["chunks"], d["doc_id"]
    finally:
        eng.close()


def test_restricted_points_never_enter_a_backup(source: Engine, tmp_path: Path) -> None:
    """The RESTRICTED exit of a backup, shown firing: a chunk point classified RESTRICTED (which
    ingest never stores; planted here) stays out of the file, and its unclassified twin goes in."""
    from ragspine.catalog import point_id
    from ragspine.store.base import PointData, Where

    doc = documents(source, DEMO_LIBRARY)[0]
    base = source.store.scroll(DEMO_LIBRARY, Where(kind="chunk", doc_id=doc["doc_id"], version=doc["version"]))[0]
    planted = [PointData(point_id("planted", tag), {**base.payload, "chunk_id": f"planted-{tag}", "text": word,
                                                    "classification": cls})
               for tag, word, cls in (("a", "zqxbackupcanary", "RESTRICTED"), ("b", "zqxbackupcontrol", "PUBLIC"))]
    source.store.upsert(DEMO_LIBRARY, planted)
    path = take_backup(source, tmp_path / "demo.rsbak")
    reader = ArchiveReader(path)
    blob = b"".join(_inflate(n, d) for n, d in reader.members(reader.verify()))
    assert b"zqxbackupcontrol" in blob  # the positive control: an unclassified point is carried
    assert b"zqxbackupcanary" not in blob


def _inflate(name: str, data: bytes) -> bytes:
    import gzip

    return gzip.decompress(data) if name.endswith(".gz") else data


def test_the_backup_file_is_a_plain_tar_with_checksums(source: Engine, tmp_path: Path) -> None:
    path = take_backup(source, tmp_path / "demo.rsbak")
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert names[0] == "ragspine-backup.json" and names[-1] == "SHA256SUMS.json"
    assert f"{DEMO_LIBRARY}/library.json" in names and f"{DEMO_LIBRARY}/graph.json.gz" in names
    assert any(n.startswith(f"{DEMO_LIBRARY}/thumbnails/") for n in names)
    assert sum(n.startswith(f"{DEMO_LIBRARY}/pending/") for n in names) == 2  # the PDF and its sidecar
    head = ArchiveReader(path).verify()
    assert head.libraries == [DEMO_LIBRARY] and len(head.sums) == len(names) - 2
    assert isinstance(io, object) and Settings  # imported for the helpers above
