"""The search page at ``/``: static HTML, CSS and JavaScript shipped as package data.

The page holds no data of its own: it is a client of the public REST API, so it is served
without an API key and every call it makes sends the key the user typed (as a Bearer token).
A strict Content-Security-Policy backs up the page's own escaping: no inline script or style,
nothing from another origin, images only from the API (as ``blob:`` URLs) or ``data:``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

#: Where index.html, style.css and the page's ES modules (app.js, the entry, and the modules it
#: imports) live (``[tool.setuptools.package-data]``).
WEB_DIR = Path(str(files("ragspine.serving").joinpath("web")))

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' blob: data:",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))

#: Sent with the page and its assets. ``no-cache``: revalidate, so an upgrade shows at once.
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


class _Assets(StaticFiles):
    """StaticFiles with :data:`HEADERS` on every answer."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        resp = await super().get_response(path, scope)
        resp.headers.update(HEADERS)
        return resp


def mount_web(app: FastAPI) -> None:
    """Serve the search page at ``/`` and its assets under ``/static``."""
    index = WEB_DIR / "index.html"
    if not index.is_file():  # a broken install: say so instead of serving 404s
        raise RuntimeError(f"the search page is missing from the installed package ({index})")

    @app.get("/", include_in_schema=False)
    def search_page() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=HEADERS)

    app.mount("/static", _Assets(directory=WEB_DIR), name="static")
