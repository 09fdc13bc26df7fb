"""RAGSPINE_MAX_IMAGE_PIXELS: an embedded image over the limit is never decoded. It is blanked
before anything renders (in the open document and in the bytes worker processes open), its page
is indexed from its text and the ingest says which image it skipped; a PDF with nothing but
such images is a 413 that names the image's size."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from ragspine.errors import OversizeError
from ragspine.indexing.pdf import open_pdf

LIMIT = 1_000_000  # the smallest limit the setting allows; the test images are 1.5 Mpx


def _pdf(pages: list[tuple[str, tuple[int, int] | None]]) -> bytes:
    """One page per entry: its text (may be empty) and the size of an image drawn on it."""
    doc = pymupdf.open()
    shared: dict[tuple[int, int], int] = {}
    for text, size in pages:
        page = doc.new_page()
        if text:
            page.insert_text((72, 72), text)
        if size is not None:
            if size in shared:  # the same image object on a second page
                page.insert_image(pymupdf.Rect(72, 100, 500, 400), xref=shared[size])
                continue
            pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, *size), False)
            pix.clear_with(180)
            shared[size] = page.insert_image(pymupdf.Rect(72, 100, 500, 400), pixmap=pix)
    return doc.tobytes()


def _largest_image(data: bytes) -> int:
    doc = pymupdf.open(stream=data, filetype="pdf")
    return max((w * h for p in doc for _x, _s, w, h, *_ in p.get_images(full=True)), default=0)


def test_an_oversized_image_is_blanked_and_reported() -> None:
    data = _pdf([("Revenue grew by twelve percent.", (1500, 1000)), ("Second page.", (1500, 1000)),
                 ("Third page with a small chart.", (400, 300))])
    assert _largest_image(data) == 1_500_000
    parsed = open_pdf(data, max_image_pixels=LIMIT)
    try:
        [skip] = parsed.skipped_images
        assert (skip.pages, skip.width, skip.height) == ((1, 2), 1500, 1000)
        assert skip.note(LIMIT).startswith("pages 1, 2: an embedded image of 1500 x 1000 px (2 Mpx) was not decoded")
        # Blanked in the bytes the worker processes open, and in the open document.
        assert isinstance(parsed.source, bytes) and _largest_image(parsed.source) == 400 * 300
        assert max(w * h for _x, _s, w, h, *_ in parsed.doc.load_page(0).get_images(full=True)) == 1
        assert [p.has_images for p in parsed.pages] == [False, False, True]
        assert parsed.pages[0].text.startswith("Revenue grew")
    finally:
        parsed.close()
    # Under the limit, nothing changes: the source stays the caller's bytes.
    parsed = open_pdf(data, max_image_pixels=2_000_000)
    try:
        assert parsed.skipped_images == [] and parsed.source is data
    finally:
        parsed.close()


def test_a_pdf_of_nothing_but_oversized_images_is_413_naming_the_size() -> None:
    with pytest.raises(OversizeError) as err:
        open_pdf(_pdf([("", (1500, 1000))]), max_image_pixels=LIMIT)
    assert err.value.status == 413
    assert "page 1 has an image of 1500 x 1000 px (2 Mpx)" in err.value.detail
    assert "RAGSPINE_MAX_IMAGE_PIXELS" in err.value.detail


def test_an_upload_with_an_oversized_image_is_indexed_from_its_text(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient
    from serving.serving_kit import clean_settings

    from ragspine.serving.app import create_app

    app = create_app(clean_settings(data_dir=tmp_path / "data", max_image_pixels=LIMIT))
    with TestClient(app) as c:
        assert c.post("/v1/libraries", json={"name": "big"}).status_code == 201
        files = {"file": ("big.pdf", _pdf([("Quarterly wombat revenue.", (1500, 1000))]), "application/pdf")}
        r = c.post("/v1/libraries/big/documents", params={"wait": "true"}, files=files)
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["state"] == "succeeded" and job["result"]["pages_indexed"] == 1
        assert any("1500 x 1000 px" in w and "not decoded" in w for w in job["result"]["warnings"])
        hits = c.post("/v1/search", json={"query": "wombat", "libraries": ["big"]}).json()["hits"]
        assert [(h["doc_id"], h["page"]) for h in hits] == [("big", 1)]
        thumb = c.get("/v1/libraries/big/documents/big/pages/1/thumbnail")
        assert thumb.status_code == 200 and thumb.content.startswith(b"\x89PNG")
        files = {"file": ("only.pdf", _pdf([("", (1500, 1000))]), "application/pdf")}
        r = c.post("/v1/libraries/big/documents", params={"wait": "true"}, files=files)
        assert r.status_code == 413 and "1500 x 1000 px" in r.json()["detail"]
