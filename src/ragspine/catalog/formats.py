"""Library format versions and the upgrades between them.

A library's record carries the format it was written in (``format_version``; a record without
one is format 1, everything written before versions existed). Code reads exactly one format,
:data:`LIBRARY_FORMAT`:

- an older library is refused with the command that upgrades it
  (``ragspine libraries --upgrade NAME``), never read as if it were current;
- a newer one (written by a newer ragspine) is refused: this code cannot know its layout.

An upgrade runs the steps from the library's format to the current one in order, under the
library's write lock (and writer lease). Each step is idempotent, and the record's version moves
only after a step's writes are done, so an upgrade that is interrupted is finished by running it
again: the record still names the last completed format, and the step in flight runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragspine.errors import ConflictError

if TYPE_CHECKING:
    from ragspine.catalog.libraries import Libraries

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Step:
    """The upgrade from format ``source`` to ``source + 1``: ``run(libraries, name)`` makes the
    library's layout that of the next format (idempotent); the record's version is set after."""

    source: int
    what: str
    run: Callable[[Libraries, str], None]


def _record_names_its_format(libraries: Libraries, name: str) -> None:
    """Format 1 -> 2: nothing in the points changes; from format 2 on, the record says which
    format the library is in (the version is written by :func:`upgrade` after this step)."""


#: Every step, by the format it starts from. A new format adds one here (and a fixture library
#: of the format before it in tests/fixtures/library_formats.py).
STEPS: dict[int, Step] = {
    1: Step(1, "the library record names its format", _record_names_its_format),
}


@dataclass
class Upgraded:
    library: str
    source: int
    target: int
    steps: list[str]

    def to_json(self) -> dict[str, object]:
        return {"library": self.library, "from": self.source, "to": self.target, "steps": self.steps}


def upgrade(libraries: Libraries, name: str, steps: dict[int, Step] | None = None) -> Upgraded:
    """Bring library ``name`` to :data:`LIBRARY_FORMAT`, one step at a time (see the module
    docstring); a library already there is left as it is."""
    steps = STEPS if steps is None else steps
    with libraries.lock(name):
        rec = libraries.get(name)
        source = rec.format_version
        if source > LIBRARY_FORMAT:
            check_format(name, source)  # refuses, naming the newer format
        done: list[str] = []
        while rec.format_version < LIBRARY_FORMAT:
            step = steps.get(rec.format_version)
            if step is None:
                raise LibraryFormatError(
                    f"library '{name}' is in format {rec.format_version} and this ragspine has no upgrade from "
                    f"it; upgrade through a release that reads format {rec.format_version + 1}")
            step.run(libraries, name)
            rec = libraries.get(name)  # the step may have changed the record
            rec.format_version = step.source + 1
            libraries.save(rec)
            logger.info("library %s: format %d -> %d (%s)", name, step.source, rec.format_version, step.what)
            done.append(f"{step.source} -> {step.source + 1}: {step.what}")
        return Upgraded(name, source, rec.format_version, done)
