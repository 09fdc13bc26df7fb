"""The search page in headless Chromium against a real ``ragspine serve``.

Each test ends with the checks of the ``web`` fixture: no RESTRICTED canary in any network
response or in the DOM, no dialog (an XSS payload that ran would open one), no uncaught
script error.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pdfs
import pytest
from serving_kit import clean_settings, serve_process
from web_kit import (NUMBERED_LIBRARY, UPLOAD_CANARY, UPLOAD_LIBRARY, VIEWPORT, XSS_LIBRARY, XSS_TITLE, Watched,
                     WebServer)

from ragspine.demo import DEMO_LIBRARY, build_demo_corpus
from ragspine.engine import Engine

pytestmark = pytest.mark.integration

#: Largest gap allowed between the drawn highlight and the cited bbox, in CSS pixels.
TOLERANCE_PX = 2.0
#: RAGSPINE_THUMBNAIL_DPI's default: thumbnail pixels per PDF point = 72 / 72.
THUMB_PX_PER_PT = 1.0


# -- helpers -----------------------------------------------------------------------------------


def is_search(r: Any) -> bool:
    return r.url.endswith("/v1/search") and r.request.method == "POST"


def wait_results(page: Any) -> str:
    page.wait_for_function(
        "() => ['done', 'empty', 'error'].includes(document.getElementById('results').dataset.state)")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#results .page-frame')].every(f => f.dataset.state !== 'loading')")
    return str(page.get_attribute("#results", "data-state"))


def search(web: Watched, query: str, *, library: str | None = None, mode: str | None = None) -> dict[str, Any]:
    """Type ``query`` and search; returns the API's answer as the page received it. Library and
    mode are set before the query so that changing them does not itself start a search."""
    page = web.page
    if library is not None and page.input_value("#library") != library:
        page.select_option("#library", library)
        page.wait_for_function("lib => document.getElementById('library').value === lib", arg=library)
    if mode is not None:
        page.select_option("#mode", mode)
    page.fill("#q", query)
    with page.expect_response(is_search) as info:
        page.click("#search-button")
    wait_results(page)
    body: dict[str, Any] = info.value.json()
    return body


def page_sizes(server: WebServer, library: str) -> dict[tuple[str, int], tuple[float, float]]:
    """(doc_id, page) → (width, height) in points, from the REST API (not from the page)."""
    r = httpx.get(f"{server.base}/v1/libraries/{library}/documents", timeout=10)
    r.raise_for_status()
    out = {}
    for d in r.json()["documents"]:
        assert len(d["page_sizes"]) == len(d["page_numbers"]), d
        for n, (w, h) in zip(d["page_numbers"], d["page_sizes"]):
            out[(d["doc_id"], n)] = (w, h)
    return out


_MEASURE = """() => [...document.querySelectorAll('#results .hit')].map(card => {
  const f = card.querySelector('.page-frame'), img = f.querySelector('img'), box = f.querySelector('.bbox');
  const r = img.getBoundingClientRect(), b = box ? box.getBoundingClientRect() : null;
  return {doc: card.dataset.doc, page: Number(card.dataset.page), state: f.dataset.state,
          img: [r.left, r.top, r.width, r.height], box: b && [b.left, b.top, b.width, b.height],
          natural: [img.naturalWidth, img.naturalHeight]};
})"""


def assert_highlights_match(web: Watched, answer: dict[str, Any], library: str) -> int:
    """Every result's outline sits on its hit's bbox × (displayed size / page size), within
    TOLERANCE_PX, and the thumbnail's natural size is the page size at 72 dpi."""
    sizes = page_sizes(web.server, library)
    cards = web.page.evaluate(_MEASURE)
    hits = answer["hits"]
    assert len(cards) == len(hits) > 0
    for card, hit in zip(cards, hits):
        assert (card["doc"], card["page"]) == (hit["doc_id"], hit["page"])
        assert card["state"] == "ready", card
        pw, ph = sizes[(hit["doc_id"], hit["page"])]
        assert abs(card["natural"][0] - pw * THUMB_PX_PER_PT) <= 1, (card, pw)
        assert abs(card["natural"][1] - ph * THUMB_PX_PER_PT) <= 1, (card, ph)
        ix, iy, iw, ih = card["img"]
        sx, sy = iw / pw, ih / ph
        x0, y0, x1, y1 = hit["bbox"]
        want = (ix + x0 * sx, iy + y0 * sy, (x1 - x0) * sx, (y1 - y0) * sy)
        got = card["box"]
        assert got is not None, card
        for g, w_ in zip(got, want):
            assert abs(g - w_) <= TOLERANCE_PX, f"{hit['doc_id']} p{hit['page']}: box {got} vs bbox×scale {want}"
    return len(cards)


