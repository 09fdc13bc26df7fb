"""The visual channel end to end: PDF → tiny page model → store → search, through the real
classes, with every expected value worked out here from the model's own outputs.

Covers: stored vectors equal the model's encoding of the rendered page; ``vector`` mode ranks by
exact MaxSim; ``hybrid`` is weighted RRF of the channels; RESTRICTED pages never reach the
encoder; a failing model degrades search and aborts ingest atomically; a library is never
used with another model; dense passages; the rerank contract; the CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pdfs
import pymupdf
import pytest
from models_kit import PAGE_FAMILIES, needs_gpu_extra, np_maxsim

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.scoring.indexed_text import payload_text
from ragspine.errors import ModelMismatchError, NotFoundError, ServiceUnavailableError
from ragspine.catalog import DENSE_CHUNK, PAGE_FDE, PAGE_FULL, PAGE_POOLED, point_id
from ragspine.indexing.pdf import render_page_image
from ragspine.models import load_dense_encoder, load_page_encoder, load_reranker
from ragspine.models.modelset import ModelSet
from ragspine.scoring.multivector import pool_rows_cols
from ragspine.store.base import KIND_CHUNK, KIND_PAGE, Where
from ragspine.store.predicates import parse_filters

pytestmark = needs_gpu_extra

PAGES = [
    "Revenue grew by twelve percent in the third quarter while operating costs fell.",
    "The chart shows quarterly sales by region, with Asia leading growth since 2019.",
    "Net income, gross margin and free cash flow are reported in millions of dollars.",
    "Figure 3: market share of mobile operators; Table 2 lists the survey questions.",
]
DPI = 36  # small renders: tiny models, fast tests


def _reference_fde(vectors: np.ndarray) -> np.ndarray:
    """A page's MUVERA encoding by fastembed itself, with its default parameters and seed."""
    from fastembed.postprocess import Muvera

    return Muvera(dim=vectors.shape[1]).process_document(vectors)


