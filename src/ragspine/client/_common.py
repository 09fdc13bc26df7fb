"""What the blocking and the async client share besides the calls."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from ragspine import api
from ragspine.client._calls import Call
from ragspine.client.errors import ApiError, JobFailedError, JobTimeoutError

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8000"
#: Polling a job: the first look after 0.1 s, then 1.5x longer each time, at most 2 s apart.
FIRST_POLL_S, POLL_GROWTH, MAX_POLL_S = 0.1, 1.5, 2.0


def headers_for(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    out = {"Accept": "application/json"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    out.update(extra or {})
    return out


def check(status: int, body: bytes, content_type: str, accept: tuple[int, ...] = ()) -> None:
    if status >= 400 and status not in accept:
        raise ApiError.from_response(status, body, content_type)


def read(call: Call[T], r: httpx.Response) -> T:
    if call.reads == "none":
        return None  # type: ignore[return-value]
    if call.reads == "bytes":
        return r.content  # type: ignore[return-value]
    return call.parse(r.json())  # type: ignore[no-any-return]


def finished(job: api.Job, ocr: bool) -> bool:
    """Whether a polled job has ended (with its OCR, if asked); a failed one raises."""
    if job.state == "failed":
        e = job.error
        raise JobFailedError(e.status if e else 500, (e.type if e else "").removeprefix("/problems/") or "job-failed",
                             e.title if e else "Job failed", e.detail if e else f"job {job.id} failed")
    return job.state == "succeeded" and (not ocr or job.ocr not in ("pending",))


def next_delay(delay: float) -> float:
    """The pause before the next poll of a job: 1.5x the last one, at most 2 s."""
    return min(delay * POLL_GROWTH, MAX_POLL_S)


def timed_out(job_id: str) -> JobTimeoutError:
    return JobTimeoutError(f"job {job_id} has not ended yet; it goes on on the server (poll it with job())",
                           job_id)


# -- backup and restore: files streamed, not JSON calls ----------------------------------------

#: Backups are read and written in pieces of this size.
CHUNK = 1 << 20
TAR = "application/x-tar"
PathLike = str | os.PathLike[str]


def backup_request(library: str | Sequence[str] | None, native: bool = True) -> tuple[str, dict[str, Any]]:
    """The path and query of a backup download: one library, several, or every library
    (``native`` False: the points alone, without the embedded store's files)."""
    flag: dict[str, Any] = {} if native else {"native": "false"}
    if isinstance(library, str):
        return f"/v1/libraries/{library}/backup", flag
    return "/v1/backup", ({"library": list(library)} if library else {}) | flag


def restore_params(as_name: str | None, bm25_only: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"bm25_only": "true" if bm25_only else "false"}
    if as_name is not None:
        out["as"] = as_name
    return out


def chunks(fh: IO[bytes]) -> Iterator[bytes]:
    while block := fh.read(CHUNK):
        yield block


def part_file(dest: PathLike) -> tuple[Path, Path]:
    """``dest`` and the temporary file a download goes to first (renamed when complete, so a
    broken download never leaves a file that looks like a backup)."""
    path = Path(dest)
    return path, path.with_name(path.name + ".part")
