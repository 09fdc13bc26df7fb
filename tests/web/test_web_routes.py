"""The search page's serving side, without a browser: what ``/`` and ``/static`` answer, the
headers that back up the page's escaping, the package data, and the page sizes the page needs
to place highlight boxes."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pdfs
import pytest
from serving_kit import assert_problem, clean_settings, ingest

from ragspine.serving.app import create_app
from ragspine.serving.web_routes import WEB_DIR

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

KEY = "web-routes-key-01"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(clean_settings(data_dir=tmp_path / "data", api_keys=f"{KEY}=*"))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_page_is_served_without_a_key_with_a_strict_content_security_policy(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="/static/app.js"></script>' in r.text
    # The API behind it still wants the key.
    assert_problem(client.get("/v1/libraries"), 401, "unauthorized")


@pytest.mark.parametrize(("name", "ctype"), [("app.js", "javascript"), ("style.css", "text/css")])
def test_assets_are_served_with_the_same_headers(client: TestClient, name: str, ctype: str) -> None:
    r = client.get(f"/static/{name}")
    assert r.status_code == 200 and ctype in r.headers["content-type"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" in r.headers


def _imports(js: str) -> set[str]:
    return set(re.findall(r'^import \{[^}]*\} from "\./([\w-]+\.js)";', js, re.M))


def test_every_module_the_page_imports_is_served_as_javascript(client: TestClient) -> None:
    """The page is ES modules: a browser refuses a module served without a JavaScript MIME type
    (nosniff), and one missing from the package would break the page. Walk the imports from the
    entry module: each is served, as JavaScript, and every module shipped is reached."""
    seen: set[str] = set()
    todo = ["app.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        r = client.get(f"/static/{name}")
        assert r.status_code == 200, name
        assert "javascript" in r.headers["content-type"], (name, r.headers["content-type"])
        assert "content-security-policy" in r.headers
        todo += sorted(_imports(r.text))
    assert seen == {p.name for p in WEB_DIR.glob("*.js")}
    assert len(seen) > 5  # the split is real: one module per reason to change


def test_unknown_asset_is_a_problem_404(client: TestClient) -> None:
    assert_problem(client.get("/static/nope.js"), 404)
    assert_problem(client.get("/static/../app.py"), 404)


def test_package_data_holds_the_page() -> None:
    assert {p.name for p in WEB_DIR.iterdir()} >= {"index.html", "app.js", "style.css"}


def test_page_has_no_inline_script_style_or_handlers() -> None:
    html = (WEB_DIR / "index.html").read_text()
    assert all('src="' in tag for tag in re.findall(r"<script[^>]*>", html))
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert not re.search(r"\sstyle\s*=", html), "inline style attribute (CSP style-src 'self')"


@pytest.mark.parametrize("module", sorted(p.name for p in WEB_DIR.glob("*.js")))
def test_script_never_parses_html_from_strings(module: str) -> None:
    """Every API string reaches the DOM as text: no HTML-parsing sink exists in any module."""
    js = (WEB_DIR / module).read_text()
    code = "\n".join(line for line in js.splitlines() if not line.lstrip().startswith("//"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "createContextualFragment", "setAttribute(\"style\"", "srcdoc"):
        assert sink not in code, sink


def test_document_entry_carries_page_sizes_of_indexed_pages(client: TestClient) -> None:
    h = {"Authorization": f"Bearer {KEY}"}
    assert client.post("/v1/libraries", json={"name": "sizes"}, headers=h).status_code == 201
    pdf = pdfs.make_pdf([
        pdfs.Page(["a letter page about tariffs"], size=(612.0, 792.0)),
        pdfs.Page(["dropped by policy"], header="RESTRICTED"),
        pdfs.Page(["an A4 page about tariffs"]),
    ])
    ingest(client, "sizes", pdf, filename="sizes.pdf", metadata={"doc_id": "sizes"}, headers=h)
    doc = client.get("/v1/libraries/sizes/documents/sizes", headers=h).json()
    assert doc["page_numbers"] == [1, 3] and doc["pages_dropped"] == [2]
    assert doc["page_sizes"] == [[612.0, 792.0], [595.0, 842.0]]
    listed = client.get("/v1/libraries/sizes/documents", headers=h).json()["documents"]
    assert listed[0]["page_sizes"] == doc["page_sizes"]
