"""What a sync does to each file and to each recorded file that is gone: pure decisions from
the folder as scanned, the root's sync record, the other roots' records and the manifest.

Per present file (:func:`plan_file`):

- ``fail``: a bad sidecar, a clash of ids, a document id already taken by a document this
  root did not sync (an upload, another root's file, or one of ours replaced since), or bytes
  that failed to index before and have not changed since (not read again);
- ``defer`` (``--watch`` only): modified less than the settle time ago, still being written;
- ``unchanged``: the fingerprint matches the record and the manifest holds that content key;
  no byte is read. ``touch``: the size, mtime or record changed but the content key did not
  (the bytes are hashed to know): only the record is rewritten. Both count as unchanged;
- ``add`` / ``update``: ingest (update when a document of ours is replaced, or a file known
  before changed).

The content key is :meth:`Indexer.content_key` (bytes, metadata, settings), the same test as
``Engine.is_unchanged``: a changed setting that shapes the index re-ingests, as ``ragspine
ingest`` would. The file is hashed only when its size, mtime or metadata differ from the record.

A document id owned by another root whose folder no longer exists is *adopted* (the folder
was moved): its document is kept, and re-ingested only if its content key differs.

Per recorded file of this root that is gone (:func:`plan_gone`), with ``--delete``:
``delete`` the document when its manifest entry is still one this root committed, ``spare`` it
(forget the record, keep the document) when something else replaced it since, or only
``forget`` the record when nothing of it is in the index. Without ``--delete``: ``keep``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragspine.catalog.sync_record import SyncedFile, sync_point
from ragspine.errors import RagspineError
from ragspine.indexing.ocr_phase import OPEN_STATES
from ragspine.policy import is_restricted
from ragspine.sync.files import LocalFile

Kind = Literal["add", "update", "unchanged", "touch", "fail", "defer", "delete", "spare", "forget", "keep"]


@dataclass(frozen=True)
class Action:
    kind: Kind
    pid: str
    #: The relative path (None for a gone RESTRICTED file: nothing of it was kept).
    rel: str | None
    doc_id: str | None
    reason: str = ""
    file: LocalFile | None = None
    sha256: str | None = None
    key: str | None = None
    #: The document is RESTRICTED: dropped unread (nothing hashed, nothing kept).
    restricted: bool = False
    #: Content keys already this root's for the document (kept in the claim).
    keys: tuple[str, ...] = ()
    #: Another (vanished) root's record point this action takes the document over from.
    adopt: str | None = None
    #: The manifest entry owes OCR (pending or failed): an unchanged file finishes it.
    owes_ocr: bool = False


def live(entry: Mapping[str, Any] | None) -> bool:
    """A manifest entry of a document that exists (a committed version, or one owed whole to
    OCR); an entry left by a rolled-back write does not."""
    return bool(entry and (entry.get("active_version") or entry.get("ocr") in OPEN_STATES))


def plan_file(
    f: LocalFile,
    rec: SyncedFile | None,
    entry: Mapping[str, Any] | None,
    others: list[tuple[str, SyncedFile]],
    *,
    root: str,
    sha_of: Callable[[LocalFile], str],
    key_of: Callable[[LocalFile, str], str],
    root_exists: Callable[[str], bool],
    young: bool = False,
) -> Action:
    """One present file's action. ``others``: other roots' record entries for its id;
    ``young``: modified within the settle time (``--watch``)."""
    pid = sync_point(root, f.doc_id)

    def act(kind: Kind, **kw: Any) -> Action:
        return Action(kind, pid, f.rel, f.doc_id, file=f, **kw)

    if f.error is not None:
        return act("fail", reason=f.error)
    if young:
        return act("defer", reason="still being written; synced once it has settled")
    entry = entry if live(entry) else None
    keys = tuple(rec.keys) if rec is not None else ()
    adopt = None
    if entry is not None and entry.get("content_key") not in keys:
        owners = [(p, o) for p, o in others if entry.get("content_key") in o.keys]
        if not owners:
            return act("fail", reason=f"document {f.doc_id} is already in the library and was not created by a "
                       "sync of this folder (an upload, or replaced since); it is left alone: rename the file or "
                       "delete that document")
        opid, other = owners[0]
        if root_exists(other.root):
            return act("fail", reason=f"document {f.doc_id} belongs to the sync of {other.root}; it is left alone")
        # That folder is not there now: moved for good, or an unmounted share. Only the same
        # bytes and metadata as it committed say "moved": anything else would overwrite its
        # document while it is away.
        try:
            same = key_of(f, sha_of(f)) == entry.get("content_key")
        except (OSError, RagspineError) as exc:
            return act("fail", reason=f"cannot be read: {exc}")
        if not same:
            return act("fail", reason=f"document {f.doc_id} belongs to the sync of {other.root}, which is not "
                       "there now, and this file differs from what it indexed; it is left alone")
        adopt, keys = opid, tuple(dict.fromkeys((*keys, *other.keys)))
    ours = (str(entry["content_key"]),) if entry is not None else ()
    changed: Kind = "update" if entry is not None or (rec is not None and rec.state == "dropped") else "add"
    try:
        md = f.metadata()
    except RagspineError as exc:
        return act("fail", reason=f"metadata: {exc.detail}")
    if is_restricted(md.sensitivity):
        if rec is not None and rec.state == "dropped" and entry is None and adopt is None:
            same = rec.same_stat(f.size, f.mtime_ns, f.meta_sha)
            return act("unchanged" if same else "touch", restricted=True)
        return act(changed, restricted=True, keys=ours, adopt=adopt)
    if (rec is not None and rec.state == "dropped" and entry is None and adopt is None
            and rec.same_stat(f.size, f.mtime_ns, f.meta_sha)):
        return act("unchanged")  # every page RESTRICTED, nothing changed since
    trusted = rec is not None and rec.sha256 is not None and (rec.size, rec.mtime_ns) == (f.size, f.mtime_ns)
    try:
        sha = rec.sha256 if trusted and rec is not None else sha_of(f)
    except OSError as exc:
        return act("fail", reason=f"cannot be read: {exc}")
    key = key_of(f, str(sha))
    if rec is not None and rec.state == "failed" and rec.keys and rec.keys[-1] == key and adopt is None:
        return act("fail", reason=f"{rec.error} (not read again until the file, its metadata or the settings "
                   "change)", sha256=sha, key=key)
    if entry is not None and entry.get("content_key") == key:
        owes = entry.get("ocr") in OPEN_STATES
        same = (rec is not None and rec.state == "indexed" and adopt is None and rec.keys == (key,)
                and rec.same_stat(f.size, f.mtime_ns, f.meta_sha))
        return act("unchanged" if same else "touch", sha256=sha, key=key, owes_ocr=owes, adopt=adopt)
    return act(changed, sha256=sha, key=key, keys=ours, adopt=adopt)


def plan_gone(
    pid: str, rec: SyncedFile, entry: Mapping[str, Any] | None, *, delete: bool,
    unreadable: Sequence[str] = (),
) -> Action:
    """The action for a recorded file of this root that is no longer in the folder (or whose
    folder could not be listed: ``unreadable``, relative paths, "" for the root)."""
    def act(kind: Kind, reason: str = "") -> Action:
        return Action(kind, pid, rec.path, rec.doc_id, reason=reason)

    path = rec.path or ""
    blind = [u for u in unreadable if u == "" or path == u or path.startswith(u + "/")]
    if blind:
        return act("fail", reason=f"its folder {blind[0] or '(the root)'} could not be listed, so whether the "
                   "file is gone is unknown; nothing is deleted")
    if not delete:
        return act("keep")
    if rec.state == "dropped" or rec.doc_id is None or not live(entry):
        return act("forget")
    if rec.owns(entry):
        return act("delete")
    return act("spare", reason=f"document {rec.doc_id} was replaced since this folder synced it "
               "(an upload?); it is left in the library")
