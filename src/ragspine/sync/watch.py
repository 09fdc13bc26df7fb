"""``ragspine sync --watch``: sync once, then again after each burst of changes in the folder.

watchdog reports every change of a PDF or a sidecar under the root (creations, writes, moves,
deletions, and folders moved or deleted). A round starts once the folder has been quiet for
``quiet_s`` seconds (a copy of many files is one round, not hundreds). Inside the round a file
modified less than ``quiet_s`` ago is *deferred* (still being written), and a round that
deferred files schedules another one; a half-written file that fails to parse fails that round
only (its claim is not an ``indexed`` entry) and is read again at its next change. Ctrl-C
(``KeyboardInterrupt``) or ``stop`` ends the loop; the observer is stopped and joined either way.

:class:`Debouncer` and :class:`WatchLoop` take the clock as an argument, so tests drive them
with injected events and a fake clock; :func:`watch` wires them to a real observer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from ragspine.sync.files import SIDECAR_SUFFIX, SUFFIX

#: Seconds of quiet before a round (also the age a file must reach to be read).
DEFAULT_QUIET_S = 2.0
#: Longest sleep of the loop without an event (it checks ``stop`` this often).
_IDLE_S = 0.5


class Debouncer:
    """When the next round is due: ``quiet_s`` after the last change noticed."""

    def __init__(self, quiet_s: float = DEFAULT_QUIET_S) -> None:
        if quiet_s < 0:
            raise ValueError(f"quiet_s must be >= 0, got {quiet_s}")
        self.quiet_s = quiet_s
        self._last: float | None = None
        self._lock = threading.Lock()

    def notice(self, now: float) -> None:
        with self._lock:
            self._last = now

    def wait_s(self, now: float) -> float | None:
        """Seconds until the round is due (0: due now), or None when nothing is waiting."""
        with self._lock:
            return None if self._last is None else max(0.0, self._last + self.quiet_s - now)

    def take(self, now: float) -> bool:
        """True (once) when a round is due now; the changes noticed so far are then its own."""
        with self._lock:
            if self._last is None or now - self._last < self.quiet_s:
                return False
            self._last = None
            return True


def relevant(path: str) -> bool:
    """A change worth a round: a PDF or a sidecar, not hidden."""
    name = Path(path).name
    low = name.lower()
    return not name.startswith(".") and low.endswith((SUFFIX, SUFFIX + SIDECAR_SUFFIX))


class ChangeHandler(FileSystemEventHandler):
    """watchdog handler: every relevant event moves the debouncer's clock and wakes the loop."""

    def __init__(self, debouncer: Debouncer, clock: Callable[[], float], wake: threading.Event) -> None:
        self.debouncer, self.clock, self.wake = debouncer, clock, wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads (our own included) change nothing
        paths = [str(event.src_path), str(getattr(event, "dest_path", "") or "")]
        if event.is_directory and event.event_type in ("moved", "deleted"):
            hit = True  # a folder of PDFs moved or removed
        else:
            hit = any(p and relevant(p) for p in paths)
        if hit:
            self.debouncer.notice(self.clock())
            self.wake.set()


class WatchLoop:
    """Runs ``run_once`` when the debouncer says so; ``run_once`` returns whether files were
    deferred (another round is then scheduled)."""

    def __init__(self, run_once: Callable[[], bool], debouncer: Debouncer, clock: Callable[[], float]) -> None:
        self.run_once, self.debouncer, self.clock = run_once, debouncer, clock
        self.rounds = 0

    def step(self) -> bool:
        """One check: a round if one is due; whether it ran."""
        if not self.debouncer.take(self.clock()):
            return False
        self.rounds += 1
        if self.run_once():
            self.debouncer.notice(self.clock())  # deferred files: look again after the quiet time
        return True

    def sleep_s(self) -> float:
        wait = self.debouncer.wait_s(self.clock())
        return _IDLE_S if wait is None else min(_IDLE_S, wait)


def watch(
    root: Path,
    run_once: Callable[[], bool],
    *,
    quiet_s: float = DEFAULT_QUIET_S,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_ready: Callable[[], Any] | None = None,
) -> int:
    """Sync now, then after each burst of changes until ``stop`` is set or Ctrl-C; the rounds
    run after the first. Ctrl-C propagates as ``KeyboardInterrupt`` after a clean stop."""
    stop = stop or threading.Event()
    wake = threading.Event()
    debouncer = Debouncer(quiet_s)
    loop = WatchLoop(run_once, debouncer, clock)
    observer = Observer()
    observer.schedule(ChangeHandler(debouncer, clock, wake), str(root), recursive=True)
    observer.start()  # before the first round: a change made during it is not missed
    try:
        if run_once():
            debouncer.notice(clock())
        if on_ready is not None:
            on_ready()
        while not stop.is_set():
            wake.wait(loop.sleep_s())
            wake.clear()
            loop.step()
    finally:
        observer.stop()
        observer.join(timeout=5)
    return loop.rounds
