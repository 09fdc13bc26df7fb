"""Browser tests of the search page: a real ``ragspine serve`` and Debian's headless Chromium
driven by Playwright (the Python package; its own browser download is never used).

One server and one browser serve the whole folder. Every test gets a fresh browser context
(fresh sessionStorage) whose network responses, DOM, dialogs and script errors are checked
when the test ends: no RESTRICTED canary in any response or in the page, no dialog, no
uncaught script error. Screenshots go to ``test-artifacts/web/`` (gitignored).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_SERVING_TESTS = str(Path(__file__).resolve().parents[1] / "serving")
if _SERVING_TESTS not in sys.path:  # ``import serving_kit`` whatever pytest's import mode
    sys.path.insert(0, _SERVING_TESTS)

import pdfs  # noqa: E402
from serving_kit import clean_settings, serve_process  # noqa: E402
from web_kit import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    NUMBERED_LIBRARY,
    UPLOAD_CANARY,
    UPLOAD_LIBRARY,
    VIEWPORT,
    XSS_LIBRARY,
    XSS_TEXT,
    XSS_TITLE,
    Watched,
    WebServer,
)

from ragspine.demo import DEMO_LIBRARY, build_demo_corpus  # noqa: E402
from ragspine.engine import Engine  # noqa: E402


def _chromium_or_skip() -> str:
    path = CHROMIUM if CHROMIUM.is_file() else Path(shutil.which("chromium") or "/nonexistent")
    if not path.is_file():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium); CI installs it with "
                    "'apt-get install -y chromium'")
    return str(path)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    return _chromium_or_skip()


@pytest.fixture(scope="session")
def web_server(tmp_path_factory: pytest.TempPathFactory, chromium_path: str) -> Iterator[WebServer]:
    """``ragspine serve`` over the demo corpus (ingested through the Engine), an empty
    ``inbox`` library for uploads, and an ``xss`` library whose documents carry HTML/JS
    payloads in their titles, metadata and text."""
    root = tmp_path_factory.mktemp("web")
    data = root / "data"
    docs = build_demo_corpus(root / "pdf")
    eng = Engine(clean_settings(data_dir=data))
    try:
        eng.create_library(DEMO_LIBRARY)
        for d in docs:
            eng.ingest(DEMO_LIBRARY, d.path, d.metadata)
        eng.create_library(UPLOAD_LIBRARY)
        eng.create_library(XSS_LIBRARY)
        eng.ingest(XSS_LIBRARY, pdfs.make_pdf([XSS_TEXT, "second page payloadword"]),
                   {"doc_id": "xss-doc", "title": XSS_TITLE, "entity": "<svg onload=alert(5)>",
                    "period": 2024}, filename="xss.pdf")
        eng.ingest(XSS_LIBRARY, pdfs.make_pdf(["an ordinary page about payloadword"]),
                   {"doc_id": "plain-doc", "title": "Plain document", "entity": "Plain Co", "period": 2023},
                   filename="plain.pdf")
        eng.create_library(NUMBERED_LIBRARY)
        eng.ingest(NUMBERED_LIBRARY, pdfs.make_pdf(
            [pdfs.Page([f"Part {n}. Notes on the quarterly revenue chart of the year."],
                       footer=str(n - 2) if n > 2 else None) for n in range(1, 8)]),
            {"doc_id": "numbered-report", "title": "Numbered report"}, filename="numbered.pdf")
    finally:
        eng.close()
    canaries = sorted({c for d in docs for c in d.canaries} | {UPLOAD_CANARY})
    with serve_process(data, log_path=root / "serve.log") as base:
        yield WebServer(base, canaries, {d.doc_id: d for d in docs})


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def web(browser: Any, web_server: WebServer) -> Iterator[Watched]:
    ctx = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    ctx.set_default_timeout(15_000)
    w = Watched(ctx.new_page(), web_server)
    try:
        yield w
        assert not w.errors, f"uncaught script errors: {w.errors}"
        assert not w.dialogs, f"dialogs fired: {w.dialogs}"
        leaks = w.leaks()
        assert not leaks, f"RESTRICTED canary leaked: {leaks}"
    finally:
        ctx.close()
