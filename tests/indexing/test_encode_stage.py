"""The page encoder as a stage of its own (``ragspine.indexing.encode_stage``): the next batch
encodes while the ingesting thread builds this batch's points, every page keeps its own vectors,
an encoder that can prepare pages apart has them prepared on the prep threads, and a failure
leaves nothing running and nothing committed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pdfs
import pytest
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import RagspineError
from ragspine.indexing import encode_stage, writer
from ragspine.models.base import BasePageEncoder, EncodedPage
from ragspine.models.errors import ModelOutputError
from ragspine.models.modelset import ModelSet

PAGES = [f"Page {i} of the harbour report: revenue, tonnage and berths." for i in range(1, 11)]
BATCH = 3  # 10 pages: batches of 3, 3, 3, 1


def _page(value: float) -> EncodedPage:
    return EncodedPage(np.full((4, 16), value, dtype=np.float32), np.ones(4, dtype=bool), (2, 2))


class Counting:
    """A page model without a prepare step (as a Ray Serve proxy): the n-th image it encodes
    gets vectors of value n, and every call says on which thread it ran."""

    model_id, revision, dim = "test/counting-pages", "1", 16

    def __init__(self) -> None:
        self.seen = 0
        self.submitted: list[int] = []
        self.calls: list[tuple[int, str]] = []
        self.second = threading.Event()
        self.fail_at: int | None = None

    def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
        self.calls.append((len(images), threading.current_thread().name))
        if len(self.calls) == 2:
            self.second.set()
        if self.fail_at == len(self.calls):
            raise ModelOutputError("test/counting-pages: the device fell over")
        out = [_page(self.seen + i) for i in range(len(images))]
        self.seen += len(images)
        return out

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.eye(2, 16, dtype=np.float32) for _ in texts]


class Splitting(BasePageEncoder):
    """A page model that prepares apart (``prepare_pages``) on ``prefetch`` threads."""

    model_id, revision, dim = "test/splitting-pages", "1", 16

    def __init__(self) -> None:
        self.batch_size = BATCH
        self.prefetch = 2
        self.threads: dict[str, set[str]] = {"prepare": set(), "encode": set()}

    def _bucket_key(self, image: Any) -> Any:
        return 0

    def _prepare_pages(self, images: list[Any]) -> Any:
        self.threads["prepare"].add(threading.current_thread().name)
        return [float(np.asarray(im, dtype=np.float64).mean()) for im in images]

    def _encode_pages(self, prepared: Any) -> list[EncodedPage]:
        self.threads["encode"].add(threading.current_thread().name)
        return [_page(v) for v in prepared]

    def _encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.eye(2, 16, dtype=np.float32) for _ in texts]


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float]]:
    """(page number, first value of its encoded vectors) for every page's points, in order."""
    seen: list[tuple[int, float]] = []
    real = writer.page_points

    def spy(pp: Any, **kw: Any) -> Any:
        seen.append((pp.page.number, float(kw["encoded"].vectors[0, 0])))
        return real(pp, **kw)

    monkeypatch.setattr(writer, "page_points", spy)
    return seen


def _engine(tmp_path: Path, model: Any) -> Engine:
    eng = Engine(Settings(data_dir=tmp_path / "data", dense_model="none", reranker="none", ocr="off",
                          page_batch_size=BATCH, page_vector_dtype="float32", render_workers=1),
                 models=ModelSet(page=model))
    eng.create_library("lib")
    return eng


def _pdf(tmp_path: Path) -> Path:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(pdfs.make_pdf(PAGES))
    return pdf