def marks(page: Any) -> list[str]:
    return [str(t) for t in page.eval_on_selector_all("#results mark", "els => els.map(e => e.textContent)")]


# -- tests -------------------------------------------------------------------------------------


def test_english_search_shows_pages_with_cited_regions(web: Watched) -> None:
    page = web.open()
    assert page.title().startswith("ragspine")
    assert page.is_hidden("#explain"), "no page model is configured: there must be no explain toggle"
    assert page.input_value("#library") == DEMO_LIBRARY
    answer = search(web, "Acme Robotics revenue 2023")
    assert "acme-robotics-ar-2023" in {h["doc_id"] for h in answer["hits"]}
    assert assert_highlights_match(web, answer, DEMO_LIBRARY) == len(answer["hits"])
    first = page.locator("#results .hit").first
    assert first.locator(".hit-title").inner_text() == answer["hits"][0]["title"]
    assert first.locator(".page-no").inner_text().startswith(f"page {answer['hits'][0]['page']}")
    channels = first.locator(".score").evaluate_all("els => els.map(e => e.dataset.channel)")
    assert {"bm25_page", "fused"} <= set(channels)
    # The answer names the fusion that ranked it, and the page shows that name.
    assert answer["fusion"] and page.inner_text("#ranked-by") == f"ranked by {answer['fusion']}"
    assert {m.lower() for m in marks(page)} >= {"acme", "robotics", "revenue", "2023"}
    web.shot("01-search-english")


def test_a_questions_answer_instructions_are_not_marked(web: Watched) -> None:
    # "warehouse" is only in the instruction's example list, and in the passages found: it is
    # not searched, so it is not marked (the answer's `searched` says what was).
    page = web.open()
    answer = search(web, 'Which Acme Robotics business grew fastest in 2023? '
                         'Please write the answer in list format, e.g., ["warehouse"].')
    assert answer["searched"] == "Which Acme Robotics business grew fastest in 2023?"
    assert any("warehouse" in h["text"].lower() for h in answer["hits"])
    found = {m.lower() for m in marks(page)}
    assert {"acme", "robotics"} <= found and "warehouse" not in found, found


def test_a_page_named_by_its_printed_number_shows_it(web: Watched) -> None:
    # "page three" names the report's 3rd page (by place, printing "1") and its 5th (printing "3":
    # its cover and contents print none); both come first, each card saying what it prints.
    page = web.open()
    answer = search(web, "What does the quarterly revenue chart on page three show?", library=NUMBERED_LIBRARY)
    assert {(h["page"], tuple(h["printed_pages"])) for h in answer["hits"][:2]} == {(3, (1,)), (5, (3,))}
    assert "page numbers 1" in answer["fusion"]
    labels = page.locator("#results .hit .page-no").all_inner_texts()
    i = [h["page"] for h in answer["hits"]].index(5)
    assert labels[i].startswith("page 5 of 7") and labels[i].endswith("printed 3"), labels


def test_chinese_search_marks_cjk_terms(web: Watched) -> None:
    page = web.open()
    answer = search(web, "阿克米能源 营业收入")
    assert "acme-energy-bulletin-2023" in {h["doc_id"] for h in answer["hits"]}
    assert_highlights_match(web, answer, DEMO_LIBRARY)
    found = set(marks(page))
    assert {"阿克米能源", "营业收入"} <= found, found
    web.shot("02-search-chinese")


