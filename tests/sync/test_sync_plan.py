"""The pure decisions of a sync, on hand-built records and manifest entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragspine.catalog.sync_record import SyncedFile, sync_point
from ragspine.sync.files import LocalFile
from ragspine.sync.plan import plan_file, plan_gone

ROOT, OTHER = "/data/reports", "/old/reports"
F = LocalFile("x.pdf", Path("/data/reports/x.pdf"), "x.pdf", size=10, mtime_ns=5, meta={}, meta_sha="m0")


def rec(root: str = ROOT, state: Any = "indexed", keys: tuple[str, ...] = ("k1",), **kw: Any) -> SyncedFile:
    base: dict[str, Any] = {"doc_id": "x.pdf", "path": "x.pdf", "size": 10, "mtime_ns": 5, "meta_sha": "m0",
                            "sha256": "s1"}
    base.update(kw)
    return SyncedFile(root=root, state=state, keys=keys, **base)


def entry(key: str, **kw: Any) -> dict[str, Any]:
    return {"doc_id": "x.pdf", "content_key": key, "active_version": 1, **kw}


def plan(r: SyncedFile | None, e: dict[str, Any] | None, others: list[tuple[str, SyncedFile]] = (),  # type: ignore[assignment]
         *, exists: bool = True, key: str = "k1", hashed: list[str] | None = None, sha: str = "s2") -> Any:
    """``sha_of`` answers ``sha``; ``s1`` has key ``k1``, ``s2`` has ``key``."""
    def sha_of(f: LocalFile) -> str:
        if hashed is not None:
            hashed.append(f.rel)
        return sha

    return plan_file(F, r, e, list(others), root=ROOT, sha_of=sha_of,
                     key_of=lambda f, sha: {"s1": "k1", "s2": key}[sha], root_exists=lambda _: exists)


def test_same_fingerprint_same_key_is_unchanged_without_hashing() -> None:
    hashed: list[str] = []
    a = plan(rec(), entry("k1"), hashed=hashed)
    assert (a.kind, a.pid, hashed) == ("unchanged", sync_point(ROOT, "x.pdf"), [])


def test_new_mtime_same_bytes_is_a_touch_after_hashing() -> None:
    hashed: list[str] = []
    a = plan(rec(mtime_ns=4), entry("k1"), sha="s1", hashed=hashed)
    assert (a.kind, a.sha256, a.key, hashed) == ("touch", "s1", "k1", ["x.pdf"])


def test_new_bytes_are_an_update_claiming_both_keys() -> None:
    a = plan(rec(size=9), entry("k1"), key="k9")
    assert (a.kind, a.key, a.keys) == ("update", "k9", ("k1",))


def test_bytes_that_failed_fail_again_unread_until_something_changes() -> None:
    failed = rec(state="failed", keys=("k0", "k1"), error="the PDF is corrupt")
    hashed: list[str] = []
    a = plan(failed, entry("k0"), hashed=hashed)
    why = "the PDF is corrupt (not read again until the file, its metadata or the settings change)"
    assert (a.kind, a.reason, hashed) == ("fail", why, [])
    # New settings (another content key for the same bytes) or new bytes: tried again.
    resettled = plan_file(F, failed, entry("k0"), [], root=ROOT, sha_of=lambda f: "s1", key_of=lambda f, s: "k3",
                          root_exists=lambda _: True)
    assert (resettled.kind, resettled.key, resettled.keys) == ("update", "k3", ("k0",))
    assert plan(failed.with_(size=11), entry("k0"), key="k3").kind == "update"


def test_owed_ocr_is_finished_not_reingested() -> None:
    a = plan(rec(), entry("k1", ocr="pending"))
    assert (a.kind, a.owes_ocr) == ("unchanged", True)


@pytest.mark.parametrize(("r", "e", "others", "exists", "want"), [
    (None, entry("k1"), [], True, "fail"),                                      # an upload holds the id
    (rec(keys=("k0",)), entry("k1"), [], True, "fail"),                          # replaced since
    (None, entry("k1"), [("p", rec(root=OTHER))], True, "fail"),                # another live root's
    (None, entry("k1"), [("p", rec(root=OTHER))], False, "touch"),              # a vanished root's: adopted
    (None, {"doc_id": "x.pdf", "content_key": "k7", "staging_version": 3}, [], True, "add"),  # a rolled-back write
])
def test_who_may_change_a_document(r: SyncedFile | None, e: dict[str, Any], others: list[Any], exists: bool,
                                   want: str) -> None:
    a = plan(r, e, others, exists=exists)
    assert a.kind == want, a.reason
    if want == "touch":
        assert a.adopt == "p"


def test_restricted_is_never_hashed() -> None:
    f = LocalFile("x.pdf", F.path, "x.pdf", 10, 5, {"sensitivity": "Restricted"}, "m1")
    hashed: list[str] = []
    a = plan_file(f, rec(), entry("k1"), [], root=ROOT, sha_of=lambda f: hashed.append(f.rel) or "s",
                  key_of=lambda f, s: "k", root_exists=lambda _: True)
    assert (a.kind, a.restricted, a.keys, hashed) == ("update", True, ("k1",), [])
    same = rec(state="dropped", doc_id=None, path=None, sha256=None, keys=(), meta_sha="m1")
    a = plan_file(f, same, None, [], root=ROOT, sha_of=lambda f: hashed.append(f.rel) or "s",
                  key_of=lambda f, s: "k", root_exists=lambda _: True)
    assert (a.kind, hashed) == ("unchanged", [])


@pytest.mark.parametrize(("r", "e", "delete", "want"), [
    (rec(), entry("k1"), False, "keep"),
    (rec(), entry("k1"), True, "delete"),
    (rec(state="claimed", keys=("k1", "k2")), entry("k1"), True, "delete"),  # a claim's old key is ours too
    (rec(), entry("k5"), True, "spare"),                                    # replaced by an upload since
    (rec(), None, True, "forget"),                                          # deleted by someone already
    (rec(state="claimed", keys=("k2",)), None, True, "forget"),             # never landed
    (rec(state="dropped", doc_id=None, path=None, keys=()), None, True, "forget"),
])
def test_gone_files(r: SyncedFile, e: dict[str, Any] | None, delete: bool, want: str) -> None:
    assert plan_gone("p", r, e, delete=delete).kind == want