def _busy_device(monkeypatch: pytest.MonkeyPatch, model: Counting, timeout: float) -> None:
    """The model's first batch stays on the device until the second batch is handed to the stage
    (or ``timeout`` passes): a device still encoding when the next render arrives."""
    queued = threading.Event()
    real_submit = encode_stage.EncodeStage.submit
    real_encode = model.encode_pages

    def submit(self: Any, images: Any) -> Any:
        fut = real_submit(self, images)
        if len(model.submitted) == 1:
            queued.set()
        model.submitted.append(len(images))
        return fut

    def encode(images: list[Any]) -> list[EncodedPage]:
        if not model.calls:
            queued.wait(timeout)
        return real_encode(images)

    monkeypatch.setattr(encode_stage.EncodeStage, "submit", submit)
    monkeypatch.setattr(model, "encode_pages", encode)


@pytest.mark.parametrize("ahead", [1, 0])
def test_the_next_batch_encodes_while_this_one_becomes_points(tmp_path: Path, points: list[Any],
                                                              monkeypatch: pytest.MonkeyPatch, ahead: int) -> None:
    """While the device still encodes the first batch, the second is queued behind it before the
    first becomes points: the first batch's points wait (up to 10 s) for the encoder to start on
    the second, and it has, at once. Shown failing with ENCODE_AHEAD = 0 (the order before the
    stage): the second batch is not encoded until the first batch's points are built."""
    monkeypatch.setattr(encode_stage, "ENCODE_AHEAD", ahead)
    model = Counting()
    _busy_device(monkeypatch, model, 10.0 if ahead else 1.0)
    waited: list[bool] = []
    spy = writer.page_points

    def first_waits(pp: Any, **kw: Any) -> Any:
        if pp.page.number == 1:
            waited.append(model.second.wait(10.0 if ahead else 0.5))
        return spy(pp, **kw)

    monkeypatch.setattr(writer, "page_points", first_waits)
    eng = _engine(tmp_path, model)
    try:
        r = eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"})
    finally:
        eng.close()
    assert r.pages_indexed == 10 and waited == [bool(ahead)]
    assert [n for n, _ in model.calls] == [3, 3, 3, 1]
    # An encoder without prepare_pages (a Ray Serve proxy) runs on a thread of the document's own.
    assert {name for _, name in model.calls} == {"ragspine-encode-doc_0"}
    # Each page has the vectors of its own image: the n-th page encoded was page n.
    assert points == [(n, float(n - 1)) for n in range(1, 11)]


def test_pages_are_prepared_on_the_prep_threads_and_encoded_on_the_device_thread(tmp_path: Path,
                                                                                 points: list[Any]) -> None:
    """Two documents ingested at once share the one device thread (and the prep threads, kept
    between documents); every page still gets its own image's vectors."""
    from concurrent.futures import ThreadPoolExecutor

    model = Splitting()
    eng = _engine(tmp_path, model)
    try:
        pdf = _pdf(tmp_path)
        other = tmp_path / "other.pdf"
        other.write_bytes(pdfs.make_pdf([f"Another page {i}, on tides and cranes." for i in range(1, 8)]))
        eng.ingest("lib", pdf, {"doc_id": "a"})
        device = eng.indexer.writer.encoding._device  # noqa: SLF001
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda a: eng.ingest("lib", a[0], {"doc_id": a[1]}), [(pdf, "b"), (other, "c")]))
        assert [r.pages_indexed for r in done] == [10, 7]
        assert eng.indexer.writer.encoding._device is device  # noqa: SLF001 - kept between documents
    finally:
        eng.close()
    assert model.threads["encode"] == {"ragspine-encode_0"}
    assert model.threads["prepare"] and all(t.startswith("ragspine-prep") for t in model.threads["prepare"])
    # Each page's value is its own image's mean pixel: the same for a page of "a" and "b".
    first = points[:10]
    assert [n for n, _ in first] == list(range(1, 11)) and len({v for _, v in first}) > 1
    later = sorted(points[10:])
    assert [n for n, _ in later] == sorted(list(range(1, 11)) + list(range(1, 8)))
    assert {v for n, v in first} <= {v for _, v in later}
    for n, v in first:
        assert (n, v) in later


