"""Where an ingest spends its time, stage by stage, so that a user can see which stage bounds it
(in an ingest's result, ``ragspine ingest``'s summary, ``/metrics`` and ``bench/ingest_ceiling.py``).

The stages of one document, as the ingesting thread lives them:

- ``parse``: opening the PDF, its text layer and tables, the OCR a first phase waits for, the
  policy, the profile, the staging entry: everything before the first batch is written;
- ``render_wait``: waiting for page renders (thumbnails and model images, made a batch or more
  ahead by a thread or the render workers): the renderers bound the ingest when it is large;
- ``encode_wait``: waiting for the page encoder (its own thread, a batch ahead:
  :mod:`ragspine.indexing.encode_stage`): the page model bounds it;
- ``points``: the dense passage encoder, BM25 weights, the page's first-stage vectors, points
  and thumbnails of each batch: this thread's own work bounds it;
- ``write_wait``: waiting for the writer thread to store the previous batch: the store bounds it;
- ``commit``: making the version live and committing it (statistics, retirement, listeners).

``encode`` is the encode thread's own time in the page model, and ``write`` the writer thread's
own time in the store; they overlap ``points`` and are not part of the ingesting thread's time.
The summary gives the encode thread's busy share of the pages' time (render wait to write wait):
on a GPU, how much of the ingest kept the device at work.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The ingesting thread's stages, in order; their seconds add up to (nearly) the whole ingest.
THREAD_STAGES = ("parse", "render_wait", "encode_wait", "points", "write_wait", "commit")
#: What :meth:`VersionWriter.write <ragspine.indexing.writer.VersionWriter.write>` measures.
WRITE_STAGES = ("render_wait", "encode_wait", "points", "write_wait", "encode", "write")
#: The other threads' own time: the page encoder's and the writer's.
SIDE_STAGES = ("encode", "write")
STAGES = (*THREAD_STAGES, *SIDE_STAGES)


def bound(times: Mapping[str, float]) -> str | None:
    """The stage of the ingesting thread that took the most time (None: nothing measured)."""
    best = max(THREAD_STAGES, key=lambda k: times.get(k, 0.0))
    return best if times.get(best, 0.0) > 0 else None


def summary(times: Mapping[str, float]) -> str:
    """One line: each stage's share of the ingesting thread's time, and the bound."""
    total = sum(times.get(k, 0.0) for k in THREAD_STAGES)
    if total <= 0:
        return "no stage timed"
    parts = [f"{k.replace('_', ' ')} {100 * times.get(k, 0.0) / total:.0f}%" for k in THREAD_STAGES]
    encode = times.get("encode", 0.0)
    busy = f" (busy {100 * encode / pages:.0f}% of the pages' time)" if (pages := _pages_time(times)) > 0 and encode else ""
    side = f"encode thread {encode:.1f} s{busy}, writer thread {times.get('write', 0.0):.1f} s"
    return f"time by stage: {', '.join(parts)} ({side}): {bound(times)} bounds it"


def _pages_time(times: Mapping[str, float]) -> float:
    """The ingesting thread's seconds from the first page batch to the last write: the time the
    page encoder could have been busy (its busy share is the device's, where it has one)."""
    return sum(times.get(k, 0.0) for k in ("render_wait", "encode_wait", "points", "write_wait"))


def add(into: dict[str, float], times: Mapping[str, float]) -> None:
    for k, v in times.items():
        into[k] = into.get(k, 0.0) + v