def _settings(data_dir: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {"data_dir": data_dir, "device": "cpu", "page_render_dpi": DPI,
                            "page_batch_size": 3, "reranker": "none"}
    return Settings(**{**base, **kw})


@pytest.fixture(scope="module")
def pdf_bytes() -> bytes:
    return pdfs.make_pdf(PAGES, title="Quarterly report")


def _page_images(data: bytes) -> list[Any]:
    doc = pymupdf.open(stream=data, filetype="pdf")
    try:
        return [render_page_image(doc, n, DPI, 2048) for n in range(1, doc.page_count + 1)]
    finally:
        doc.close()


class Spy:
    """A page encoder wrapper that counts pages and can be told to fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id, self.revision, self.dim = inner.model_id, inner.revision, inner.dim
        self.pages_seen = 0
        self.fail_pages = False
        self.fail_queries = False

    def encode_pages(self, images: Sequence[Any]) -> list[Any]:
        if self.fail_pages:
            raise RuntimeError("CUDA error: device lost")
        self.pages_seen += len(images)
        return self.inner.encode_pages(images)

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        if self.fail_queries:
            raise TimeoutError("page encoder deployment missed its 2000 ms deadline")
        return self.inner.encode_queries(texts)


@pytest.fixture
def colpali_dir(tiny_model_dir: Callable[[str], Path]) -> Path:
    return tiny_model_dir("colpali")


def _i8(x: np.ndarray) -> np.ndarray:
    """A page as int8 storage returns it: each token rounded to 255 levels of its largest
    magnitude (one symmetric scale per token)."""
    x = np.asarray(x, dtype=np.float32)
    step = np.abs(x).max(axis=1, keepdims=True) / 127
    return (np.clip(np.rint(x / step), -127, 127) * step).astype(np.float32)


@pytest.mark.parametrize(("pooling", "dtype"), [("muvera", None), ("muvera_hnsw", None), ("rowcol", None),
                                                ("muvera", "float16")])
@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_ingest_stores_the_models_page_vectors_and_vector_search_ranks_by_maxsim(
    family: str, pooling: str, dtype: str | None, tiny_model_dir: Callable[[str], Path], data_dir: Path,
    pdf_bytes: bytes
) -> None:
    folder = tiny_model_dir(family)
    extra = {"page_vector_dtype": dtype} if dtype else {}
    eng = Engine(_settings(data_dir, page_model=str(folder), page_pooling=pooling, **extra))
    first = PAGE_FDE if pooling.startswith("muvera") else PAGE_POOLED
    try:
        assert eng.models.page is not None, eng.models.errors
        rec = eng.create_library("lib")
        assert rec.encoders[PAGE_FULL]["model"] == eng.models.page.model_id
        assert rec.encoders[PAGE_FULL]["dim"] == 128
        assert rec.encoders[first]["pooling"] == pooling
        assert set(rec.encoders) & {PAGE_FDE, PAGE_POOLED} == {first}
        # Embedded default: int8 full vectors (a column beside the shard), a float16 first stage.
        assert rec.encoders[PAGE_FULL]["datatype"] == (dtype or "int8")
        assert rec.encoders[first]["datatype"] == "float16"
        if pooling == "muvera":  # the scanned copy: TurboQuant 2-bit on the embedded store
            assert rec.encoders[first]["quantization"] == "turbo2"
            cfg = json.loads((data_dir / "libraries" / "lib" / "shard" / "edge_config.json").read_text())
            assert set(cfg["vectors"][PAGE_FDE]["quantization_config"]) == {"turbo"}
        assert (data_dir / "libraries" / "lib" / "columns" / f"{PAGE_FULL}.sqlite").exists() == (dtype is None)
        res = eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        assert res.status == "indexed" and res.pages_indexed == 4

        # Independently: a second load of the same folder encodes the same renders.
        ref = load_page_encoder(str(folder), device="cpu")
        expected = ref.encode_pages(_page_images(pdf_bytes))
        ids = [point_id("q3", res.version, n, "page") for n in range(1, 5)]
        full = eng.store.retrieve_vectors("lib", ids, PAGE_FULL)
        pooled = eng.store.retrieve_vectors("lib", ids, first)
        def f16(x: np.ndarray) -> np.ndarray:  # first stages are stored float16
            return np.asarray(x, dtype=np.float16).astype(np.float32)

        stored = _i8 if dtype is None else f16
        for pid, enc in zip(ids, expected):
            np.testing.assert_allclose(full[pid], stored(enc.vectors), rtol=2e-3, atol=1e-4)
            if pooling.startswith("muvera"):  # fastembed's defaults, computed by fastembed where it is installed
                want = _reference_fde(enc.vectors)
                assert pooled[pid].shape == (10_240,)
                np.testing.assert_allclose(pooled[pid], f16(want), rtol=2e-3, atol=1e-4)
            elif enc.grid is not None:
                want = pool_rows_cols(enc.vectors, enc.image_mask, enc.grid)
                np.testing.assert_allclose(pooled[pid], f16(want), rtol=2e-3, atol=1e-4)

        query = "quarterly sales by region"
        q = ref.encode_queries([query])[0]
        want_scores = [np_maxsim(q, stored(e.vectors)) for e in expected]
        want_order = [n for _, n in sorted(zip(want_scores, range(1, 5)), key=lambda t: (-t[0], t[1]))]
        out = eng.search({"query": query, "libraries": ["lib"], "mode": "vector", "top_k": 4})
        assert out.mode == "vector" and not out.degraded
        assert [h.page for h in out.hits] == want_order
        for h in out.hits:
            assert h.scores["visual"] == pytest.approx(want_scores[h.page - 1], rel=1e-3, abs=1e-3)
            assert h.scores["bm25"] is None
    finally:
        eng.close()


@pytest.mark.parametrize("with_dense", [False, True])
def test_hybrid_is_weighted_rrf_of_its_channels(colpali_dir: Path, data_dir: Path, pdf_bytes: bytes,
                                                tiny_model_dir: Callable[[str], Path], with_dense: bool) -> None:
    dense = {"dense_model": str(tiny_model_dir("dense"))} if with_dense else {}
    s = _settings(data_dir, page_model=str(colpali_dir), page_pooling="none", **dense)
    eng = Engine(s)
    try:
        eng.create_library("lib")
        eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        out = eng.search({"query": "revenue grew in the quarter", "libraries": ["lib"], "mode": "hybrid", "top_k": 10})
        assert out.mode == "hybrid" and not out.degraded
        assert len(out.hits) == 4  # every page has a visual score
        weights = {"bm25": s.passage_weight(alone=False), "bm25_page": s.bm25_page_weight, "visual": s.visual_weight}
        if with_dense:
            weights["dense"] = s.dense_weight
            assert all(h.scores["dense"] is not None for h in out.hits)
        ranks: dict[str, dict[int, int]] = {}
        for ch in weights:
            scored = sorted((h for h in out.hits if h.scores[ch] is not None), key=lambda h: -h.scores[ch])
            ranks[ch] = {h.page: r for r, h in enumerate(scored, start=1)}

        def fused_with(k: int) -> dict[int, float]:
            return {h.page: sum(w / (k + ranks[ch][h.page]) for ch, w in weights.items() if h.page in ranks[ch])
                    for h in out.hits}

        # beside the page images RRF's k is rrf_k, with or without the dense channel
        got = {h.page: h.scores["fused"] for h in out.hits}
        assert s.rrf_k != s.rrf_k_dense
        assert got == pytest.approx(fused_with(s.rrf_k), rel=1e-9)
        assert got != pytest.approx(fused_with(s.rrf_k_dense), rel=1e-6)
        fused = [h.scores["fused"] for h in out.hits]
        assert fused == sorted(fused, reverse=True)
        # auto = hybrid when a page model is configured
        assert eng.search({"query": "revenue", "libraries": ["lib"]}).mode == "hybrid"
    finally:
        eng.close()


@pytest.mark.parametrize(("pooling", "prefetch", "top_k", "rerank", "want"), [
    ("muvera", 12, 3, False, (12, 12)),  # the first stage's candidates: prefetch_limit
    ("muvera", 12, 20, False, (20, 20)),  # never fewer than the answer needs
    ("muvera", 12, 3, True, (30, 30)),  # ... nor than the rerank depth
    ("rowcol", 12, 3, False, (12, 12)),
    ("muvera", None, 3, False, (100, 100)),  # auto: 100 for MUVERA
    ("rowcol", None, 3, False, (100, 200)),  # auto: 200 for a pooled scan, ranked 100 deep
    ("none", 12, 3, False, (100, 100)),  # exhaustive: as deep as the other channels (MIN_CANDIDATES)
])
def test_visual_channel_ranks_only_the_first_stage_candidates(
    colpali_dir: Path, data_dir: Path, pdf_bytes: bytes, pooling: str, prefetch: int | None, top_k: int,
    rerank: bool, want: tuple[int, int],
) -> None:
    """Exact MaxSim costs per page: the visual channel asks the store for the first stage's
    candidates, not for the 100 pages the BM25 channels rank. ``want``: (pages ranked,
    candidates of the first stage)."""
    s = _settings(data_dir, page_model=str(colpali_dir), page_pooling=pooling, prefetch_limit=prefetch,
                  rerank_depth=30)
    eng = Engine(s)
    calls: list[tuple[int, int]] = []
    inner = eng.store.search_multivector

    def spy(name: str, query: Any, where: Any, limit: int, **kw: Any) -> Any:
        calls.append((limit, kw["prefetch_limit"]))
        return inner(name, query, where, limit, **kw)

    try:
        eng.create_library("lib")
        eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        eng.store.search_multivector = spy  # type: ignore[method-assign]
        out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "hybrid", "top_k": top_k,
                          "rerank": rerank})
        assert calls == [want]
        assert len(out.hits) == min(top_k, 4) and all(h.scores["visual"] is not None for h in out.hits)
    finally:
        eng.close()


def test_restricted_pages_never_reach_the_encoder(colpali_dir: Path, data_dir: Path) -> None:
    spy = Spy(load_page_encoder(str(colpali_dir), device="cpu"))
    eng = Engine(_settings(data_dir), models=ModelSet(page=spy))
    try:
        eng.create_library("lib")
        data = pdfs.make_pdf([PAGES[0], pdfs.Page([PAGES[1]], header="RESTRICTED"), PAGES[2]])
        res = eng.ingest("lib", data, {"doc_id": "d"})
        assert res.pages_dropped == [2]
        assert spy.pages_seen == 2
        res2 = eng.ingest("lib", pdfs.make_pdf(["x"]), {"doc_id": "secret", "sensitivity": "RESTRICTED"})
        assert res2.status == "dropped_by_policy" and spy.pages_seen == 2
        out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "vector", "top_k": 10})
        assert sorted(h.page for h in out.hits) == [1, 3]
    finally:
        eng.close()


def test_a_failing_page_model_degrades_search_and_aborts_ingest_atomically(
    colpali_dir: Path, data_dir: Path, pdf_bytes: bytes
) -> None:
    spy = Spy(load_page_encoder(str(colpali_dir), device="cpu"))
    eng = Engine(_settings(data_dir), models=ModelSet(page=spy, configured={"page": str(colpali_dir)}))
    try:
        eng.create_library("lib")
        v1 = eng.ingest("lib", pdf_bytes, {"doc_id": "q3"}).version
        lexical = eng.search({"query": "free cash flow", "libraries": ["lib"], "mode": "bm25"})

        spy.fail_queries = True
        for mode in ("hybrid", "vector", "auto"):
            out = eng.search({"query": "free cash flow", "libraries": ["lib"], "mode": mode})
            assert out.degraded and out.mode == "economy"
            assert out.degraded_reasons[0].startswith("visual_unavailable: query encoding failed (TimeoutError")
            assert [(h.doc_id, h.page) for h in out.hits] == [(h.doc_id, h.page) for h in lexical.hits]

        spy.fail_pages = True
        with pytest.raises(RuntimeError, match="device lost"):
            eng.ingest("lib", pdfs.make_pdf(["a new version about cash"]), {"doc_id": "q3"})
        assert eng.document("lib", "q3")["version"] == v1
        for kind in (KIND_CHUNK, KIND_PAGE):
            assert eng.store.count("lib", Where(kind=kind, doc_id="q3", not_version=v1)) == 0
        again = eng.search({"query": "free cash flow", "libraries": ["lib"], "mode": "bm25"})
        assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in lexical.hits]
    finally:
        eng.close()


def test_a_library_is_never_used_with_another_model(
    tiny_model_dir: Callable[[str], Path], data_dir: Path, pdf_bytes: bytes
) -> None:
    eng = Engine(_settings(data_dir, page_model=str(tiny_model_dir("colpali"))))
    eng.create_library("lib")
    eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
    eng.close()
    other = Engine(_settings(data_dir, page_model=str(tiny_model_dir("colqwen2"))))
    try:
        with pytest.raises(ModelMismatchError, match="page_full"):
            other.search({"query": "revenue", "libraries": ["lib"], "mode": "hybrid"})
        with pytest.raises(ModelMismatchError):
            other.ingest("lib", pdfs.make_pdf(["more"]), {"doc_id": "more"})
    finally:
        other.close()
    # Without a page model the library still answers, from the CPU path, saying why.
    plain = Engine(_settings(data_dir))
    try:
        with pytest.raises(ServiceUnavailableError, match="page vectors need"):
            plain.ingest("lib", pdfs.make_pdf(["more"]), {"doc_id": "more"})
        out = plain.search({"query": "revenue", "libraries": ["lib"], "mode": "hybrid"})
        assert out.degraded and out.hits and out.hits[0].page == 1
    finally:
        plain.close()


def test_a_page_model_that_fails_to_load_leaves_the_cpu_path(data_dir: Path, tmp_path: Path) -> None:
    eng = Engine(_settings(data_dir, page_model=str(tmp_path / "no-such-model")))
    try:
        assert eng.models.page is None and "page" in eng.models.errors
        with pytest.raises(ServiceUnavailableError, match="failed to load"):
            eng.create_library("lib")
        assert eng.list_libraries() == []
    finally:
        eng.close()
    Engine(_settings(data_dir)).create_library("lib")  # a BM25-only library
    eng = Engine(_settings(data_dir, page_model=str(tmp_path / "no-such-model")))
    try:
        eng.ingest("lib", pdfs.make_pdf(["revenue grew"]), {"doc_id": "d"})
        out = eng.search({"query": "revenue", "libraries": ["lib"], "mode": "hybrid"})
        assert out.degraded and out.degraded_reasons[0].startswith("visual_unavailable: page model failed to load")
        assert [h.doc_id for h in out.hits] == ["d"]
    finally:
        eng.close()


def test_dense_passages_are_the_models_vectors_and_join_the_fusion(
    tiny_model_dir: Callable[[str], Path], data_dir: Path, pdf_bytes: bytes
) -> None:
    folder = tiny_model_dir("dense")
    eng = Engine(_settings(data_dir, dense_model=str(folder)))
    try:
        eng.create_library("lib")
        res = eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        chunks = eng.store.scroll("lib", Where(kind=KIND_CHUNK))
        vecs = eng.store.retrieve_vectors("lib", [c.id for c in chunks], DENSE_CHUNK)
        ref = load_dense_encoder(str(folder), device="cpu")
        # What is encoded is the passage's context (its document's title, ...) and its text.
        want = ref.encode([payload_text(c.payload) for c in chunks], kind="document")
        for c, w in zip(chunks, want):
            np.testing.assert_allclose(vecs[c.id], w, rtol=1e-4, atol=1e-5)
        out = eng.search({"query": "market share of operators", "libraries": ["lib"], "top_k": 4})
        assert out.mode == "economy" and not out.degraded
        qv = ref.encode(["market share of operators"], kind="query")[0]
        by_chunk = {c.payload["chunk_id"]: float(np.dot(qv, w)) for c, w in zip(chunks, want)}
        dense_hits = [h for h in out.hits if h.scores["dense"] is not None]
        assert len(dense_hits) == res.pages_indexed
        for h in dense_hits:  # one passage per page here: the page's dense score is its passage's
            assert h.scores["dense"] == pytest.approx(by_chunk[h.chunk_id], abs=1e-4)
    finally:
        eng.close()


def test_rerank_orders_by_the_cross_encoder_and_failure_keeps_fused_order(
    tiny_model_dir: Callable[[str], Path], data_dir: Path, pdf_bytes: bytes
) -> None:
    folder = tiny_model_dir("cross_encoder")
    eng = Engine(_settings(data_dir, reranker="cross_encoder", reranker_model=str(folder)))
    try:
        eng.create_library("lib")
        eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        eng.ingest("lib", pdfs.make_pdf(["Secret revenue plan", "x"]), {"doc_id": "s", "page_sensitivity": {"1": "RESTRICTED"}})
        q = "revenue in the quarter and costs"
        base = eng.search({"query": q, "libraries": ["lib"], "top_k": 10})
        out = eng.search({"query": q, "libraries": ["lib"], "top_k": 10, "rerank": True})
        assert not out.degraded
        ref = load_reranker("cross_encoder", str(folder), device="cpu")
        want = ref.score(q, [h.text for h in base.hits])
        by_chunk = dict(zip([h.chunk_id for h in base.hits], want))
        got = [h.scores["rerank"] for h in out.hits]
        assert got == sorted(got, reverse=True)
        for h in out.hits:
            assert h.scores["rerank"] == pytest.approx(by_chunk[h.chunk_id], abs=1e-5)
            assert "Secret" not in h.text

        class Broken:
            model_id, revision = "broken", "0"

            def score(self, query: str, texts: Sequence[str]) -> list[float]:
                return [0.5]  # malformed: one score for many texts

        eng.models._reranker = Broken()  # noqa: SLF001 - inject a failing model
        bad = eng.search({"query": q, "libraries": ["lib"], "top_k": 10, "rerank": True})
        assert bad.degraded and bad.degraded_reasons[0].startswith("rerank_failed")
        assert [h.chunk_id for h in bad.hits] == [h.chunk_id for h in base.hits]
        assert all(h.scores["rerank"] is None for h in bad.hits)
    finally:
        eng.close()


def test_cli_ingest_and_search_vector_and_hybrid(
    colpali_dir: Path, data_dir: Path, tmp_path: Path, pdf_bytes: bytes,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragspine.cli import main

    pdf = tmp_path / "q3.pdf"
    pdf.write_bytes(pdf_bytes)
    for k, v in {"RAGSPINE_PAGE_MODEL": str(colpali_dir), "RAGSPINE_DEVICE": "cpu",
                 "RAGSPINE_PAGE_RENDER_DPI": str(DPI), "RAGSPINE_RERANKER": "none"}.items():
        monkeypatch.setenv(k, v)
    assert main(["--data-dir", str(data_dir), "ingest", str(pdf), "--library", "lib", "-q"]) == 0
    capsys.readouterr()
    for mode in ("vector", "hybrid"):
        assert main(["--data-dir", str(data_dir), "search", "sales by region", "--library", "lib",
                     "--mode", mode, "--json"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["mode"] == mode and not res["degraded"]
        assert len(res["hits"]) == 4 and all(h["scores"]["visual"] is not None for h in res["hits"])
    assert os.environ["RAGSPINE_PAGE_MODEL"] == str(colpali_dir)


def test_similarity_map_explains_the_visual_score(colpali_dir: Path, data_dir: Path, pdf_bytes: bytes) -> None:
    from fastapi.testclient import TestClient

    from ragspine.serving.app import create_app

    eng = Engine(_settings(data_dir, page_model=str(colpali_dir)))
    try:
        eng.create_library("lib")
        eng.ingest("lib", pdfs.make_pdf([*PAGES[:2], pdfs.Page([PAGES[2]], header="RESTRICTED")]), {"doc_id": "q3"})
        query = "sales by region"
        ref = load_page_encoder(str(colpali_dir), device="cpu")
        q = ref.encode_queries([query])[0]
        enc = ref.encode_pages(_page_images(pdfs.make_pdf(PAGES[1:2])))[0]  # page 2 as rendered alone
        sm = eng.similarity_map("lib", "q3", 2, query)
        rows, cols = enc.grid
        assert (sm.rows, sm.cols) == (rows, cols)
        stored = _i8(enc.vectors)  # the library keeps int8 page vectors (the embedded default)
        want = (q @ stored[np.asarray(enc.image_mask, dtype=bool)].T).reshape(len(q), rows, cols)
        np.testing.assert_allclose(sm.per_token, want, rtol=1e-4, atol=1e-4)
        assert sm.score == pytest.approx(np_maxsim(q, stored), rel=1e-4)
        assert sum(c["value"] for c in sm.contributions) == pytest.approx(sm.score, rel=1e-5)
        hit = [h for h in eng.search({"query": query, "libraries": ["lib"], "mode": "vector"}).hits if h.page == 2][0]
        assert hit.scores["visual"] == pytest.approx(sm.score, rel=1e-4)
        assert float(sm.combined.min()) >= 0.0 and float(sm.combined.max()) <= 1.0

        client = TestClient(create_app(eng.settings, eng))
        base = "/v1/libraries/lib/documents/q3/pages"
        r = client.get(f"{base}/2/similarity-map", params={"query": query})
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        img = pymupdf.Pixmap(r.content)
        assert (img.width, img.height, img.alpha) == (cols, rows, 1)
        j = client.get(f"{base}/2/similarity-map", params={"query": query, "format": "json"}).json()
        assert j["rows"] == rows and j["score"] == pytest.approx(sm.score, rel=1e-6)
        assert client.get(f"{base}/3/similarity-map", params={"query": query}).status_code == 404  # RESTRICTED
        assert client.get(f"{base}/9/similarity-map", params={"query": query}).status_code == 404
        assert client.get(f"{base}/2/similarity-map", params={"query": " "}).status_code == 422
        assert client.get(f"{base}/0/similarity-map", params={"query": query}).status_code == 404
        assert client.get(f"{base}/-1/similarity-map", params={"query": query}).status_code == 404
        assert client.get(f"{base}/2/similarity-map", params={"query": "x" * 5000}).status_code == 422
        assert client.get(f"{base}/2/similarity-map", params={"query": query, "format": "svg"}).status_code == 422
        assert client.get(f"{base}/2/similarity-map").status_code == 422  # no query
        assert client.get("/v1/libraries/lib/documents/..%2Fx/pages/2/similarity-map",
                          params={"query": query}).status_code in (404, 422)
        assert client.get("/v1/libraries/nope/documents/q3/pages/2/similarity-map",
                          params={"query": query}).status_code == 404
        ready = client.get("/readyz").json()["checks"]
        assert ready["page_model"].startswith("ok: ") and ready["dense_model"] == "off"
        # How the page model encodes queries, and why not from CUDA graphs here.
        assert ready["page_model"].endswith(
            "; queries: plain (CUDA graphs need a CUDA device; this model is on cpu)")
    finally:
        eng.close()
    plain = Engine(_settings(data_dir))
    try:
        plain.create_library("text")
        plain.ingest("text", pdf_bytes, {"doc_id": "d"})
        with pytest.raises(NotFoundError, match="no page vectors"):
            plain.similarity_map("text", "d", 1, "revenue")
    finally:
        plain.close()


def test_precomputed_page_vectors_cover_exactly_the_kept_pages(colpali_dir: Path, data_dir: Path) -> None:
    from ragspine.errors import InvalidRequestError

    ref = load_page_encoder(str(colpali_dir), device="cpu")
    spy = Spy(ref)
    eng = Engine(_settings(data_dir), models=ModelSet(page=spy))
    try:
        eng.create_library("lib")
        data = pdfs.make_pdf([PAGES[0], pdfs.Page([PAGES[1]], header="RESTRICTED"), PAGES[2]])
        imgs = _page_images(data)
        enc = dict(zip((1, 2, 3), ref.encode_pages(imgs)))  # page 2 encoded only to prove it is refused
        with pytest.raises(InvalidRequestError, match=r"not kept \[2\]"):
            eng.ingest("lib", data, {"doc_id": "d"}, page_vectors=enc)
        with pytest.raises(InvalidRequestError, match=r"missing pages \[3\]"):
            eng.ingest("lib", data, {"doc_id": "d"}, page_vectors={1: enc[1]})
        assert eng.store.count("lib", Where(kind=KIND_PAGE)) == 0
        res = eng.ingest("lib", data, {"doc_id": "d"}, page_vectors={1: enc[1], 3: enc[3]})
        assert res.pages_indexed == 2 and spy.pages_seen == 0  # nothing encoded by the engine
        ids = {n: point_id("d", res.version, n, "page") for n in (1, 3)}
        got = eng.store.retrieve_vectors("lib", list(ids.values()), PAGE_FULL)
        for n, pid in ids.items():  # exactly the given vectors, as int8 storage keeps them
            np.testing.assert_allclose(got[pid], _i8(enc[n].vectors), rtol=0, atol=1e-7)
    finally:
        eng.close()


def test_render_processes_give_the_same_pages_as_the_render_thread(colpali_dir: Path, tmp_path: Path) -> None:
    data = pdfs.make_pdf([*PAGES, pdfs.Page([PAGES[0]], header="RESTRICTED"), "最后一页 收入 增长"])
    out = {}
    for workers in (1, 2):
        d = tmp_path / f"w{workers}"
        eng = Engine(_settings(d, page_model=str(colpali_dir), render_workers=workers, page_batch_size=2))
        try:
            eng.create_library("lib")
            res = eng.ingest("lib", data, {"doc_id": "d"})
            assert res.pages_dropped == [5] and res.pages_indexed == 5
            ids = [point_id("d", res.version, n, "page") for n in (1, 2, 3, 4, 6)]
            vecs = eng.store.retrieve_vectors("lib", ids, PAGE_FULL)
            thumbs = [eng.thumbnail("lib", "d", n).read_bytes() for n in (1, 2, 3, 4, 6)]
            out[workers] = ([vecs[i] for i in ids], thumbs)
            if workers == 2:
                assert eng.indexer.renders.started  # the pool really ran
        finally:
            eng.close()
    for a, b in zip(out[1][0], out[2][0]):
        np.testing.assert_array_equal(a, b)
    assert out[1][1] == out[2][1]


def test_vector_mode_encodes_the_dense_query_only_when_it_falls_back(
    tiny_model_dir: Callable[[str], Path], data_dir: Path, pdf_bytes: bytes
) -> None:
    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner, self.calls = inner, 0
            self.model_id, self.revision, self.dim = inner.model_id, inner.revision, inner.dim

        def encode(self, texts: Sequence[str], kind: str = "query") -> np.ndarray:
            if kind == "query":
                self.calls += 1
            return self.inner.encode(texts, kind=kind)

    spy = Spy(load_page_encoder(str(tiny_model_dir("colpali")), device="cpu"))
    dense = Counting(load_dense_encoder(str(tiny_model_dir("dense")), device="cpu"))
    eng = Engine(_settings(data_dir), models=ModelSet(page=spy, dense=dense))
    try:
        eng.create_library("lib")
        eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "vector"})
        assert out.mode == "vector" and dense.calls == 0
        assert all(h.scores["dense"] is None for h in out.hits)
        spy.fail_queries = True
        out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "vector"})
        assert out.mode == "economy" and out.degraded and dense.calls == 1
        assert any(h.scores["dense"] is not None for h in out.hits)
    finally:
        eng.close()


def test_visual_exits_drop_a_page_planted_as_restricted(colpali_dir: Path, data_dir: Path, pdf_bytes: bytes) -> None:
    # Indexing never stores a RESTRICTED page; plant one (the page's own classification set on
    # the stored page point, its vectors kept) to see the vector-search and similarity-map exits
    # fire on the point's page-level classification.
    eng = Engine(_settings(data_dir, page_model=str(colpali_dir)))
    try:
        eng.create_library("lib")
        res = eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        query = "quarterly sales by region"
        before = eng.search({"query": query, "libraries": ["lib"], "mode": "vector", "top_k": 4})
        assert sorted(h.page for h in before.hits) == [1, 2, 3, 4]
        assert eng.similarity_map("lib", "q3", 2, query).score > -1e9
        pred = parse_filters([{"field": "page", "op": "eq", "value": 2}])
        eng.store.set_payload("lib", Where(doc_id="q3", version=res.version, predicates=tuple(pred)),
                              {"classification": "restricted"})
        after = eng.search({"query": query, "libraries": ["lib"], "mode": "vector", "top_k": 4})
        assert sorted(h.page for h in after.hits) == [1, 3, 4]
        hybrid = eng.search({"query": query, "libraries": ["lib"], "mode": "hybrid", "top_k": 10})
        assert 2 not in {h.page for h in hybrid.hits}
        with pytest.raises(NotFoundError, match="no page 2"):
            eng.similarity_map("lib", "q3", 2, query)
        with pytest.raises(NotFoundError, match="no page 2"):
            eng.thumbnail("lib", "q3", 2)
    finally:
        eng.close()


@pytest.mark.parametrize(("first_stage_quantization", "older_record", "want"), [
    (None, False, 4.0),  # the embedded default: TurboQuant 2-bit, 4x (store.base.FDE_OVERSAMPLING_BY_COPY)
    ("scalar", False, 2.0),  # an int8 copy: 2x
    (None, True, 2.0),  # a library recorded before the choice existed has an int8 copy
])
def test_the_muvera_first_stage_oversamples_as_its_copy_needs(
    colpali_dir: Path, data_dir: Path, pdf_bytes: bytes, first_stage_quantization: str | None, older_record: bool,
    want: float,
) -> None:
    eng = Engine(_settings(data_dir, page_model=str(colpali_dir), page_pooling="muvera",
                           first_stage_quantization=first_stage_quantization))
    seen: list[Any] = []
    inner = eng.store.search_multivector

    def spy(name: str, query: Any, where: Any, limit: int, **kw: Any) -> Any:
        seen.append(kw.get("prefetch_oversampling"))
        return inner(name, query, where, limit, **kw)

    try:
        rec = eng.create_library("lib")
        assert rec.encoders[PAGE_FDE]["quantization"] == (first_stage_quantization or "turbo2")
        eng.ingest("lib", pdf_bytes, {"doc_id": "q3"})
        if older_record:
            old = eng.libraries.get("lib")
            old.encoders[PAGE_FDE].pop("quantization")
            eng.libraries.save(old)
        eng.store.search_multivector = spy  # type: ignore[method-assign]
        out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "vector", "top_k": 4})
        assert seen == [want] and len(out.hits) == 4
    finally:
        eng.close()


def test_the_processor_is_copied_once_for_the_device_thread(colpali_dir: Path, data_dir: Path, pdf_bytes: bytes,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages encode on the indexer's one device thread, kept between documents: its copy of the
    processor (a fast tokenizer cannot be shared between threads) is made once, not per document
    (a Gemma tokenizer's copy costs a vocabulary of 257k entries)."""
    import copy

    from ragspine.models import page_prep

    copies: list[Any] = []
    real = copy.deepcopy

    def counting(x: Any, *a: Any) -> Any:
        if x is getattr(counting, "processor", None):
            copies.append(x)
        return real(x, *a)

    eng = Engine(_settings(data_dir, page_model=str(colpali_dir)))
    try:
        counting.processor = eng.models.page.processor  # type: ignore[attr-defined]
        monkeypatch.setattr(page_prep.copy, "deepcopy", counting)
        eng.create_library("lib")
        pdf = tmp_path / "report.pdf"
        pdf.write_bytes(pdf_bytes)
        for doc in ("a", "b", "c"):
            assert eng.ingest("lib", pdf, {"doc_id": doc}).pages_indexed == len(PAGES)
    finally:
        eng.close()
    assert len(copies) == 1


def test_pages_prepared_in_processes_index_the_same_vectors(colpali_dir: Path, tmp_path: Path,
                                                             pdf_bytes: bytes) -> None:
    """RAGSPINE_PREP_WORKERS=2: the page batches are prepared in two worker processes, the
    visual search ranks and scores as with pages prepared in the process, and the engine's close
    stops the processes."""
    results = {}
    for workers in (1, 2):
        eng = Engine(_settings(tmp_path / f"data{workers}", page_model=str(colpali_dir), prep_workers=workers))
        try:
            procs = eng.models.page.prep_processes  # type: ignore[union-attr]
            assert (procs is None) == (workers == 1)
            eng.create_library("lib")
            assert eng.ingest("lib", pdf_bytes, {"doc_id": "q3"}).pages_indexed == len(PAGES)
            out = eng.search({"query": "sales by region", "libraries": ["lib"], "mode": "vector", "top_k": 4})
            results[workers] = [(h.page, {k: None if v is None else round(v, 6) for k, v in h.scores.items()})
                                for h in out.hits]
            if procs is not None:
                assert procs.started
        finally:
            eng.close()
        if procs is not None:
            assert not procs.started  # closed with the engine
    assert len(results[1]) == 4 and results[2] == results[1]


def test_an_engine_leaves_a_model_set_it_was_given_open(colpali_dir: Path, tmp_path: Path, pdf_bytes: bytes) -> None:
    """A ModelSet passed in may be shared with other engines (a benchmark's, a test's): the
    engine's close leaves its page model's prep processes running; the owner closes them."""
    from ragspine.models import load_page_encoder
    from ragspine.models.modelset import ModelSet

    models = ModelSet()
    models.page = load_page_encoder(str(colpali_dir), device="cpu", prep_workers=2)
    procs = models.page.prep_processes
    try:
        eng = Engine(_settings(tmp_path / "data", page_model=str(colpali_dir)), models=models)
        try:
            eng.create_library("lib")
            assert eng.ingest("lib", pdf_bytes, {"doc_id": "q3"}).pages_indexed == len(PAGES)
        finally:
            eng.close()
        assert procs is not None and procs.started  # still running after the engine closed
    finally:
        models.close()
    assert not procs.started
