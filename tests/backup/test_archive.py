"""The backup file reader refuses corrupt, truncated and hostile files with an error that names
the problem (:class:`BackupFileError`), and a refused restore leaves the target as it was: no
library, no thumbnails, no graph, no pending PDFs, nothing written outside its data dir.

The hostile files are a real backup of the demo library rewritten with :mod:`tarfile` (or with
:class:`ArchiveWriter`'s own ``_put``), with a checksum list that matches whenever the case needs
one, so that the check that fires is the one the test is about. The batch encoding of points
(:mod:`ragspine.backup.points`) is tested on its own at the end.

The last tests are hostile files that once escaped as another exception than
:class:`BackupFileError` (a trailing newline in a name, a date that is not a number, JSON nested
100,000 deep, a graph source or vector map that is not an object, a version that is not a number).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import re
import shutil
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import backup_kit as bk
import numpy as np
import pytest

from ragspine.backup import archive
from ragspine.backup.archive import (
    HEADER,
    TRAILER,
    VERSION,
    ArchiveReader,
    ArchiveWriter,
    BackupFileError,
    read_json,
)
from ragspine.backup.points import decode, encode
from ragspine.demo import DEMO_LIBRARY
from ragspine.engine import Engine
from ragspine.scoring.bm25 import SparseVector
from ragspine.store.base import PointData

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]

LIB = DEMO_LIBRARY
POINTS_JSON = f"{LIB}/points/000000.json.gz"
POINTS_NPZ = f"{LIB}/points/000000.npz"
GRAPH = f"{LIB}/graph.json.gz"

#: A member as the tests write it: a name (a regular file) or a TarInfo (any kind), and its data.
Member = tuple["str | tarfile.TarInfo", bytes]


# ---------------------------------------------------------------------------------------------
# A real backup, and tools to rewrite it


@pytest.fixture(scope="module")
def good(source_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One backup of the demo library for the whole module (read-only: tests write copies)."""
    root = tmp_path_factory.mktemp("archive-good")
    data = root / "data"
    shutil.copytree(source_dir, data)
    eng = Engine(bk.settings(data), models=bk.models())
    path = root / "demo.rsbak"
    try:
        with open(path, "wb") as fh:
            eng.backup([LIB], fh)
    finally:
        eng.close()
    shutil.rmtree(data)
    path.chmod(0o444)
    return path


@pytest.fixture(scope="module")
def body(good: Path) -> list[tuple[str, bytes]]:
    """The good backup's members, header first, without its trailer."""
    with tarfile.open(good) as tar:
        members = [(i.name, tar.extractfile(i).read()) for i in tar]  # type: ignore[union-attr]
    assert members[0][0] == HEADER and members[-1][0] == TRAILER
    names = [n for n, _ in members]
    assert {POINTS_JSON, POINTS_NPZ, GRAPH} <= set(names)
    return members[:-1]


@pytest.fixture(scope="module")
def thumb(body: list[tuple[str, bytes]]) -> str:
    return next(n for n, _ in body if n.startswith(f"{LIB}/thumbnails/"))


@pytest.fixture
def points_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore from the points even where the file has a native copy (the embedded store's files,
    ragspine.backup.native, which a restore onto the embedded store otherwise takes): the checks
    of the point members below are the point path's."""
    import ragspine.backup.load as load

    monkeypatch.setattr(load, "NATIVE_INDEX", "native/not-in-this-file.json")


@pytest.fixture
def target_dir(tmp_path: Path) -> Path:
    return tmp_path / "target"


@pytest.fixture
def target(target_dir: Path) -> Iterator[Engine]:
    eng = Engine(bk.settings(target_dir), models=bk.models())
    try:
        yield eng
    finally:
        eng.close()


def _name(m: Member) -> str:
    return m[0] if isinstance(m[0], str) else m[0].name


def sums_of(members: list[Member]) -> dict[str, list[Any]]:
    """The trailer's checksum list of ``members`` (as ArchiveWriter writes it: header included)."""
    return {_name(m): [len(m[1]), hashlib.sha256(m[1]).hexdigest()] for m in members if _name(m) != TRAILER}


def trailer_of(members: list[Member], sums: dict[str, list[Any]] | None = None) -> Member:
    return (TRAILER, json.dumps({"members": sums_of(members) if sums is None else sums}).encode())


def write_tar(path: Path, members: list[Member]) -> Path:
    """``members`` as a tar file, exactly as given (no trailer added)."""
    with open(path, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name) if isinstance(name, str) else copy.copy(name)
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def rebuild(path: Path, members: list[Member]) -> Path:
    """``members`` (any trailer among them dropped) and a trailer that matches them."""
    kept = [m for m in members if _name(m) != TRAILER]
    return write_tar(path, [*kept, trailer_of(kept)])


def replaced(members: list[tuple[str, bytes]], name: str, data: bytes) -> list[Member]:
    assert name in {n for n, _ in members}
    return [(n, data if n == name else d) for n, d in members]


