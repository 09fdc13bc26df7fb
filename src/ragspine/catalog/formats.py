"""Library format versions: which one this code reads, and the refusals of any other.

A library's record carries the format it was written in (``format_version``; a record without
one is format 1, everything written before versions existed). Code reads exactly one format,
:data:`LIBRARY_FORMAT`:

- an older library is refused with the command that upgrades it
  (``ragspine libraries --upgrade NAME``), never read as if it were current;
- a newer one (written by a newer ragspine) is refused: this code cannot know its layout.

The upgrades between formats are in :mod:`ragspine.catalog.upgrade`.
"""

from __future__ import annotations

from ragspine.errors import ConflictError

#: The format this code writes and reads.
LIBRARY_FORMAT = 2
#: The format of a record that names none.
UNVERSIONED_FORMAT = 1


class LibraryUnavailableError(ConflictError):
    """A library that exists but cannot be read now (409; the detail says why and what to do)."""

    type = "library-unavailable"
    title = "Library unavailable"


class LibraryFormatError(LibraryUnavailableError):
    """A library of another format than this code reads (409, the detail says what to run)."""

    type = "library-format"
    title = "Library format"


class LibraryRestoringError(LibraryUnavailableError):
    """A library whose restore is under way, or was interrupted (409)."""

    type = "library-restoring"
    title = "Library being restored"


def check_restored(name: str, restoring: bool) -> None:
    """Raise :class:`LibraryRestoringError` for a library whose restore has not finished: its
    record is written first, marked, and unmarked only when everything else is in."""
    if restoring:
        raise LibraryRestoringError(
            f"library '{name}' is being restored, or its restore was interrupted; wait for it, or delete "
            f"it (ragspine libraries --delete {name}) and restore it again")


def upgrade_command(name: str) -> str:
    return f"ragspine libraries --upgrade {name}"


def check_format(name: str, version: int) -> None:
    """Raise :class:`LibraryFormatError` unless ``version`` is the format this code reads."""
    if version == LIBRARY_FORMAT:
        return
    if version < LIBRARY_FORMAT:
        raise LibraryFormatError(
            f"library '{name}' is in format {version}; this ragspine reads format {LIBRARY_FORMAT}. "
            f"Upgrade it with: {upgrade_command(name)} (atomic, safe to run again if interrupted)")
    raise LibraryFormatError(
        f"library '{name}' is in format {version}, written by a newer ragspine; this one reads format "
        f"{LIBRARY_FORMAT}. Run a ragspine that knows format {version} (nothing was changed)")