def test_filter_chip_narrows_and_empty_result_suggests_removing_it(web: Watched) -> None:
    page = web.open()
    answer = search(web, "revenue operating margin")
    assert {h["metadata"]["period"] for h in answer["hits"]} == {2022, 2023}
    with page.expect_response(is_search) as info:
        page.click("#filters .chip[data-field=period][data-value='2022']")
    assert info.value.request.post_data_json["filters"] == [{"field": "period", "op": "eq", "value": 2022}]
    assert wait_results(page) == "done"
    narrowed = info.value.json()
    assert narrowed["hits"] and {h["doc_id"] for h in narrowed["hits"]} == {"globex-corp-ar-2022"}
    cards = page.eval_on_selector_all("#results .hit", "els => els.map(e => e.dataset.doc)")
    assert set(cards) == {"globex-corp-ar-2022"}
    assert page.get_attribute("#filters .chip[data-field=period][data-value='2022']", "aria-pressed") == "true"
    web.shot("03-filter-period-2022")

    # A second filter that no 2022 document meets: empty, and the page says which to remove.
    with page.expect_response(is_search):
        page.click("#filters .chip[data-field=language][data-value='zh']")
    assert wait_results(page) == "empty"
    assert "No results" in page.inner_text("#results")
    assert "Try removing a filter" in page.inner_text("#results")
    web.shot("04-empty-with-filters")
    with page.expect_response(is_search):
        page.click("#results .chip.removable[data-field=language]")
    assert wait_results(page) == "done"
    assert set(page.eval_on_selector_all("#results .hit", "els => els.map(e => e.dataset.doc)")) == {
        "globex-corp-ar-2022"}
    assert page.get_attribute("#filters .chip[data-field=language][data-value='zh']", "aria-pressed") == "false"


def test_page_viewer_steps_through_pages_and_dropped_pages_are_not_available(web: Watched) -> None:
    page = web.open()
    answer = search(web, "Acme Robotics revenue 2023")
    robotics = [h for h in answer["hits"] if h["doc_id"] == "acme-robotics-ar-2023"]
    hit = next(h for h in robotics if h["page"] in (2, 4))  # a neighbour of dropped page 3
    card = page.locator(f"#results .hit[data-doc='acme-robotics-ar-2023'][data-page='{hit['page']}']")
    card.locator(".thumb-button").click()
    page.wait_for_selector("#viewer[open] .page-frame.large[data-state=ready]")
    assert f"page {hit['page']} of 4" in page.inner_text("#viewer-sub")
    assert page.locator("#viewer-page .bbox").count() == 1
    neighbour = "#viewer-next" if hit["page"] == 2 else "#viewer-prev"
    page.wait_for_selector(f"{neighbour} .page-frame[data-state=missing]")
    assert "page not available" in page.inner_text(neighbour)
    web.shot("05-viewer-cited-page")

    page.click(neighbour)
    page.wait_for_selector("#viewer-page .page-frame[data-state=missing]")
    assert "page not available" in page.inner_text("#viewer-page")
    assert page.locator("#viewer-page .bbox").count() == 0
    page.wait_for_selector("#viewer-prev .page-frame[data-state=ready]")
    page.wait_for_selector("#viewer-next .page-frame[data-state=ready]")
    web.shot("06-viewer-dropped-page")
    statuses = {r.url.rsplit("/pages/", 1)[1]: r.status for r in web.responses if "/acme-robotics-ar-2023/pages/" in r.url}
    assert statuses.get("3/thumbnail") == 404
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("#viewer-page .page-frame.large[data-state=ready]")
    assert "page 4 of 4" in page.inner_text("#viewer-sub")
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")