def header_with(body: list[tuple[str, bytes]], **changes: Any) -> list[Member]:
    head = {**json.loads(body[0][1]), **changes}
    return [(HEADER, json.dumps(head).encode()), *body[1:]]


def offsets(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {i.name: i for i in tar.getmembers()}


def flipped(src: Path, dest: Path, at: int) -> Path:
    data = bytearray(src.read_bytes())
    data[at] ^= 0x5A
    dest.write_bytes(bytes(data))
    return dest


def assert_nothing_restored(eng: Engine, data_dir: Path) -> None:
    assert eng.list_libraries() == []
    assert not eng.store.has_collection(LIB)
    for part in ("thumbnails", "graphs", "ocr-pending", "libraries"):
        assert not (data_dir / part / LIB).exists(), part
    # Nor the scratch folder a native copy is written in before it is moved into place.
    assert not list((data_dir / "libraries").glob(".restore-*")) if (data_dir / "libraries").exists() else True


def refused(eng: Engine, data_dir: Path, path: Path, match: str) -> BackupFileError:
    """Restore ``path``: a BackupFileError matching ``match``, and nothing left behind (checked
    whatever the restore raised)."""
    with pytest.raises(BackupFileError, match=match) as exc:
        try:
            eng.restore(path)
        finally:
            assert_nothing_restored(eng, data_dir)
    return exc.value


def test_the_good_backup_and_its_rebuilt_copy_restore(good: Path, body: list[tuple[str, bytes]],
                                                     target: Engine, tmp_path: Path) -> None:
    """The control: the file the cases below spoil restores, and so does its copy written by
    these tests' tools (so any refusal below is the spoiled part's)."""
    assert ArchiveReader(good).verify().libraries == [LIB]
    (c,) = target.restore(rebuild(tmp_path / "copy.rsbak", body)).libraries
    assert c.name == LIB and c.points > 0 and c.thumbnails > 0 and c.graph_sources > 0 and c.pending_ocr == 1


# ---------------------------------------------------------------------------------------------
# 1. Truncated


TRUNCATED = "truncated|corrupt"


@pytest.mark.parametrize("cut", ["100 bytes", "10%", "50%", "99%", "in the npz", "in a tar header",
                                 "before the trailer", "in the trailer", "last byte of the trailer"])
def test_a_truncated_file_is_refused(good: Path, target: Engine, target_dir: Path, tmp_path: Path,
                                     cut: str) -> None:
    size = good.stat().st_size
    info = offsets(good)
    at = {
        "100 bytes": 100,
        "10%": size // 10,
        "50%": size // 2,
        "99%": size * 99 // 100,
        "in the npz": info[POINTS_NPZ].offset_data + info[POINTS_NPZ].size // 2,
        "in a tar header": info[GRAPH].offset + 300,
        "before the trailer": info[TRAILER].offset,
        "in the trailer": info[TRAILER].offset_data + 10,
        "last byte of the trailer": info[TRAILER].offset_data + info[TRAILER].size - 1,
    }[cut]
    assert 0 < at < size
    path = tmp_path / "cut.rsbak"
    path.write_bytes(good.read_bytes()[:at])
    err = refused(target, target_dir, path, TRUNCATED)
    assert "cut.rsbak" in str(err)


def test_a_file_without_its_trailer_says_the_checksum_list_is_missing(good: Path, target: Engine,
                                                                       target_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.rsbak"
    path.write_bytes(good.read_bytes()[:offsets(good)[TRAILER].offset])
    refused(target, target_dir, path, rf"truncated: its checksum list \({TRAILER}, written last\) is missing")


# ---------------------------------------------------------------------------------------------
# 2. One byte flipped


@pytest.mark.parametrize("where", ["npz", "thumbnail", "graph", "library.json"])
def test_a_flipped_byte_in_a_member_is_corrupt(good: Path, thumb: str, target: Engine, target_dir: Path,
                                               tmp_path: Path, where: str) -> None:
    name = {"npz": POINTS_NPZ, "thumbnail": thumb, "graph": GRAPH, "library.json": f"{LIB}/library.json"}[where]
    info = offsets(good)[name]
    path = flipped(good, tmp_path / "flip.rsbak", info.offset_data + info.size // 2)
    refused(target, target_dir, path, re.escape(f"backup member {name!r} is corrupt (its size or SHA-256 differs"))


def test_a_flipped_byte_in_a_tar_header_is_refused(good: Path, thumb: str, target: Engine, target_dir: Path,
                                                   tmp_path: Path) -> None:
    """A damaged header block ends tar's reading there: the members after it, the trailer
    among them, are missing."""
    path = flipped(good, tmp_path / "flip.rsbak", offsets(good)[thumb].offset + 5)  # in the name field
    refused(target, target_dir, path, TRUNCATED)


def test_a_file_that_changes_after_it_was_checked_is_refused_and_what_was_written_goes(
        good: Path, target: Engine, target_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify() passes, then the last thumbnail's byte flips before restore reads it: the library
    (its native copy moved into place, this being an embedded store's backup), the graph and the
    other thumbnails were written by then, and they go again."""
    info = offsets(good)
    last = [n for n in info if n.startswith(f"{LIB}/thumbnails/")][-1]
    spoiled = flipped(good, tmp_path / "spoiled.rsbak", info[last].offset_data + info[last].size // 2)
    path = tmp_path / "demo.rsbak"
    shutil.copyfile(good, path)
    real_verify, real_upsert, real_thumb = ArchiveReader.verify, target.store.upsert, target.thumbnails.path
    written: list[str] = []

    def verify_then_spoil(self: ArchiveReader) -> Any:
        head = real_verify(self)
        shutil.copyfile(spoiled, self.path)
        return head

    def upsert(name: str, points: Any) -> None:
        written.append("points")
        real_upsert(name, points)

    def thumb_path(*args: Any) -> Path:
        written.append("thumbnail")
        return real_thumb(*args)

    def adopt(*args: Any) -> Path:
        written.append("native")
        return real_adopt(*args)

    import ragspine.backup.load as load

    real_adopt = load.adopt
    monkeypatch.setattr(ArchiveReader, "verify", verify_then_spoil)
    monkeypatch.setattr(target.store, "upsert", upsert)
    monkeypatch.setattr(target.thumbnails, "path", thumb_path)
    monkeypatch.setattr(load, "adopt", adopt)
    refused(target, target_dir, path, re.escape(f"backup member {last!r} changed since the file was checked"))
    assert "native" in written and "thumbnail" in written  # written before the failure, and removed


# ---------------------------------------------------------------------------------------------
# 3. Not a backup


def _tiny_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2, 2), "red").save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["empty file", "tiny png", "thumbnail png", "random bytes", "gzip",
                                  "empty tar", "other tar", "json header of another format",
                                  "header only", "missing file"])
def test_a_file_that_is_not_a_backup_is_refused(body: list[tuple[str, bytes]], thumb: str, target: Engine,
                                                target_dir: Path, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.rsbak"
    not_readable = r"x\.rsbak is not a ragspine backup \(not a tar file"
    match = not_readable
    if kind == "empty file":
        path.write_bytes(b"")
        match = not_readable + ": empty file"
    elif kind == "tiny png":
        path.write_bytes(_tiny_png())
    elif kind == "thumbnail png":
        path.write_bytes(dict(body)[thumb])
    elif kind == "random bytes":
        path.write_bytes(np.random.default_rng(5).bytes(64 << 10))
    elif kind == "gzip":  # a compressed tar is not what a backup is
        path.write_bytes(gzip.compress(write_tar(tmp_path / "inner.tar", body).read_bytes()))
    elif kind == "empty tar":
        write_tar(path, [])
        match = r"backup file x\.rsbak is empty"
    elif kind == "other tar":
        rebuild(path, [("README.txt", b"hello"), *body])
        match = r"x\.rsbak is not a ragspine backup \(it starts with 'README\.txt', not ragspine-backup\.json\)"
    elif kind == "json header of another format":
        rebuild(path, header_with(body, format="zip-backup"))
        match = r"not a ragspine backup \(its header does not say format 'ragspine-backup'\)"
    elif kind == "header only":
        write_tar(path, body[:1])
        match = r"truncated: its checksum list"
    else:
        match = r"cannot read backup file .*x\.rsbak"
    refused(target, target_dir, path, match)


# ---------------------------------------------------------------------------------------------
# 4. The header


@pytest.mark.parametrize(("changes", "match"), [
    ({"version": VERSION + 1}, (rf"layout {VERSION + 1}, written by a newer ragspine; this one reads layout "
                                rf"{VERSION} \(nothing was changed\)")),
    ({"version": 0}, r"no valid version: 0"),
    ({"version": "1"}, r"no valid version: '1'"),
    ({"libraries": []}, r"does not list its libraries"),
    ({"libraries": ["../etc"]}, r"does not list its libraries"),
    ({"libraries": [LIB, LIB]}, r"does not list its libraries"),
], ids=["newer", "zero", "string", "no-libraries", "bad-name", "twice"])
def test_a_header_this_reader_cannot_take_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                     target_dir: Path, tmp_path: Path, changes: dict[str, Any],
                                                     match: str) -> None:
    refused(target, target_dir, rebuild(tmp_path / "h.rsbak", header_with(body, **changes)), match)


# ---------------------------------------------------------------------------------------------
# 5. Hostile members


def _files_outside(root: Path, inside: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p != inside and inside not in p.parents}


@pytest.mark.parametrize("name", [
    f"{LIB}/../../etc/passwd",
    "/abs/path",
    "{tmp}/escaped.png",
    f"{LIB}/thumbnails/../../x.png",
    f"{LIB}/thumbnails/acme-energy-bulletin-2023/../../../x.png",
    f"./{LIB}/library.json",
    f"{LIB}//library.json",
    f"{LIB}/points/000000.json",
    f"{LIB}/thumbnails/doc/p0.png",
    f"{LIB}/pending/../../x.pdf",
    "other/library.json",
    "other/thumbnails/doc/p1.png",
])
def test_a_member_outside_the_layout_is_refused(body: list[tuple[str, bytes]], target: Engine, target_dir: Path,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                name: str) -> None:
    """Written with ArchiveWriter's own ``_put`` (which skips the name check ``add`` makes), so the
    checksum list holds the member too."""
    name = name.replace("{tmp}", str(tmp_path))
    cwd = tmp_path / "cwd" / "deeper"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)  # a name taken relative to the working dir would land in tmp_path too
    path = tmp_path / "hostile.rsbak"
    with open(path, "wb") as fh:
        w = ArchiveWriter(fh, [LIB])
        for n, d in body[1:]:  # the writer wrote its own header
            w._put(n, d)
        w._put(name, b"root:x:0:0:root:/root:/bin/sh\n")
        w.close()
    with tarfile.open(path) as tar:
        assert name in tar.getnames()
    assert name in json.loads(_trailer(path))["members"]
    before = _files_outside(tmp_path, target_dir)
    refused(target, target_dir, path, re.escape(f"backup member {name!r} is not part of a ragspine backup's layout"))
    assert _files_outside(tmp_path, target_dir) == before
    assert not Path("/abs/path").exists()


def _trailer(path: Path) -> bytes:
    with tarfile.open(path) as tar:
        f = tar.extractfile(TRAILER)
        assert f is not None
        return f.read()


def _special(kind: str, thumb: str) -> tarfile.TarInfo:
    if kind == "symlink":
        info = tarfile.TarInfo(thumb)
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "hardlink":
        info = tarfile.TarInfo(thumb)
        info.type, info.linkname = tarfile.LNKTYPE, f"{LIB}/library.json"
    elif kind == "directory":
        info = tarfile.TarInfo(f"{LIB}/thumbnails/evil")
        info.type = tarfile.DIRTYPE
    elif kind == "fifo":
        info = tarfile.TarInfo(f"{LIB}/pending/{'0' * 40}.pdf")
        info.type = tarfile.FIFOTYPE
    else:
        info = tarfile.TarInfo(f"{LIB}/pending/{'1' * 40}.pdf")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "directory", "fifo", "device"])
def test_a_member_that_is_not_a_regular_file_is_refused(body: list[tuple[str, bytes]], thumb: str,
                                                        target: Engine, target_dir: Path, tmp_path: Path,
                                                        kind: str) -> None:
    """Built with tarfile directly; the special member stands in place of a thumbnail (or is
    added), and the checksum list names it."""
    info = _special(kind, thumb)
    members: list[Member] = [(n, d) for n, d in body if not (kind in ("symlink", "hardlink") and n == thumb)]
    members.insert(len(members) - 1, (info, b""))
    path = rebuild(tmp_path / "special.rsbak", members)
    assert info.name in json.loads(_trailer(path))["members"]
    before = _files_outside(tmp_path, target_dir)
    refused(target, target_dir, path, re.escape(f"backup member {info.name!r} is not a regular file"))
    assert _files_outside(tmp_path, target_dir) == before
    assert not [p for p in tmp_path.rglob("*") if p.is_symlink()]


# ---------------------------------------------------------------------------------------------
# 6. The checksum list


@pytest.mark.parametrize("case", ["missing member", "extra member", "member twice", "member after trailer",
                                  "size differs", "not a list", "malformed entry", "trailer not json"])
def test_the_checksum_list_and_the_members_must_agree(body: list[tuple[str, bytes]], thumb: str, target: Engine,
                                                      target_dir: Path, tmp_path: Path, case: str) -> None:
    path = tmp_path / "sums.rsbak"
    members: list[Member] = list(body)
    sums = sums_of(members)
    extra = f"{LIB}/thumbnails/acme-energy-bulletin-2023/p99.png"
    if case == "missing member":
        members = [m for m in members if m[0] != thumb]
        match = re.escape(f"sums.rsbak lacks member {thumb!r}")
    elif case == "extra member":
        members.append((extra, dict(body)[thumb]))
        match = re.escape(f"backup member {extra!r} is not in the checksum list")
    elif case == "member twice":
        members.append((thumb, dict(body)[thumb]))
        match = re.escape(f"backup member {thumb!r} appears twice")
    elif case == "member after trailer":
        write_tar(path, [*members, trailer_of(members), (extra, b"late")])
        refused(target, target_dir, path, re.escape(f"has member {extra!r} after its checksum list"))
        return
    elif case == "size differs":
        sums[thumb] = [sums[thumb][0] + 1, sums[thumb][1]]
        match = re.escape(f"backup member {thumb!r} is corrupt")
    elif case == "not a list":
        sums = []  # type: ignore[assignment]
        match = re.escape(f"the backup's {TRAILER} is not a checksum list")
    elif case == "malformed entry":
        sums[thumb] = sums[thumb][1]  # type: ignore[assignment]
        match = re.escape(f"the backup's checksum of {thumb!r} is malformed")
    else:
        write_tar(path, [*members, (TRAILER, b"{not json")])
        refused(target, target_dir, path, re.escape(f"backup member {TRAILER} is not valid JSON"))
        return
    write_tar(path, [*members, trailer_of(members, sums)])
    refused(target, target_dir, path, match)


# ---------------------------------------------------------------------------------------------
# 7. A gzip JSON bomb


def test_read_json_bounds_what_a_gzip_member_inflates_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "MAX_JSON_BYTES", 1000)
    exactly = b"[ " + b"0," * 498 + b"0]"  # 1,000 bytes inflated
    over = b"[  " + b"0," * 498 + b"0]"
    assert (len(exactly), len(over)) == (1000, 1001)
    assert read_json("a/points/000000.json.gz", gzip.compress(exactly)) == [0] * 499
    with pytest.raises(BackupFileError, match=r"backup member a/points/000000\.json\.gz inflates past 1000 bytes"):
        read_json("a/points/000000.json.gz", gzip.compress(over))
    bomb = gzip.compress(b"[" + b" " * (64 << 20) + b"]", compresslevel=9)
    assert len(bomb) < 100_000
    with pytest.raises(BackupFileError, match="inflates past 1000 bytes"):
        read_json("a/graph.json.gz", bomb)
    assert read_json("a/library.json", b'{"x": 1}') == {"x": 1}  # not compressed: read as it is


def test_a_gzip_bomb_in_a_points_member_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                   target_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, points_only: None) -> None:
    """The bound is 1 MB here: the demo's real members fit it (the good file restores under it,
    after the bomb), a 16 MB bomb of 16 KB does not. The checksums match: only inflating finds it,
    after the library was created, and what was created goes."""
    cap = 1 << 20
    monkeypatch.setattr(archive, "MAX_JSON_BYTES", cap)
    bomb = gzip.compress(b"[" + b" " * (16 << 20) + b"]", compresslevel=9)
    path = rebuild(tmp_path / "bomb.rsbak", replaced(body, POINTS_JSON, bomb))
    refused(target, target_dir, path, re.escape(f"backup member {POINTS_JSON} inflates past {cap} bytes"))
    (c,) = target.restore(rebuild(tmp_path / "ok.rsbak", body)).libraries
    assert c.points > 0


# ---------------------------------------------------------------------------------------------
# 8. npz members: stored entries of numbers only


def _npz_arrays(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("kind", ["compressed", "object array", "not a zip"])
def test_an_npz_member_that_is_not_plain_numbers_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                            target_dir: Path, tmp_path: Path, kind: str, points_only: None) -> None:
    arrays = _npz_arrays(dict(body)[POINTS_NPZ])
    buf = io.BytesIO()
    if kind == "compressed":
        np.savez_compressed(buf, **arrays)
        match = re.escape(f"backup member {POINTS_NPZ} holds a compressed array")
    elif kind == "object array":
        np.savez(buf, **arrays, payload=np.array([{"os": "system"}], dtype=object))
        match = re.escape(f"backup member {POINTS_NPZ} is not a valid array file: Object arrays cannot be loaded")
    else:
        buf.write(b"PK\x03\x04 not really a zip")
        match = re.escape(f"backup member {POINTS_NPZ} is not a valid array file")
    path = rebuild(tmp_path / "npz.rsbak", replaced(body, POINTS_NPZ, buf.getvalue()))
    refused(target, target_dir, path, match)


# ---------------------------------------------------------------------------------------------
# 9. decode: a batch's rows and arrays, checked


NAME = "lib/points/000000.npz"


def _pid(i: int) -> str:
    return str(uuid.UUID(int=0xA11CE << 64 | i))


def _batch() -> tuple[list[dict[str, Any]], bytes]:
    rng = np.random.default_rng(3)
    points = [PointData(_pid(i), {"kind": "chunk", "n": i},
                        sparse={"bm25_chunk": SparseVector([1, 5 + i], [0.5, 1.5])},
                        dense={"dense_chunk": rng.standard_normal(4).astype(np.float32),
                               "page_full": rng.standard_normal((2 + i, 3)).astype(np.float32)})
              for i in range(3)]
    rows, data = encode(points)
    return json.loads(json.dumps(rows)), data


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_decode_takes_back_what_encode_wrote() -> None:
    rows, data = _batch()
    assert [p.id for p in decode(NAME, rows, data)] == [_pid(i) for i in range(3)]


@pytest.mark.parametrize(("spoil", "match"), [
    (lambda r: r[1].update(id="not-a-uuid"), r"point id 'not-a-uuid' is not a UUID"),
    (lambda r: r[1].update(id=None), r"point id None is not a UUID"),
    (lambda r: r[0].pop("payload"), r"a point has no payload"),
    (lambda r: r.__setitem__(2, "row"), r"a point has no payload"),
    (lambda r: r[2]["multi"].update(page_full=[0, 999]), r"a vector span \[0, 999\] is out of range"),
    (lambda r: r[2]["multi"].update(page_full=[-1, 2]), r"a vector span \[-1, 2\] is out of range"),
    (lambda r: r[2]["multi"].update(page_full=[1.0, 2]), r"a vector span \[1\.0, 2\] is out of range"),
    (lambda r: r[2]["multi"].update(page_full=[0, 1, 2]), r"a vector span \[0, 1, 2\] is out of range"),
    (lambda r: r[0]["sparse"].update(bm25_chunk=[5, 2]), r"a vector span \[5, 2\] is out of range"),
    (lambda r: r[0]["single"].update(dense_chunk=3), r"vector row 3 is out of range"),
    (lambda r: r[0]["single"].update(dense_chunk=-1), r"vector row -1 is out of range"),
    (lambda r: r[0]["multi"].update(other=[0, 1]), r"lacks the vectors of multi\.other"),
    (lambda r: r[0]["sparse"].update(other=[0, 1]), r"lacks the sparse vectors of other"),
], ids=["id", "no-id", "no-payload", "not-a-row", "span-past-end", "span-negative", "span-float",
        "span-three", "sparse-span", "row-past-end", "row-negative", "no-such-multi", "no-such-sparse"])
def test_decode_refuses_bad_rows(spoil: Any, match: str) -> None:
    rows, data = _batch()
    spoil(rows)
    with pytest.raises(BackupFileError, match=re.escape(NAME) + ".*" + match):
        decode(NAME, rows, data)


def test_decode_refuses_a_batch_that_is_not_a_list() -> None:
    _, data = _batch()
    with pytest.raises(BackupFileError, match="does not hold a list of points"):
        decode(NAME, {"rows": []}, data)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_decode_refuses_non_finite_vectors(bad: float) -> None:
    for field, v in (("page_full", np.array([[1, 2], [3, bad]], np.float32)),
                     ("dense_chunk", np.array([1, bad, 3], np.float32))):
        rows, data = encode([PointData(_pid(9), {"kind": "chunk"}, dense={field: v})])
        # Never int8; float16 holds an infinity (and 1, 2, 3) exactly, but no NaN equals itself.
        kind, form = "multi" if v.ndim == 2 else "single", "f32" if np.isnan(bad) else "f16"
        assert list(_npz_arrays(data)) == [f"{kind}.{field}.{form}"]
        with pytest.raises(BackupFileError, match=rf"point {_pid(9)} has non-finite values in {field}"):
            decode(NAME, rows, data)


def test_decode_refuses_a_non_finite_int8_scale() -> None:
    codes = np.array([[127, -3], [5, 127]], np.int8)
    v = codes.astype(np.float32) * np.float32(0.25)
    rows, data = encode([PointData(_pid(1), {}, dense={"page_full": v})])
    arrays = _npz_arrays(data)
    assert set(arrays) == {"multi.page_full.codes", "multi.page_full.scale"}
    arrays["multi.page_full.scale"] = np.array([0.25, np.nan], np.float32)
    with pytest.raises(BackupFileError, match="non-finite values in page_full"):
        decode(NAME, rows, _npz(arrays))


@pytest.mark.parametrize("spoil", ["codes int16", "codes 1-D", "scale float64", "scale short", "no scale",
                                   "f32 as float64", "f32 1-D", "sparse index int64", "sparse lengths differ"])
def test_decode_refuses_malformed_arrays(spoil: str) -> None:
    int8 = np.array([[127, 0], [-127, 3]], np.int8).astype(np.float32) * np.float32(0.5)
    rows, data = encode([PointData(_pid(1), {}, sparse={"s": SparseVector([1, 2], [0.5, 0.25])},
                                   dense={"page_full": int8,
                                          "other": np.array([[0.1, 0.2]], np.float32)})])
    a = _npz_arrays(data)
    assert {"multi.page_full.codes", "multi.other.f32"} <= set(a)
    key, match = "multi.page_full", "array multi.page_full is malformed"
    if spoil == "codes int16":
        a[f"{key}.codes"] = a[f"{key}.codes"].astype(np.int16)
    elif spoil == "codes 1-D":
        a[f"{key}.codes"] = a[f"{key}.codes"].reshape(-1)
    elif spoil == "scale float64":
        a[f"{key}.scale"] = a[f"{key}.scale"].astype(np.float64)
    elif spoil == "scale short":
        a[f"{key}.scale"] = a[f"{key}.scale"][:1]
    elif spoil == "no scale":
        del a[f"{key}.scale"]
    elif spoil == "f32 as float64":
        a["multi.other.f32"] = a["multi.other.f32"].astype(np.float64)
        match = "array multi.other is malformed"
    elif spoil == "f32 1-D":
        a["multi.other.f32"] = a["multi.other.f32"].reshape(-1)
        match = "array multi.other is malformed"
    elif spoil == "sparse index int64":
        a["sparse.s.indices"] = a["sparse.s.indices"].astype(np.int64)
        match = "lacks the sparse vectors of s"
    else:
        a["sparse.s.values"] = a["sparse.s.values"][:1]
        match = "lacks the sparse vectors of s"
    with pytest.raises(BackupFileError, match=re.escape(f"backup member {NAME}") + ".*" + re.escape(match)):
        decode(NAME, rows, _npz(a))


@pytest.mark.parametrize("kind", ["compressed", "object array", "not a zip", "empty"])
def test_decode_refuses_an_npz_that_is_not_plain_numbers(kind: str) -> None:
    rows, data = _batch()
    arrays = _npz_arrays(data)
    buf = io.BytesIO()
    if kind == "compressed":
        np.savez_compressed(buf, **arrays)
        match = "holds a compressed array"
    elif kind == "object array":
        np.savez(buf, **arrays, evil=np.array([object()], dtype=object))
        match = "is not a valid array file: Object arrays cannot be loaded when allow_pickle=False"
    elif kind == "not a zip":
        buf.write(b"\x89PNG\r\n\x1a\n" + bytes(64))
        match = "is not a valid array file: File is not a zip file"
    else:
        match = "is not a valid array file: File is not a zip file"
    with pytest.raises(BackupFileError, match=re.escape(f"backup member {NAME} {match}")):
        decode(NAME, rows, buf.getvalue())


def test_a_compressed_entry_is_refused_even_among_stored_ones() -> None:
    rows, data = _batch()
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as out:
        for i, info in enumerate(src.infolist()):
            out.writestr(info.filename, src.read(info), zipfile.ZIP_DEFLATED if i == 1 else zipfile.ZIP_STORED)
        second = src.infolist()[1].filename
    with pytest.raises(BackupFileError, match=re.escape(f"holds a compressed array ({second})")):
        decode(NAME, rows, buf.getvalue())


# ---------------------------------------------------------------------------------------------
# 10. encode / decode round trip


def test_encode_and_decode_keep_every_vector_bit_for_bit_in_its_smallest_exact_form() -> None:
    rng = np.random.default_rng(20240611)
    sizes = [3, 1, 5, 2, 4]
    # int8-representable: codes in [-127, 127] (each row reaching +-127) times a power-of-two
    # scale per row, so codes * scale is exact in float32 and max|row| / 127 is the scale again.
    codes = [rng.integers(-127, 128, size=(n, 7)).astype(np.int8) for n in sizes]
    for c in codes:
        c[:, 3] = rng.choice(np.array([-127, 127], np.int8), size=len(c))
    scales = [np.exp2(-rng.integers(1, 12, size=n).astype(np.float32)) for n in sizes]
    int8 = [c.astype(np.float32) * s[:, None] for c, s in zip(codes, scales, strict=True)]
    half = [rng.standard_normal((n, 6)).astype(np.float16).astype(np.float32) for n in sizes]
    full = [rng.standard_normal((n, 5)).astype(np.float32) for n in sizes]
    single = rng.standard_normal((len(sizes), 4)).astype(np.float32)
    sparse = [SparseVector(sorted(rng.choice(100_000, k, replace=False).tolist()),
                           rng.random(k).astype(np.float32).tolist()) for k in (3, 0, 7, 1, 2)]
    points = [PointData(_pid(i), {"kind": "page", "doc_id": f"d{i}", "nested": {"a": [i, None, "x"]}},
                        sparse={"bm25": sparse[i]},
                        dense={"page_full": int8[i], "page_half": half[i], "page_raw": full[i],
                               "dense_chunk": single[i]})
              for i in range(len(sizes))]
    points.insert(2, PointData(_pid(99), {"kind": "doc", "doc_id": "d99"}))  # no vectors at all

    rows, data = encode(points)

    # Stored: an uncompressed npz of exactly these arrays, each in the form worked out above.
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    stored = _npz_arrays(data)
    assert set(stored) == {"multi.page_full.codes", "multi.page_full.scale", "multi.page_half.f16",
                           "multi.page_raw.f32", "single.dense_chunk.f32", "sparse.bm25.indices",
                           "sparse.bm25.values"}
    assert stored["multi.page_full.codes"].dtype == np.int8
    assert np.array_equal(stored["multi.page_full.codes"], np.concatenate(codes))
    assert stored["multi.page_full.scale"].dtype == np.float32
    assert stored["multi.page_full.scale"].tobytes() == np.concatenate(scales).tobytes()
    assert stored["multi.page_half.f16"].dtype == np.float16
    assert stored["multi.page_half.f16"].tobytes() == np.concatenate(half).astype(np.float16).tobytes()
    assert stored["multi.page_raw.f32"].tobytes() == np.concatenate(full).tobytes()
    assert stored["single.dense_chunk.f32"].tobytes() == single.tobytes()
    assert stored["sparse.bm25.indices"].dtype == np.uint32
    assert stored["sparse.bm25.indices"].tolist() == [j for s in sparse for j in s.indices]
    assert stored["sparse.bm25.values"].tolist() == [x for s in sparse for x in s.values]
    # The rows say where: multivector spans follow one another, single vectors by row.
    starts = np.cumsum([0, *sizes])
    with_vectors = [r for r in rows if "multi" in r]
    assert [r["multi"]["page_full"] for r in with_vectors] == [[int(starts[i]), n] for i, n in enumerate(sizes)]
    assert [r["single"]["dense_chunk"] for r in with_vectors] == list(range(len(sizes)))

    got = decode(NAME, json.loads(json.dumps(rows)), data)  # through JSON, as a backup stores the rows

    assert [p.id for p in got] == [p.id for p in points]
    assert [p.payload for p in got] == [p.payload for p in points]
    for want, have in zip(points, got, strict=True):
        assert have.sparse == want.sparse
        assert set(have.dense) == set(want.dense)
        for f, v in want.dense.items():
            assert have.dense[f].dtype == np.float32 and have.dense[f].shape == v.shape, f
            assert have.dense[f].tobytes() == v.tobytes(), f  # bit for bit


def test_an_all_zero_multivector_is_kept_as_int8() -> None:
    zero = np.zeros((3, 4), np.float32)
    rows, data = encode([PointData(_pid(0), {}, dense={"page_full": zero})])
    stored = _npz_arrays(data)
    assert np.array_equal(stored["multi.page_full.codes"], np.zeros((3, 4), np.int8))
    (p,) = decode(NAME, rows, data)
    assert p.dense["page_full"].tobytes() == zero.tobytes()


# ---------------------------------------------------------------------------------------------
# Hostile files that once escaped as another exception than BackupFileError


def test_a_member_name_with_a_trailing_newline_is_refused(body: list[tuple[str, bytes]], thumb: str,
                                                          target: Engine, target_dir: Path, tmp_path: Path) -> None:
    members = [(n + "\n" if n == thumb else n, d) for n, d in body]
    refused(target, target_dir, rebuild(tmp_path / "nl.rsbak", members), "not part of a ragspine backup's layout")


def test_a_header_whose_date_is_not_a_number_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                        target_dir: Path, tmp_path: Path) -> None:
    refused(target, target_dir, rebuild(tmp_path / "date.rsbak", header_with(body, created_at="yesterday")),
            "created_at|header")


def test_a_deeply_nested_json_member_is_refused(body: list[tuple[str, bytes]], target: Engine, target_dir: Path,
                                                tmp_path: Path) -> None:
    path = write_tar(tmp_path / "deep.rsbak", [*body, (TRAILER, b"[" * 100_000 + b"]" * 100_000)])
    refused(target, target_dir, path, "nested too deeply|not valid JSON|checksum list")


def test_a_graph_source_that_is_not_an_object_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                         target_dir: Path, tmp_path: Path) -> None:
    graph = gzip.compress(json.dumps({"sources": {"demo-relations.csv": [1, 2]}}).encode())
    refused(target, target_dir, rebuild(tmp_path / "graph.rsbak", replaced(body, GRAPH, graph)),
            "graph source")


def test_a_document_point_with_a_bad_version_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                        target_dir: Path, tmp_path: Path, points_only: None) -> None:
    rows = json.loads(gzip.decompress(dict(body)[POINTS_JSON]))
    doc = next(r for r in rows if r["payload"].get("kind") == "doc" and r["payload"].get("active_version"))
    doc["payload"]["active_version"] = "abc"
    path = rebuild(tmp_path / "ver.rsbak", replaced(body, POINTS_JSON, gzip.compress(json.dumps(rows).encode())))
    refused(target, target_dir, path, "active_version|version")


@pytest.mark.parametrize("key", ["sparse", "single", "multi"])
def test_decode_refuses_vector_maps_that_are_not_objects(key: str) -> None:
    rows, data = _batch()
    rows[0][key] = [0, 1]
    with pytest.raises(BackupFileError):
        decode(NAME, rows, data)


@pytest.mark.parametrize("drop", [".pdf", ".json"])
def test_an_owed_pdf_without_its_description_or_the_reverse_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                                      target_dir: Path, tmp_path: Path,
                                                                      drop: str) -> None:
    pending = [n for n, _ in body if "/pending/" in n]
    assert len(pending) == 2  # the PDF whose OCR is owed and its sidecar
    members = [(n, d) for n, d in body if not (n in pending and n.endswith(drop))]
    refused(target, target_dir, rebuild(tmp_path / f"pending{drop}.rsbak", members), "lacks its PDF or its description")


def test_an_owed_pdf_whose_description_is_not_an_object_is_refused(body: list[tuple[str, bytes]], target: Engine,
                                                                   target_dir: Path, tmp_path: Path) -> None:
    side = next(n for n, _ in body if "/pending/" in n and n.endswith(".json"))
    path = rebuild(tmp_path / "side.rsbak", replaced(body, side, b"[1, 2]"))
    refused(target, target_dir, path, "does not describe its PDF")
