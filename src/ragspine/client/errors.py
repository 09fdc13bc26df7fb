"""Errors the client raises."""

from __future__ import annotations

from typing import Any

from ragspine.errors import RagspineError


class ApiError(RagspineError):
    """The server answered with an error (``application/problem+json``). ``status``, ``type``
    (``unknown-library``, ``forbidden``...), ``title`` and ``detail`` are the server's; a
    ``RagspineError`` handler catches local and remote errors alike."""

    def __init__(self, status: int, type_: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.type = type_
        self.title = title

    def __str__(self) -> str:
        return f"{self.status} {self.title}: {self.detail}"

    @classmethod
    def from_response(cls, status: int, body: bytes, content_type: str) -> ApiError:
        problem: Any = None
        if "json" in content_type:
            try:
                import json

                problem = json.loads(body)
            except ValueError:
                problem = None
        if isinstance(problem, dict) and "detail" in problem:
            return cls(status, str(problem.get("type", "")).removeprefix("/problems/") or "http-error",
                       str(problem.get("title", "")), str(problem["detail"]))
        text = body[:200].decode("utf-8", "replace").strip()
        return cls(status, "http-error", "HTTP error", text or f"the server answered {status}")


class JobFailedError(ApiError):
    """A job the client waited for ended ``failed``: the job's own error."""


class JobTimeoutError(TimeoutError):
    """A job the client waited for did not end in time (it goes on on the server; poll it
    again with ``job_id``)."""

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id