def test_upload_by_drag_and_drop_reports_dropped_pages_and_becomes_searchable(web: Watched) -> None:
    page = web.open()
    pdf = pdfs.make_pdf([
        pdfs.Page(["Quokka Logistics annual review: quokkaunique freight volumes rose 9 percent."]),
        pdfs.Page([f"Merger terms under negotiation {UPLOAD_CANARY} quokkaunique."], header="RESTRICTED"),
        pdfs.Page(["Outlook: quokkaunique expects steady demand in 2025."]),
    ])
    drop = page.evaluate_handle(
        """([b64, name]) => {
             const bin = atob(b64), bytes = new Uint8Array(bin.length);
             for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
             const dt = new DataTransfer();
             dt.items.add(new File([bytes], name, {type: 'application/pdf'}));
             return dt;
           }""", [base64.b64encode(pdf).decode(), "quokka-review-2024.pdf"])
    page.dispatch_event("main", "dragover", {"dataTransfer": drop})
    assert page.is_visible("#drag-veil")
    page.dispatch_event("main", "drop", {"dataTransfer": drop})
    page.wait_for_selector("#upload[open]")
    assert "quokka-review-2024.pdf" in page.inner_text("#file-name")
    page.select_option("#up-library", UPLOAD_LIBRARY)
    page.fill("#up-title", "Quokka Logistics Review 2024")
    page.fill("#up-entity", "Quokka Logistics")
    page.fill("#up-period", "2024")
    page.select_option("#up-sensitivity", "INTERNAL")
    page.click("#upload-submit")
    page.wait_for_selector("#upload-result[data-state=succeeded]")
    assert page.get_attribute("#upload-result .dropped", "data-pages") == "2"
    assert "Page 2 was dropped by the RESTRICTED policy" in page.inner_text("#upload-result")
    assert "2 of 3 pages" in page.inner_text("#upload-result")
    assert any("/v1/jobs/" in r.url for r in web.responses), "progress comes from the job endpoint"
    web.shot("07-upload-done")
    page.click("#upload-close")

    answer = search(web, "quokkaunique", library=UPLOAD_LIBRARY)
    assert sorted(h["page"] for h in answer["hits"]) == [1, 3]
    assert {h["title"] for h in answer["hits"]} == {"Quokka Logistics Review 2024"}
    assert {h["metadata"]["sensitivity"] for h in answer["hits"]} == {"INTERNAL"}
    assert_highlights_match(web, answer, UPLOAD_LIBRARY)
    web.shot("08-uploaded-doc-searchable")


def test_an_upload_with_a_scanned_page_reports_the_ocr_that_follows_until_it_is_done(web: Watched) -> None:
    import pymupdf
    import scans

    doc = pymupdf.open()
    doc.new_page().insert_text((72, 100), "Wombat Shipping review: wombatunique tonnage rose.", fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scans.scan_pdf([scans.ScanPage([scans.Line("Wombatunique berth plan", y=240)])])))
    page = web.open()
    page.click("#upload-open")
    page.set_input_files("#file", {"name": "wombat.pdf", "mimeType": "application/pdf", "buffer": doc.tobytes()})
    page.select_option("#up-library", UPLOAD_LIBRARY)
    page.click("#upload-submit")
    # The job succeeds on the text layer (page 1); the scan's OCR follows and the page says so.
    page.wait_for_selector("#upload-result[data-state=succeeded]")
    page.wait_for_selector("#upload-result[data-ocr=done]", timeout=120_000)
    assert "OCR done: 2 of 2 pages searchable, 1 read by OCR." in page.inner_text("#upload-result")
    assert "1 of 2 pages" in page.inner_text("#upload-result")  # what the first phase made live
    web.shot("07b-upload-ocr-done")
    page.click("#upload-close")
    answer = search(web, "wombatunique berth", library=UPLOAD_LIBRARY)
    assert [h["page"] for h in answer["hits"]][:1] == [2]


def test_html_and_script_payloads_render_as_text(web: Watched) -> None:
    page = web.open()
    page.select_option("#library", XSS_LIBRARY)
    page.wait_for_selector("#filters .chip[data-field=entity]")
    answer = search(web, "payloadword", library=XSS_LIBRARY)
    assert {h["doc_id"] for h in answer["hits"]} == {"xss-doc", "plain-doc"}
    card = page.locator("#results .hit[data-doc='xss-doc'][data-page='1']")
    assert card.locator(".hit-title").inner_text() == XSS_TITLE
    passage = card.locator(".passage").text_content() or ""
    assert "<script>alert(2)</script>" in passage and "onerror=alert(3)" in passage, passage
    chips = page.eval_on_selector_all("#filters .chip[data-field=entity]", "els => els.map(e => e.textContent)")
    assert "<svg onload=alert(5)>" in chips
    web.shot("09-xss-results-as-text")
    card.locator(".thumb-button").click()
    page.wait_for_selector("#viewer[open] .page-frame.large[data-state=ready]")
    assert page.inner_text("#viewer-title") == XSS_TITLE
    web.shot("10-xss-viewer-as-text")
    page.keyboard.press("Escape")

    # The query itself is echoed (in the summary, and in the empty-state message): as text too.
    payload = "<img src=x onerror=alert(6)><script>alert(7)</script>"
    search(web, payload, library=XSS_LIBRARY)
    assert payload in page.inner_text("#summary")
    nothing = "<iframe srcdoc=zzq></iframe>zzznomatch"  # no word of it is indexed
    assert search(web, nothing, library=XSS_LIBRARY)["hits"] == []
    assert nothing in page.inner_text("#results .empty")
    injected = page.evaluate("""() => ({
        imgs: document.querySelectorAll('img[src="x"], img[onerror]').length,
        scripts: [...document.scripts].map(s => s.getAttribute('src')),
        tags: document.querySelectorAll('main b, main svg, iframe, #viewer b, a[href^="javascript"], [onload], [onerror]').length,
    })""")
    assert injected == {"imgs": 0, "scripts": ["/static/app.js"], "tags": 0}, injected


