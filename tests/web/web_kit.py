"""Constants and helpers of the browser tests (plain module: importable from the tests, where
``conftest`` would be ambiguous)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving_kit import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
#: What the Chromium probe on these machines found it needs: no sandbox as root, and none of
#: the background networking that a closed network refuses.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = REPO_ROOT / "test-artifacts" / "web"
VIEWPORT = {"width": 1360, "height": 900}

UPLOAD_LIBRARY = "inbox"
XSS_LIBRARY = "xss"
#: A library of one report whose first two pages print no number: its 5th page prints "3".
NUMBERED_LIBRARY = "numbered"
#: Only on the RESTRICTED page of the PDF that the upload test sends through the page.
UPLOAD_CANARY = "zqxcanaryupload2"
XSS_TITLE = "<img src=x onerror=alert(1)>Quarterly <b>bold</b> report"
XSS_TEXT = ("payloadword intro <script>alert(2)</script> and <img src=x onerror=alert(3)> "
            "and <a href=javascript:alert(4)>link</a> payloadword.")


@dataclass
class WebServer:
    base: str
    canaries: list[str]
    demo_docs: dict[str, Any]
    key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Watched:
    """A page plus what it saw: responses, dialogs, uncaught script errors."""

    def __init__(self, page: Any, server: WebServer) -> None:
        self.page = page
        self.server = server
        self.responses: list[Any] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("response", lambda r: self.responses.append(r))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

        def on_dialog(d: Any) -> None:
            self.dialogs.append(f"{d.type}: {d.message}")
            d.dismiss()

        page.on("dialog", on_dialog)

    def open(self, path: str = "/") -> Any:
        self.page.goto(self.server.base + path)
        self.page.wait_for_selector("body[data-ready=true]")
        return self.page

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path

    def leaks(self) -> list[str]:
        """Canaries found in any response body or in the page's DOM."""
        found = []
        needles = [(c, [c.encode(), json.dumps(c).strip('"').encode()]) for c in self.server.canaries]
        for r in self.responses:
            try:
                body = r.body()
            except Exception:  # redirects and aborted requests have no body
                continue
            for c, forms in needles:
                if any(f in body for f in forms):
                    found.append(f"{c} in {r.request.method} {r.url}")
        if not self.page.is_closed():
            dom = self.page.evaluate("() => document.documentElement.outerHTML + document.body.innerText")
            found += [f"{c} in the DOM" for c in self.server.canaries if c in dom]
        return found


