"""Page thumbnails on disk, one folder per document version."""

from __future__ import annotations

import shutil
from pathlib import Path


class Thumbnails:
    """Page thumbnails under ``<data_dir>/thumbnails/<library>/<doc_id>/v<version>/p<n>.png``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "thumbnails"

    def doc_dir(self, library: str, doc_id: str) -> Path:
        return self.root / library / doc_id

    def path(self, library: str, doc_id: str, version: int, page: int) -> Path:
        return self.doc_dir(library, doc_id) / f"v{version}" / f"p{page}.png"

    def remove_version(self, library: str, doc_id: str, version: int) -> None:
        shutil.rmtree(self.doc_dir(library, doc_id) / f"v{version}", ignore_errors=True)

    def remove_doc(self, library: str, doc_id: str) -> None:
        shutil.rmtree(self.doc_dir(library, doc_id), ignore_errors=True)

    def remove_library(self, library: str) -> None:
        shutil.rmtree(self.root / library, ignore_errors=True)