def test_degraded_answers_and_errors_are_shown(web: Watched) -> None:
    page = web.open()
    answer = search(web, "operating margin", mode="hybrid")
    assert answer["degraded"] and answer["hits"]
    notice = page.locator(".notice[data-kind=degraded]")
    assert "Degraded answer" in notice.inner_text()
    assert "visual_unavailable" in notice.inner_text()
    web.shot("11-degraded")
    page.select_option("#mode", "vector")  # re-runs the last search
    page.wait_for_selector("#results[data-state=error]", state="attached")
    err = page.locator(".notice.error")
    assert "page model" in err.inner_text()  # the problem's detail, as the API wrote it
    assert 400 <= int(err.get_attribute("data-status") or 0) < 500
    web.shot("12-error-detail")


def test_explain_toggle_exists_only_when_readyz_reports_a_page_model(web: Watched) -> None:
    page = web.open()
    search(web, "revenue")
    assert page.is_hidden("#explain")  # the real /readyz: no page model configured
    ready = {"status": "ready", "checks": {"store": "ok", "page_model": "ok: test-model"}}
    page.route("**/readyz", lambda route: route.fulfill(json=ready))
    web.open()
    search(web, "revenue")
    assert page.is_visible("#explain")


# -- API keys: a second server with RAGSPINE_API_KEYS ----------------------------------------


KEY = "web-test-key-0123"


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory, web_server: WebServer) -> Any:
    root = tmp_path_factory.mktemp("keyed")
    globex = next(d for d in build_demo_corpus(root / "pdf") if d.doc_id == "globex-corp-ar-2022")
    eng = Engine(clean_settings(data_dir=root / "data"))
    try:
        eng.create_library("keyed")
        eng.ingest("keyed", globex.path, globex.metadata)
    finally:
        eng.close()
    with serve_process(root / "data", env={"RAGSPINE_API_KEYS": f"{KEY}=keyed"},
                       log_path=root / "serve.log") as base:
        yield WebServer(base, web_server.canaries, {})


def test_api_key_is_kept_in_session_storage_and_sent_as_bearer(browser: Any, keyed_server: WebServer) -> None:
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(15_000)
    try:
        web = Watched(ctx.new_page(), keyed_server)
        sent: list[tuple[str, str | None]] = []
        web.page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
        page = web.open()
        err = page.locator(".notice.error[data-status='401']")
        assert "an API key is required" in err.inner_text()
        assert page.get_attribute("#key-panel", "open") is not None
        web.shot("13-api-key-required")
        page.fill("#api-key", KEY)
        before = len(sent)
        page.press("#api-key", "Enter")
        page.wait_for_function("() => document.getElementById('library').value === 'keyed'")
        assert page.evaluate("() => [sessionStorage.getItem('ragspine.apiKey'), localStorage.length]") == [KEY, 0]
        answer = search(web, "Globex revenue")
        assert answer["hits"] and page.locator("#results .page-frame[data-state=ready]").count() == len(answer["hits"])
        api_calls = [(u, a) for u, a in sent[before:] if "/v1/" in u]
        assert any(u.endswith("/thumbnail") for u, _ in api_calls), api_calls
        assert all(a == f"Bearer {KEY}" for _, a in api_calls), api_calls
        assert not page.locator(".notice.error").count()
        assert not web.errors and not web.dialogs and not web.leaks()
    finally:
        ctx.close()

