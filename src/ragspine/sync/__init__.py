"""Folder sync (``ragspine sync``): keep a library equal to a folder of PDFs.

New files are ingested, changed ones re-ingested, unchanged ones skipped (by fingerprint, then
content key), and with ``delete`` the documents of files that are gone are deleted, but only
those this folder's sync created: the library records which documents each root owns
(:mod:`ragspine.catalog.sync_record`). ``files`` holds the path -> document id rule and the
sidecar metadata, ``plan`` the decisions, ``run`` their execution through an ``Engine``, and
``watch`` (imported on its own: it needs watchdog) the ``--watch`` loop.
"""

from ragspine.sync.files import doc_id_for, scan
from ragspine.sync.run import COUNTERS, Outcome, RootError, SyncOptions, SyncReport, sync_folder

__all__ = ["COUNTERS", "Outcome", "RootError", "SyncOptions", "SyncReport", "doc_id_for", "scan", "sync_folder"]
