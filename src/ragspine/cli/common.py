"""Helpers every ``ragspine`` subcommand shares: one-line failures, settings, argument types.

Only the standard library at import time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

EXIT_USAGE = 2
EXIT_FAILED = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, not usage + error
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (argparse turns the error into one line)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"ragspine: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _settings(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from ragspine.config import load_settings

    try:
        return load_settings(data_dir=args.data_dir)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["loc"]:
            _fail(f"bad setting RAGSPINE_{str(err['loc'][0]).upper()}: {err['msg']}")
        # a rule over several settings (e.g. two weights not both 0) names them in its message
        _fail(f"bad settings: {str(err['msg']).removeprefix('Value error, ')}")


def _size_threads(settings: Any) -> None:
    """Size this process's thread pools as a server sizes its own (Settings.thread_rule): a
    command that ingests runs render and OCR processes and reads files at once beside numpy, whose
    BLAS pool of every core spin-waits against them (a page's MUVERA encoding: 3.7 ms with one
    BLAS thread, 16 ms with numpy's default while two other processes kept both cores busy)."""
    from ragspine.runtimes import limit_threads

    limit_threads(*settings.thread_rule())


def _parse_meta(pairs: Sequence[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"--meta expects KEY=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
            if isinstance(value, (dict,)) or value is None:
                value = raw
        except json.JSONDecodeError:
            value = raw
        meta[key.strip()] = value
    return meta


