"""The upgrades between library formats (:mod:`ragspine.catalog.formats`).

An upgrade runs the steps from the library's format to the current one in order, under the
library's write lock (and writer lease). Each step is idempotent, and the record's version moves
only after a step's writes are done, so an upgrade that is interrupted is finished by running it
again: the record still names the last completed format, and the step in flight runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ragspine.catalog.formats import LIBRARY_FORMAT, LibraryFormatError, check_format
from ragspine.catalog.libraries import Libraries

logger = logging.getLogger(__name__)


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
