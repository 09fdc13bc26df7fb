"""The native copy in an embedded store's backup (``ragspine.backup.native``): a restore onto the
embedded store moves the shard's files into place instead of rebuilding the index, gives the
library the point path would, and refuses or scrubs what a hostile copy holds."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import backup_kit as bk
import pytest
from test_archive import LIB, body, good, rebuild, refused, target, target_dir  # noqa: F401  (fixtures)

from ragspine.backup.native import INDEX
from ragspine.engine import Engine
from ragspine.policy import CLASSIFICATION
from ragspine.store.base import KIND_CHUNK, PointData, Where
from ragspine.store.edge import EdgeStore

CANARY = "zqxnativecanary"


def native_members(members: list[tuple[str, bytes]]) -> tuple[list[list[Any]], list[bytes]]:
    d = dict(members)
    files = json.loads(d[f"{LIB}/{INDEX}"])["files"]
    return files, [d[f"{LIB}/native/{n}"] for n in range(len(files))]


def with_native(members: list[tuple[str, bytes]], files: list[list[Any]], blobs: list[bytes]
                ) -> list[tuple[str, bytes]]:
    """``members`` with the native copy replaced by ``files`` / ``blobs`` (same place in order)."""
    at = next(i for i, (n, _) in enumerate(members) if n == f"{LIB}/{INDEX}")
    rest = [(n, d) for n, d in members if not n.startswith(f"{LIB}/native/")]
    new = [(f"{LIB}/{INDEX}", json.dumps({"files": files}).encode()),
           *((f"{LIB}/native/{n}", b) for n, b in enumerate(blobs))]
    return rest[:at] + new + rest[at:]


def unpack(members: list[tuple[str, bytes]], data_dir: Path) -> Path:
    files, blobs = native_members(members)
    folder = data_dir / "libraries" / LIB
    for (rel, size, _), blob in zip(files, blobs, strict=True):
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(blob)
        with open(p, "r+b") as fh:
            fh.truncate(size)
    return folder


def pack(folder: Path) -> tuple[list[list[Any]], list[bytes]]:
    files, blobs = [], []
    for p in sorted(x for x in folder.rglob("*") if x.is_file()):
        data = p.read_bytes()
        files.append([p.relative_to(folder).as_posix(), len(data), len(data.rstrip(b"\0"))])
        blobs.append(data.rstrip(b"\0"))
    return files, blobs


def points(engine: Engine, library: str) -> dict[str, Any]:
    out, offset = {}, None
    while True:
        got, offset = engine.store.scroll_points(library, Where(), offset=offset)
        for p in got:
            out[p.id] = (p.payload, {k: (v.indices, v.values) for k, v in p.sparse.items()},
                         {k: v.tolist() for k, v in p.dense.items()})
        if offset is None:
            return out


def test_the_backup_carries_a_native_copy_and_the_restore_takes_it(good: Path, target: Engine, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (c,) = target.restore(good).libraries
    assert c.native_files > 0 and c.points > 0
    # The same file from its points, into another data dir: the same points, field by field.
    import ragspine.backup.load as load

    other = Engine(bk.settings(tmp_path / "points"), models=bk.models())
    try:
        monkeypatch.setattr(load, "NATIVE_INDEX", "native/not-in-this-file.json")
        (p,) = other.restore(good).libraries
        assert p.native_files == 0 and p.points == c.points and p.documents == c.documents
        mine, theirs = points(target, LIB), points(other, LIB)
        assert mine.keys() == theirs.keys()
        for pid in mine:
            pa, pb = mine[pid], theirs[pid]
            if pa[0].get("kind") == "library":
                continue  # the record: restored_at and the like differ
            assert pa == pb, pid
    finally:
        other.close()
    assert target.search({"query": "revenue", "libraries": [LIB], "mode": "bm25"}).hits


@pytest.mark.parametrize("entry, says", [
    (["../../escape", 10, 10], "is not a file of a library folder"),
    (["/etc/passwd", 10, 10], "is not a file of a library folder"),
    (["shard/../../x", 10, 10], "is not a file of a library folder"),
    (["evil/x", 10, 10], "is not a file of a library folder"),
    (["shard/a b", 10, 10], "is not a file of a library folder"),
    (["shard/x", 5, 10], "has sizes 5/10"),
    (["shard/x", -1, 0], "has sizes -1/0"),
    (["shard/x", "10", 10], "is not [path, size, stored]"),
])
def test_a_hostile_file_list_is_refused_before_a_byte_is_written(body: list[tuple[str, bytes]], target: Engine,
                                                                 target_dir: Path, tmp_path: Path,
                                                                 entry: list[Any], says: str) -> None:
    files, blobs = native_members(body)
    files[0] = entry
    blobs[0] = b"x" * entry[2] if isinstance(entry[2], int) and entry[2] >= 0 else b""
    path = rebuild(tmp_path / "list.rsbak", with_native(body, files, blobs))
    refused(target, target_dir, path, re.escape(says))
    assert not (tmp_path / "escape").exists() and not (target_dir.parent / "escape").exists()


def test_a_member_that_does_not_match_its_list_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                          target_dir: Path, tmp_path: Path) -> None:
    files, blobs = native_members(body)
    blobs[1] = blobs[1] + b"extra"
    path = rebuild(tmp_path / "len.rsbak", with_native(body, files, blobs))
    refused(target, target_dir, path, "holds .* bytes, its list says")


def test_files_qdrant_edge_cannot_open_are_refused(body: list[tuple[str, bytes]], target: Engine,
                                                   target_dir: Path, tmp_path: Path) -> None:
    files, blobs = native_members(body)
    n = next(i for i, f in enumerate(files) if f[0] == "shard/edge_config.json")
    blobs[n] = b"{not json"
    files[n] = [files[n][0], len(blobs[n]), len(blobs[n])]
    path = rebuild(tmp_path / "garbage.rsbak", with_native(body, files, blobs))
    refused(target, target_dir, path, "the native copy of library 'demo' cannot be (opened|read)")


def test_a_native_copy_whose_fields_are_not_its_records_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                                   target_dir: Path, tmp_path: Path) -> None:
    """A shard Qdrant Edge opens, but with the dense passages only: its record says page fields
    too. (A config edited against its segments is refused by Qdrant Edge itself, above.)"""
    from ragspine.store.base import CollectionSpec, DenseField

    store = EdgeStore(tmp_path / "scratch")
    try:
        store.create_collection(LIB, CollectionSpec(dense=(DenseField("dense_chunk", bk.DENSE_DIM),)))
    finally:
        store.close()
    files, blobs = pack(tmp_path / "scratch" / "libraries" / LIB)
    path = rebuild(tmp_path / "fields.rsbak", with_native(body, files, blobs))
    refused(target, target_dir, path, r"has vector fields \['dense_chunk'\], its record \[")


def test_restricted_points_in_a_native_copy_are_scrubbed_to_the_last_byte(body: list[tuple[str, bytes]],
                                                                         target: Engine, target_dir: Path,
                                                                         tmp_path: Path) -> None:
    """A copy that holds a RESTRICTED passage (and a lease, which no backup carries): the restore
    leaves neither in the library, nor the canary in any file of the data dir."""
    scratch = tmp_path / "scratch"
    unpack(body, scratch)
    store = EdgeStore(scratch)
    try:
        text = f"harbour {CANARY} tender"
        store.upsert(LIB, [
            PointData("00000000-0000-4000-8000-000000000001", {
                "kind": KIND_CHUNK, "doc_id": "x", "version": 1, "state": "live", "page": 1, "text": text,
                CLASSIFICATION: "RESTRICTED", "meta": {}, "metab": {}}),
            PointData("00000000-0000-4000-8000-000000000002", {"kind": "lease", "holder": CANARY}),
        ])
        store.optimize(LIB)
    finally:
        store.close()
    files, blobs = pack(scratch / "libraries" / LIB)
    assert any(CANARY.encode() in b for b in blobs)  # the copy holds it: the check below can fail
    path = rebuild(tmp_path / "planted.rsbak", with_native(body, files, blobs))
    (c,) = target.restore(path).libraries
    assert c.native_files == len(files)
    got = points(target, LIB)
    assert "00000000-0000-4000-8000-000000000001" not in got and "00000000-0000-4000-8000-000000000002" not in got
    for p in target_dir.rglob("*"):
        if p.is_file():
            assert CANARY.encode() not in p.read_bytes(), p
    assert not target.search({"query": CANARY, "libraries": [LIB], "mode": "bm25"}).hits


def test_a_server_or_a_bm25_only_restore_reads_the_points(good: Path, tmp_path: Path) -> None:
    from ragspine.store.server import ServerStore

    srv = Engine(bk.settings(tmp_path / "srv", page_vector_dtype="float16"), store=ServerStore.from_url(":memory:"),
                 models=bk.models())
    try:
        (c,) = srv.restore(good).libraries
        assert c.native_files == 0 and c.points > 0
    finally:
        srv.close()
    emb = Engine(bk.settings(tmp_path / "emb"), models=bk.models())
    try:
        (c,) = emb.restore(good, bm25_only=True).libraries
        assert c.native_files == 0 and c.points > 0
    finally:
        emb.close()


def test_an_older_backup_without_a_native_copy_restores_from_its_points(body: list[tuple[str, bytes]],
                                                                        target: Engine, tmp_path: Path) -> None:
    older = [(n, d) for n, d in body if not n.startswith(f"{LIB}/native/")]
    head = json.loads(older[0][1])
    older[0] = (older[0][0], json.dumps({**head, "version": 1}).encode())
    (c,) = target.restore(rebuild(tmp_path / "v1.rsbak", older)).libraries
    assert c.native_files == 0 and c.points > 0


def test_a_points_only_backup_has_no_native_copy(source_dir: Path, tmp_path: Path) -> None:
    import io
    import tarfile

    from ragspine.client._common import backup_request

    data = tmp_path / "data"
    shutil.copytree(source_dir, data)
    eng = Engine(bk.settings(data), models=bk.models())
    try:
        files = {}
        for native in (True, False):
            buf = io.BytesIO()
            (c,) = eng.backup([LIB], buf, native=native).libraries
            with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
                files[native] = [n for n in tar.getnames() if "/native/" in n]
            assert (c.native_files > 0) == native
        assert files[True] and not files[False]
    finally:
        eng.close()
    assert backup_request(LIB, native=False) == (f"/v1/libraries/{LIB}/backup", {"native": "false"})
    assert backup_request(None) == ("/v1/backup", {})


def test_native_members_out_of_place_or_missing_are_refused(body: list[tuple[str, bytes]], target: Engine,
                                                           target_dir: Path, tmp_path: Path) -> None:
    files, blobs = native_members(body)
    members = with_native(body, files, blobs)
    index = f"{LIB}/{INDEX}"
    # The file list after a file. (A file without any list holds no native copy: the points are
    # restored, and the stray members are never read.)
    at = next(k for k, (n, _) in enumerate(members) if n == index)
    late = [*members[:at], members[at + 1], members[at], *members[at + 2:]]
    refused(target, target_dir, rebuild(tmp_path / "late.rsbak", late), "comes before its file list")
    (c,) = target.restore(rebuild(tmp_path / "nolist.rsbak", [(n, d) for n, d in members if n != index])).libraries
    assert c.native_files == 0 and c.points > 0
    target.delete_library(LIB)
    # The last file missing: the copy is incomplete (here without the thumbnails, which would
    # be refused first: they name document versions the unopened copy cannot give).
    last = f"{LIB}/native/{len(files) - 1}"
    short = [(n, d) for n, d in members if n != last and "/thumbnails/" not in n]
    refused(target, target_dir, rebuild(tmp_path / "short.rsbak", short), "native copy of library 'demo' .* incomplete")
    # Two files swapped in order.
    i = next(k for k, (n, _) in enumerate(members) if n == f"{LIB}/native/0")
    swapped = [*members[:i], members[i + 1], members[i], *members[i + 2:]]
    refused(target, target_dir, rebuild(tmp_path / "swap.rsbak", swapped), "out of order")


def test_the_file_list_is_bounded_and_a_library_folder_appearing_is_refused(tmp_path: Path) -> None:
    from ragspine.backup.archive import BackupFileError
    from ragspine.backup.native import MAX_FILES, NativeStaging, adopt, check_index

    with pytest.raises(BackupFileError, match=f"more than {MAX_FILES}"):
        check_index("x", {"files": [[f"shard/f{i}", 1, 1] for i in range(MAX_FILES + 1)]})
    with pytest.raises(BackupFileError, match="is not a file of a library folder"):
        check_index("x", {"files": [["shard/a", 1, 1], ["shard/a", 1, 1]]})  # twice
    root = tmp_path / "libraries"
    st = NativeStaging(root, LIB, [("shard/a", 3, 3)])
    st.put(0, b"abc", "x")
    (root / LIB).mkdir()  # another restore or a create got there first
    with pytest.raises(BackupFileError, match="appeared while it was restored"):
        adopt(st, root)
    assert (root / LIB).exists() and not list((root / LIB).iterdir())  # theirs, untouched


def test_a_graph_view_refuses_writes(tmp_path: Path) -> None:
    from ragspine.graph._memory import Memory
    from ragspine.graph._view import GraphView, ReadOnlyGraphError

    view = GraphView(LIB, Memory())
    for write in (lambda: view.replace_sources(LIB, {}), lambda: view.drop(LIB),
                  lambda: view.locked(LIB).__enter__()):
        with pytest.raises(ReadOnlyGraphError):
            write()
    with pytest.raises(KeyError, match="not 'other'"):
        view.node("other", "x")
