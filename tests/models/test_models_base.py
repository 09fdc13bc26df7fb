"""The model layer without torch: batching plan, EncodedPage checks, the template methods on
numpy fakes, model identity (revision) and the registry's errors. Runs on the base install."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine.errors import InvalidRequestError, MissingExtraError
from ragspine.models import (
    EncodedPage,
    ModelLoadError,
    ModelOutputError,
    load_dense_encoder,
    load_page_encoder,
    load_reranker,
)
from ragspine.models._source import (
    folder_fingerprint,
    resolve_source,
    snapshot_identity,
)
from ragspine.models.base import (
    BaseDenseTextEncoder,
    BasePageEncoder,
    BaseReranker,
    BaseTextMultiVectorEncoder,
    PageEncoder,
    Reranker,
)
from ragspine.models.batch_plan import plan_batches

# -- plan_batches ------------------------------------------------------------------------------


def test_plan_batches_hand_worked() -> None:
    # sort keys -len: "ccc"(−3) "bb"(−2) "a"(−1) "dd"(−2) → order 0, 1, 3, 2
    plan = plan_batches([-3, -2, -1, -2], batch_size=2)
    assert plan == [[0, 1], [3, 2]]


def test_plan_batches_never_mixes_buckets() -> None:
    # two sizes interleaved; batch size 3: each bucket fills its own batches
    buckets = [(10, 10), (20, 20), (10, 10), (20, 20), (10, 10)]
    plan = plan_batches([0] * 5, batch_size=3, bucket_keys=buckets)
    assert plan == [[0, 2, 4], [1, 3]]


def test_plan_batches_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        plan_batches([1], 0)
    with pytest.raises(ValueError, match="bucket keys"):
        plan_batches([1, 2], 2, bucket_keys=[0])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 3)), max_size=60),
    st.integers(1, 9),
)
def test_plan_batches_properties(items: list[tuple[int, int]], batch_size: int) -> None:
    keys = [k for k, _ in items]
    buckets = [b for _, b in items]
    plan = plan_batches(keys, batch_size, buckets)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(len(items)))  # every input exactly once
    for batch in plan:
        assert 1 <= len(batch) <= batch_size
        assert len({buckets[i] for i in batch}) == 1  # one bucket per batch
        assert [keys[i] for i in batch] == sorted(keys[i] for i in batch)  # sorted inside
    assert plan == plan_batches(keys, batch_size, buckets)  # deterministic


# -- EncodedPage -------------------------------------------------------------------------------


def _page(n: int = 7, dim: int = 4, grid: tuple[int, int] | None = (2, 2)) -> EncodedPage:
    rng = np.random.default_rng(0)
    mask = np.zeros(n, dtype=bool)
    mask[1:5] = True
    return EncodedPage(rng.normal(size=(n, dim)).astype(np.float32), mask, grid)


def test_encoded_page_patch_grid_is_row_major() -> None:
    vectors = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)  # (6, 2)
    mask = np.array([False, True, True, True, True, False])
    page = EncodedPage(vectors, mask, (2, 2))
    grid = page.patch_grid()  # (2, 2, 2)
    assert grid.shape == (2, 2, 2)
    np.testing.assert_array_equal(grid[0, 1], vectors[2])  # row 0, col 1 = 2nd image token
    np.testing.assert_array_equal(grid[1, 0], vectors[3])
    assert (page.n_tokens, page.dim) == (6, 2)


def test_encoded_page_rejects_nan() -> None:
    page = _page()
    bad = page.vectors.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ModelOutputError, match="NaN"):
        EncodedPage(bad, page.image_mask, page.grid)


@pytest.mark.parametrize(
    "change",
    [
        lambda p: (p.vectors.astype(np.float64), p.image_mask, p.grid),  # wrong dtype
        lambda p: (p.vectors[0], p.image_mask, p.grid),  # 1-D
        lambda p: (p.vectors, p.image_mask[:-1], p.grid),  # mask length
        lambda p: (p.vectors, p.image_mask.astype(int), p.grid),  # mask dtype
        lambda p: (p.vectors, p.image_mask, (3, 2)),  # grid != image tokens
        lambda p: (p.vectors[:0], p.image_mask[:0], None),  # no rows
    ],
)
def test_encoded_page_rejects_malformed(change) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelOutputError):
        EncodedPage(*change(_page()))


def test_encoded_page_without_grid() -> None:
    page = _page(grid=None)
    with pytest.raises(ValueError, match="no patch grid"):
        page.patch_grid()


# -- the template methods, on numpy fakes -------------------------------------------------------


class FakeReranker(BaseReranker):
    """Score = len(text); records the batches it was given."""

    model_id, revision, batch_size = "fake", "r0", 2

    def __init__(self, drop: bool = False, nan: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.drop, self.nan = drop, nan

    def _score(self, query: str, texts: list[str]) -> list[float]:
        self.batches.append(texts)
        scores = [float("nan") if self.nan else float(len(t)) for t in texts]
        return scores[:-1] if self.drop else scores


def test_reranker_template_sorts_batches_and_restores_order() -> None:
    r = FakeReranker()
    texts = ["a", "dddd", "bb", "ccc", ""]
    assert r.score("q", texts) == [1.0, 4.0, 2.0, 3.0, 0.0]
    assert r.batches == [["dddd", "ccc"], ["bb", "a"], [""]]  # longest first, batches of 2
    assert r.score("q", []) == []
    assert isinstance(r, Reranker)


def test_reranker_template_refuses_wrong_count_and_nan() -> None:
    with pytest.raises(ModelOutputError, match="1 results for a batch of 2"):
        FakeReranker(drop=True).score("q", ["a", "b"])
    with pytest.raises(ModelOutputError, match="non-finite"):
        FakeReranker(nan=True).score("q", ["a"])


def test_templates_validate_input() -> None:
    r = FakeReranker()
    with pytest.raises(InvalidRequestError, match="single str"):
        r.score("q", "abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="item 1 is int"):
        r.score("q", ["a", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidRequestError, match="query is"):
        r.score(None, ["a"])  # type: ignore[arg-type]


class FakeTextMV(BaseTextMultiVectorEncoder):
    model_id, revision, dim, batch_size = "fake-mv", "r0", 3, 2

    def _encode(self, texts: list[str], kind: str) -> list[np.ndarray]:
        off = 0.0 if kind == "query" else 100.0
        return [np.full((len(t) + 1, 3), off + len(t), dtype=np.float32) for t in texts]


def test_text_multivector_template_restores_order() -> None:
    enc = FakeTextMV()
    docs = enc.encode_documents(["xx", "x", "xxxx"])
    assert [d.shape for d in docs] == [(3, 3), (2, 3), (5, 3)]
    assert [float(d[0, 0]) for d in docs] == [102.0, 101.0, 104.0]
    assert float(enc.encode_queries(["abc"])[0][0, 0]) == 3.0


class FakeDense(BaseDenseTextEncoder):
    model_id, revision, dim, batch_size = "fake-dense", "r0", 2, 2

    def _encode(self, texts: list[str], kind: str) -> np.ndarray:
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)  # (b, 2)


def test_dense_template_normalises_and_restores_order() -> None:
    out = FakeDense().encode(["aaa", "", "a"], kind="document")  # (3, 2)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[0], np.array([3, 1]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.0, 1.0])
    assert FakeDense().encode([]).shape == (0, 2)
    with pytest.raises(InvalidRequestError, match="kind"):
        FakeDense().encode(["a"], kind="passage")  # type: ignore[arg-type]


class FakePages(BasePageEncoder):
    """Page vectors encode the image width, so the order can be checked."""

    model_id, revision, dim, batch_size = "fake-pages", "r0", 2, 2

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int]]] = []

    def _encode_pages(self, images):  # type: ignore[no-untyped-def]
        self.batches.append([im.size for im in images])
        out = []
        for im in images:
            v = np.full((5, 2), float(im.width), dtype=np.float32)
            mask = np.array([False, True, True, True, True])
            out.append(EncodedPage(v, mask, (2, 2)))
        return out

    def _encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.ones((len(t) + 1, 2), dtype=np.float32) for t in texts]


def test_page_template_buckets_by_size_and_restores_order() -> None:
    pil = pytest.importorskip("PIL.Image")
    sizes = [(10, 20), (30, 30), (10, 20), (30, 30), (10, 20)]
    images = [pil.new("RGB", s) for s in sizes]
    enc = FakePages()
    pages = enc.encode_pages(images)
    assert [float(p.vectors[0, 0]) for p in pages] == [10.0, 30.0, 10.0, 30.0, 10.0]
    # Same-size images share batches, never two sizes in one batch.
    assert all(len(set(b)) == 1 for b in enc.batches)
    assert sorted(len(b) for b in enc.batches) == [1, 2, 2]
    assert isinstance(enc, PageEncoder)
    with pytest.raises(InvalidRequestError, match="PIL.Image"):
        enc.encode_pages([np.zeros((4, 4, 3))])  # type: ignore[list-item]
    assert enc.encode_pages([]) == []


def test_page_template_prefetch_gives_the_same_result() -> None:
    pil = pytest.importorskip("PIL.Image")
    images = [pil.new("RGB", (w, 10)) for w in (5, 9, 7, 5, 9, 8)]
    plain = FakePages().encode_pages(images)
    enc = FakePages()
    enc.prefetch = 3
    fetched = enc.encode_pages(images)
    for a, b in zip(plain, fetched, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)


# -- model identity ----------------------------------------------------------------------------


def _fake_model_folder(root: Path, weights: bytes = b"\x01" * 64) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"model_type": "qwen2_vl"}')
    (root / "model.safetensors").write_bytes(weights)
    return root


def test_fingerprint_is_stable_across_copies_and_sensitive_to_weights(tmp_path: Path) -> None:
    a = _fake_model_folder(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "notes.txt").write_text("not part of the model")
    assert folder_fingerprint(a) == folder_fingerprint(b)
    assert folder_fingerprint(a).startswith("sha256:")
    c = _fake_model_folder(tmp_path / "c", weights=b"\x02" * 64)
    assert folder_fingerprint(c) != folder_fingerprint(a)
    (b / "config.json").write_text('{"model_type": "paligemma"}')
    assert folder_fingerprint(b) != folder_fingerprint(a)


def test_fingerprint_reads_both_ends_of_large_weight_files(tmp_path: Path) -> None:
    big = bytearray(3 << 20)
    a = _fake_model_folder(tmp_path / "a", bytes(big))
    big[-1] = 7  # last byte differs
    b = _fake_model_folder(tmp_path / "b", bytes(big))
    assert folder_fingerprint(a) != folder_fingerprint(b)


def test_snapshot_path_gives_hub_id_and_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = tmp_path / "hub" / "models--vidore--colqwen2-v1.0" / "snapshots" / commit
    _fake_model_folder(snap)
    assert snapshot_identity(snap) == ("vidore/colqwen2-v1.0", commit)
    src = resolve_source(str(snap))
    assert (src.model_id, src.revision, src.repo_id) == ("vidore/colqwen2-v1.0", commit, None)


def test_local_folder_source(tmp_path: Path) -> None:
    folder = _fake_model_folder(tmp_path / "m")
    src = resolve_source(str(folder))
    assert src.model_id == str(folder.resolve())
    assert src.revision == folder_fingerprint(folder)
    assert src.read_json("config.json") == {"model_type": "qwen2_vl"}
    assert src.read_json("absent.json") is None
    assert resolve_source(str(folder), model_id="org/name").model_id == "org/name"


def test_missing_folder_and_empty_folder_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no model files"):
        resolve_source(str(tmp_path / "empty"))
    with pytest.raises(ModelLoadError, match="empty model name"):
        resolve_source("  ")


# -- registry errors ---------------------------------------------------------------------------


def test_reranker_none_and_unknown_kind() -> None:
    assert load_reranker("none") is None
    with pytest.raises(ModelLoadError, match="allowed: cross_encoder, colbert, none, auto"):
        load_reranker("bm25")


def test_missing_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def no_torch(name: str, *a, **kw):  # type: ignore[no-untyped-def]
        return None if name == "torch" else real(name, *a, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    for call in (
        lambda: load_page_encoder("vidore/colqwen2-v1.0"),
        lambda: load_dense_encoder(),
        lambda: load_reranker("cross_encoder"),
        lambda: load_reranker("colbert"),
    ):
        with pytest.raises(MissingExtraError, match=r"pip install 'ragspine\[gpu\]'"):
            call()
    assert load_reranker("auto") is None  # the CPU path: no reranker, no error