def test_an_encoder_failure_stops_the_stage_and_commits_nothing(tmp_path: Path) -> None:
    model = Counting()
    model.fail_at = 2
    eng = _engine(tmp_path, model)
    try:
        with pytest.raises(RagspineError, match="the device fell over"):
            eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"})
        calls = len(model.calls)
        assert eng.documents("lib") == []
        # Nothing encodes after the ingest has returned: the batches behind the failure were dropped.
        threading.Event().wait(0.2)
        assert len(model.calls) == calls <= 3
        model.fail_at = None
        r = eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"})
        assert r.status != "unchanged" and r.pages_indexed == 10
    finally:
        eng.close()


def test_an_encoder_that_loses_a_page_fails_the_ingest_by_name(tmp_path: Path) -> None:
    class Short(Counting):
        def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
            return super().encode_pages(images)[:-1]

    eng = _engine(tmp_path, Short())
    try:
        with pytest.raises(ModelOutputError, match="2 pages came back for a batch of 3"):
            eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"})
        assert eng.documents("lib") == []
    finally:
        eng.close()


def test_prep_threads_grow_for_an_encoder_that_wants_more_and_stop_at_close() -> None:
    from ragspine.errors import ServiceUnavailableError

    class Wants:
        def __init__(self, n: int) -> None:
            self.prefetch = n

        def prepare_pages(self, images: list[Any]) -> list[Any]:
            return [threading.current_thread().name for _ in images]

    threads = encode_stage.EncodeThreads()
    try:
        assert threads.prepare(Wants(0), [1]) is None  # prepares inline
        assert encode_stage.EncodeThreads.workers(object()) == 0  # no prepare_pages: inline too
        assert threads.prepare(Wants(1), [1]).result() == ["ragspine-prep_0"]
        first = threads._prep  # noqa: SLF001
        threads.prepare(Wants(1), [1]).result()
        assert threads._prep is first  # noqa: SLF001
        threads.prepare(Wants(3), [1]).result()
        assert threads._prep is not first and threads._prep_size == 3  # noqa: SLF001
    finally:
        threads.close()
    # Closed: a late stage is refused with a clear error, not served by a new pool nobody closes.
    with pytest.raises(ServiceUnavailableError, match="closing"):
        threads.prepare(Wants(1), [1])
    with pytest.raises(ServiceUnavailableError, match="closing"):
        threads.device()
    assert threads._prep is None and threads._device is None  # noqa: SLF001


class OnDevice(Counting):
    """A page model on a device (``device.type``), with ColPali-shaped random pages of varied
    lengths, so that the MUVERA encodings differ page by page."""

    dim = 128

    def __init__(self, device: str) -> None:
        super().__init__()
        import torch

        self.device = torch.device(device)

    def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
        out = []
        for _ in images:
            rng = np.random.default_rng(self.seen)
            n = 5 + 40 * (self.seen % 3)
            v = rng.standard_normal((n, 128)).astype(np.float32)
            out.append(EncodedPage(v, np.zeros(n, dtype=bool), None))
            self.seen += 1
        return out


def _first_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Ingest the report with a page model on the CPU: for each page, the first-stage vectors the
    encode stage made (None: none) and those the ingesting thread's numpy makes."""
    from ragspine.catalog import first_stage_vectors

    seen: list[tuple[Any, Any]] = []
    real = writer.page_points

    def spy(pp: Any, **kw: Any) -> Any:
        seen.append((kw["first_stage"], first_stage_vectors(kw["encoded"], kw["models"])))
        return real(pp, **kw)

    monkeypatch.setattr(writer, "page_points", spy)
    eng = _engine(tmp_path, OnDevice("cpu"))
    try:
        assert eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"}).pages_indexed == 10
    finally:
        eng.close()
    return seen


