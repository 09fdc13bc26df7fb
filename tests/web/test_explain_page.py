"""The explain (similarity map) overlay of the search page, in headless Chromium against a real
``ragspine serve`` that has a page model (a tiny random-weight ColPali built offline).

One server for the module: the tiny model is built, a library is ingested through the Engine
(with a RESTRICTED page carrying a canary word), the engine is closed, and ``ragspine serve``
starts with the same settings. Each test ends with the checks of the shared browser tests: no
canary in any response or in the DOM, no dialog, no uncaught script error.

That the toggle stays hidden without a page model is asserted by ``test_search_page.py``
(``test_english_search_shows_pages_with_cited_regions`` and
``test_explain_toggle_exists_only_when_readyz_reports_a_page_model``) on the CPU-only server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pdfs
import pytest
from serving_kit import clean_settings, serve_process
from test_search_page import search
from web_kit import VIEWPORT, Watched, WebServer

from ragspine.engine import Engine
from ragspine.models._extras import PAGE_MODEL_PACKAGES, missing

_MISSING = missing(PAGE_MODEL_PACKAGES)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(bool(_MISSING), reason=f"the gpu extra is not installed ({', '.join(_MISSING)} missing)"),
]

LIBRARY = "visual"
DOC = "vis-report"
#: Only on page 2 of DOC, whose header is RESTRICTED: dropped at ingest, never served.
CANARY = "zqxcanaryexplain7"
RESTRICTED_PAGE = 2
QUERY = "quarterly sales by region"
#: Largest gap allowed between the overlay's box and the page image's, in CSS pixels.
TOLERANCE_PX = 2.0


@pytest.fixture(scope="module")
def explain_server(tmp_path_factory: pytest.TempPathFactory, chromium_path: str) -> Iterator[WebServer]:
    import torch

    from ragspine.models import testing

    torch.set_num_threads(1)  # tiny matrices on a busy 2-core box
    root = tmp_path_factory.mktemp("explain")
    folder = testing.build("colpali", root / "colpali")
    data = root / "data"
    eng = Engine(clean_settings(data_dir=data, page_model=str(folder), device="cpu", reranker="none",
                                page_render_dpi=36))
    try:
        assert eng.models.page is not None, eng.models.errors
        eng.create_library(LIBRARY)
        eng.ingest(LIBRARY, pdfs.make_pdf([
            pdfs.Page(["Revenue grew by twelve percent in the third quarter while operating costs fell."]),
            pdfs.Page([f"Merger terms under negotiation {CANARY}; quarterly sales by region."], header="RESTRICTED"),
            pdfs.Page(["The chart shows quarterly sales by region, with Asia leading growth since 2019."]),
        ]), {"doc_id": DOC, "title": "Visual report 2023", "entity": "Acme", "period": 2023}, filename="vis.pdf")
        eng.ingest(LIBRARY, pdfs.make_pdf([
            "Net income, gross margin and free cash flow are reported in millions of dollars.",
        ]), {"doc_id": "vis-brief", "title": "Visual brief", "entity": "Globex", "period": 2022},
            filename="brief.pdf")
    finally:
        eng.close()
    env = {"RAGSPINE_PAGE_MODEL": str(folder), "RAGSPINE_DEVICE": "cpu", "RAGSPINE_RERANKER": "none",
           "RAGSPINE_PAGE_RENDER_DPI": "36", "OMP_NUM_THREADS": "1"}
    with serve_process(data, env=env, timeout=120.0, log_path=root / "serve.log") as base:
        checks = httpx.get(f"{base}/readyz", timeout=10).json()["checks"]
        assert checks["page_model"].startswith("ok"), checks
        yield WebServer(base, [CANARY], {})


@pytest.fixture
def explain_web(browser: Any, explain_server: WebServer) -> Iterator[Watched]:
    ctx = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    ctx.set_default_timeout(30_000)  # the first query encoding of a cold model
    w = Watched(ctx.new_page(), explain_server)
    try:
        yield w
        assert not w.errors, f"uncaught script errors: {w.errors}"
        assert not w.dialogs, f"dialogs fired: {w.dialogs}"
        leaks = w.leaks()
        assert not leaks, f"RESTRICTED canary leaked: {leaks}"
    finally:
        ctx.close()


def map_url(page: int, query: str = QUERY, doc: str = DOC) -> str:
    return f"/v1/libraries/{LIBRARY}/documents/{doc}/pages/{page}/similarity-map?query={quote(query)}"


_MEASURE = """() => {
  const frame = document.querySelector('#viewer-page .page-frame.large');
  const page = frame.querySelector('img:not(.explain-map)'), map = frame.querySelector('img.explain-map');
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
  return {page: box(page), map: map && box(map), natural: map && [map.naturalWidth, map.naturalHeight]};
}"""


def assert_no_leak(web: Watched) -> None:
    """The fixture checks at the end; this checks on the way (the DOM is replaced as it goes)."""
    leaks = web.leaks()
    assert not leaks, f"RESTRICTED canary leaked: {leaks}"


def wait_map(page: Any) -> None:
    page.wait_for_function("() => { const m = document.querySelector('#viewer-page img.explain-map');"
                           " return !!m && m.complete && m.naturalWidth > 0; }")


def assert_map_covers_page(page: Any, grid: dict[str, Any]) -> None:
    """The overlay is the grid at one pixel per patch, stretched over the whole page image."""
    m = page.evaluate(_MEASURE)
    assert m["natural"] == [grid["cols"], grid["rows"]], (m, grid["rows"], grid["cols"])
    assert m["page"][2] > 100 and m["page"][3] > 100, m  # the large page, not a thumbnail
    for got, want in zip(m["map"], m["page"]):
        assert abs(got - want) <= TOLERANCE_PX, f"map box {m['map']} vs page image {m['page']}"


def test_explain_overlay_is_the_similarity_grid_stretched_over_the_page(explain_web: Watched) -> None:
    web = explain_web
    page = web.open()
    assert page.input_value("#library") == LIBRARY
    assert page.get_attribute("#explain", "hidden") is None, "/readyz reports a page model: the toggle exists"

    hybrid = search(web, QUERY, mode="hybrid")
    assert hybrid["mode"] == "hybrid" and not hybrid["degraded"], hybrid
    assert page.is_visible("#explain")
    assert all(h["scores"]["visual"] is not None for h in hybrid["hits"])
    assert RESTRICTED_PAGE not in {h["page"] for h in hybrid["hits"] if h["doc_id"] == DOC}
    shown = page.eval_on_selector_all("#results .hit", "els => els.map(e => e.querySelectorAll("
                                      "'.score[data-channel=visual]').length)")
    assert shown == [1] * len(hybrid["hits"]) and shown, shown
    assert_no_leak(web)
    web.shot("explain-01-hybrid")

    vector = search(web, QUERY, mode="vector")
    assert vector["mode"] == "vector" and not vector["degraded"], vector
    pages = sorted((h["doc_id"], h["page"]) for h in vector["hits"])
    assert pages == [("vis-brief", 1), (DOC, 1), (DOC, 3)], pages  # every indexed page, never page 2
    assert all(h["scores"]["visual"] is not None for h in vector["hits"])
    assert page.locator("#results .hit .score[data-channel=visual]").count() == len(vector["hits"])

    # Open page 3 of the report in the viewer, then turn explain on with the viewer's own toggle
    # (the modal viewer makes the toolbar's unreachable).
    hit = next(h for h in vector["hits"] if (h["doc_id"], h["page"]) == (DOC, 3))
    page.locator(f"#results .hit[data-doc='{DOC}'][data-page='3'] .thumb-button").click()
    page.wait_for_selector("#viewer[open] #viewer-page .page-frame.large[data-state=ready]")
    assert page.locator("#viewer-page img.explain-map").count() == 0
    assert page.is_visible("#viewer-explain")
    with page.expect_response(lambda r: "/similarity-map?" in r.url) as info:
        page.check("#viewer-explain-toggle")
    resp = info.value
    assert resp.status == 200 and resp.headers["content-type"] == "image/png"
    assert resp.url == web.server.base + map_url(3)
    wait_map(page)

    grid = httpx.get(web.server.base + map_url(3) + "&format=json", timeout=30).json()
    assert grid["rows"] > 1 and grid["cols"] > 1, grid
    assert grid["score"] == pytest.approx(hit["scores"]["visual"], rel=1e-4, abs=1e-4)
    assert_map_covers_page(page, grid)
    assert_no_leak(web)
    web.shot("explain-on")

    page.uncheck("#viewer-explain-toggle")
    page.wait_for_selector("#viewer-page .page-frame.large[data-state=ready]")
    assert page.locator("#viewer-page img.explain-map").count() == 0
    assert page.locator("#viewer-page .bbox").count() == 1  # the cited region stays
    web.shot("explain-off")

    # On again, then to the dropped RESTRICTED page: nothing shown and no map asked for.
    page.check("#viewer-explain-toggle")
    wait_map(page)
    page.click("#viewer-prev")
    page.wait_for_selector("#viewer-page .page-frame[data-state=missing]")
    assert "page not available" in page.inner_text("#viewer-page")
    assert page.locator("#viewer-page img.explain-map, #viewer-page .explain-note").count() == 0
    assert not [r.url for r in web.responses if f"/pages/{RESTRICTED_PAGE}/similarity-map" in r.url]
    assert_no_leak(web)
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")

    # The toolbar's toggle follows the viewer's, and a hit opened now shows its map at once.
    assert page.is_checked("#explain-toggle")
    page.locator("#results .hit[data-doc='vis-brief'][data-page='1'] .thumb-button").click()
    wait_map(page)
    assert page.is_checked("#viewer-explain-toggle")
    brief = httpx.get(web.server.base + map_url(1, doc="vis-brief") + "&format=json", timeout=30).json()
    assert_map_covers_page(page, brief)
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")


def test_restricted_page_has_no_similarity_map(explain_web: Watched) -> None:
    web = explain_web
    page = web.open()
    # Asked for by the page itself (so the response passes the leak checks) and directly.
    got = page.evaluate("""async (urls) => Promise.all(urls.map(async (u) => {
        const r = await fetch(u); return [r.status, r.headers.get('content-type')]; }))""",
                        [map_url(RESTRICTED_PAGE), map_url(RESTRICTED_PAGE) + "&format=json", map_url(1)])
    assert got == [[404, "application/problem+json"]] * 2 + [[200, "image/png"]], got
    for fmt in ("", "&format=json"):
        r = httpx.get(web.server.base + map_url(RESTRICTED_PAGE) + fmt, timeout=30)
        assert r.status_code == 404, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert CANARY not in r.text
    dom = page.evaluate("() => document.documentElement.outerHTML")
    assert CANARY not in dom
