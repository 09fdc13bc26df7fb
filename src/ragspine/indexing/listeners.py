"""Components told about committed and deleted documents (the relation graph keeps its edges
in step with the index)."""

from __future__ import annotations

import logging
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class IndexListener(Protocol):
    """Told about committed and deleted documents (the relation graph keeps its edges in step).

    ``passages`` holds, per passage of the committed version, ``chunk_id``, ``page``, ``text``
    and ``bbox`` — RESTRICTED pages are already gone. A listener that raises does not undo the
    commit; the failure is logged and reported in :attr:`IngestResult.warnings`.
    """

    def document_committed(
        self, library: str, doc_id: str, version: int, title: str, meta: dict[str, Any],
        passages: list[dict[str, Any]],
    ) -> None: ...

    def document_deleted(self, library: str, doc_id: str) -> None: ...

    def library_deleted(self, library: str) -> None: ...


class Listeners:
    """The registered listeners; a listener that raises is logged and reported, never fatal."""

    def __init__(self) -> None:
        self._items: list[IndexListener] = []

    def append(self, listener: IndexListener) -> None:
        self._items.append(listener)

    def __iter__(self):  # noqa: ANN204 - an iterator of IndexListener
        return iter(self._items)

    def notify(self, what: str, *args: Any) -> list[str]:
        """Call ``what`` on every listener; returns a warning per listener that failed."""
        failed = []
        for listener in self._items:
            try:
                getattr(listener, what)(*args)
            except Exception:
                logger.exception("%s failed in %s", what, type(listener).__name__)
                failed.append(f"{type(listener).__name__}.{what} failed; see the server log")
        return failed