@pytest.mark.parametrize("on_device", [True, False])
def test_muvera_vectors_are_made_on_the_encoders_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         on_device: bool) -> None:
    """With the page model on a device of FIRST_STAGE_DEVICES (here the CPU stands in for CUDA),
    the encode thread makes each page's MUVERA vector, equal to the ingesting thread's numpy one;
    a model on another device leaves them to the ingesting thread."""
    pytest.importorskip("torch")
    from ragspine.catalog import PAGE_FDE

    if on_device:
        monkeypatch.setattr(encode_stage, "FIRST_STAGE_DEVICES", ("cuda", "cpu"))
    seen = _first_stages(tmp_path, monkeypatch)
    assert len(seen) == 10
    for device_made, numpy_made in seen:
        if not on_device:
            assert device_made is None
            continue
        assert set(device_made) == {PAGE_FDE}
        np.testing.assert_allclose(device_made[PAGE_FDE], numpy_made[PAGE_FDE], rtol=1e-4, atol=1e-5)
    assert len({float(b[PAGE_FDE][0]) for _, b in seen}) > 1


def test_a_batch_already_encoded_becomes_points_before_the_next_render_is_awaited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast encoder keeps the old order: the thread builds the points of a batch the encoder has
    finished before it waits for the next render, so nothing is left over at the document's end.
    (Each encode here is made to finish before the thread goes on.)"""
    from ragspine.indexing.render import PageRenderer

    events: list[str] = []
    real_submit, real_collect, real_points = encode_stage.EncodeStage.submit, PageRenderer.collect, writer.page_points

    def submit(self: Any, images: Any) -> Any:
        fut = real_submit(self, images)
        fut.result()
        return fut

    def collect(self: Any, fut: Any, numbers: Any) -> Any:
        events.append(f"render {numbers[0]}")
        return real_collect(self, fut, numbers)

    def page_points(pp: Any, **kw: Any) -> Any:
        events.append(f"points {pp.page.number}")
        return real_points(pp, **kw)

    monkeypatch.setattr(encode_stage.EncodeStage, "submit", submit)
    monkeypatch.setattr(PageRenderer, "collect", collect)
    monkeypatch.setattr(writer, "page_points", page_points)
    eng = _engine(tmp_path, Counting())
    try:
        assert eng.ingest("lib", _pdf(tmp_path), {"doc_id": "report"}).pages_indexed == 10
    finally:
        eng.close()
    assert [e for e in events if e.startswith("render")] == ["render 1", "render 4", "render 7", "render 10"]
    assert events.index("points 3") < events.index("render 4")
    assert events.index("points 9") < events.index("render 10")


def test_device_muvera_that_fails_leaves_them_to_the_ingesting_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of device memory, say: the batch is kept and the ingesting thread makes the vectors."""
    pytest.importorskip("torch")
    from ragspine.models import muvera_device

    monkeypatch.setattr(encode_stage, "FIRST_STAGE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(encode_stage, "_DEVICE_MUVERA", {})

    def fails(self: Any, pages: Any) -> Any:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(muvera_device.DeviceMuvera, "documents", fails)
    assert [device_made for device_made, _ in _first_stages(tmp_path, monkeypatch)] == [None] * 10


def test_many_buckets_stay_on_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from ragspine.catalog import LibraryModels
    from ragspine.scoring.muvera import MuveraParams

    monkeypatch.setattr(encode_stage, "FIRST_STAGE_DEVICES", ("cuda", "cpu"))
    page = OnDevice("cpu")
    limit = encode_stage.DEVICE_MUVERA_MAX_K_SIM
    assert encode_stage.device_first_stage(LibraryModels(page=page, muvera=MuveraParams(128, k_sim=limit))) is not None
    assert encode_stage.device_first_stage(LibraryModels(page=page, muvera=MuveraParams(128, k_sim=limit + 1))) is None
    assert encode_stage.device_first_stage(LibraryModels(page=page, pooling="rowcol")) is None
