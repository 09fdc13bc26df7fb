"""Page-model queries at static shapes (models/static_queries.py) and from CUDA graphs
(models/query_graphs.py).

On the CPU the graphs cannot be captured; what can be checked is everything they replay: the
packing, each family's static forward (the same vectors as transformers' plain forward, with
nothing read back to the host and no host tensor made, which a capture forbids), the shapes, the
fallback to the plain forward, and the check that keeps a path only if its vectors match. The
tests marked ``gpu`` capture the graphs on CUDA and compare them with the plain forward.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models_kit import PAGE_FAMILIES, QUERIES, needs_cuda, needs_gpu_extra

pytestmark = needs_gpu_extra

#: Ops that read a device tensor's data on the host (a sync; an error inside a CUDA graph capture).
HOST_READS = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "equal", "item"}


def _dispatch_recorder() -> Any:
    """A TorchDispatchMode that records host reads, and ops mixing a host tensor with a meta one
    (on CUDA: a host-to-device copy of a tensor made during the forward)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.host_reads: collections.Counter[str] = collections.Counter()
            self.host_tensors: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.__name__.split(".")[0]
            if name in HOST_READS:
                self.host_reads[name] += 1
            devices = {t.device.type for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dim() > 0}
            if {"cpu", "meta"} <= devices:
                self.host_tensors[name] += 1
            return func(*args, **(kwargs or {}))

    return Recorder()


@pytest.fixture()
def fresh_encoder(tiny_model_dir: Callable[[str], Path]) -> Iterator[Callable[[str], Any]]:
    """``fresh_encoder(family)``: a tiny page encoder of its own (CPU, float32), so that setting up
    its query path leaves the session's shared encoders as they are."""
    from ragspine.models import load_page_encoder

    def get(family: str) -> Any:
        enc = load_page_encoder(str(tiny_model_dir(family)), device="cpu")
        enc.query_batch_size = 32
        return enc

    yield get


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [y.shape for y in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


# -- packing and shapes ---------------------------------------------------------------------------


def test_pack_moves_each_query_to_the_left_and_repeats_the_first_in_spare_rows() -> None:
    import torch

    from ragspine.models.static_queries import pack

    # A left-padded batch (Qwen's processor) of queries of 2 and 4 tokens; pad id 0.
    ids = torch.tensor([[0, 0, 7, 8], [3, 4, 5, 6]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    p_ids, p_mask, counts = pack(ids, mask, batch=4, length=6, pad_id=9)
    assert counts == [2, 4]
    assert p_ids.tolist() == [[7, 8, 9, 9, 9, 9], [3, 4, 5, 6, 9, 9], [7, 8, 9, 9, 9, 9], [7, 8, 9, 9, 9, 9]]
    assert p_mask.tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]]
    # Right-padded (ColPali's processor): the same rows.
    r_ids = torch.tensor([[7, 8, 0, 0], [3, 4, 5, 6]])
    r_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    assert pack(r_ids, r_mask, 4, 6, 9)[0].tolist() == p_ids.tolist()


def test_pack_refuses_what_does_not_fit() -> None:
    import torch

    from ragspine.models.static_queries import pack

    ids, mask = torch.ones((3, 5), dtype=torch.long), torch.ones((3, 5), dtype=torch.long)
    with pytest.raises(ValueError, match="cannot pack 3 queries"):
        pack(ids, mask, batch=2, length=8, pad_id=0)
    with pytest.raises(ValueError, match=r"\[5, 5, 5\] tokens into \(4, 4\)"):
        pack(ids, mask, batch=4, length=4, pad_id=0)


def test_shapes_round_up_and_stop_at_the_largest() -> None:
    import torch

    from ragspine.models.query_graphs import QueryGraphs
    from ragspine.models.static_queries import round_up

    assert round_up(1, (1, 2, 4)) == 1 and round_up(3, (1, 2, 4)) == 4 and round_up(5, (1, 2, 4)) is None
    g = QueryGraphs(lambda i, m: i, device=torch.device("cpu"), pad_id=0, capture=False,
                    batches=(1, 2, 4, 8, 16), lengths=(32, 64, 128, 256))
    assert g.shape(1, 20) == (1, 32)
    assert g.shape(3, 33) == (4, 64)
    assert g.shape(16, 256) == (16, 256)
    assert g.shape(17, 20) is None and g.shape(2, 257) is None


def test_graphs_need_a_cuda_device() -> None:
    import torch

    from ragspine.models.query_graphs import QueryGraphs

    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device, not cpu"):
        QueryGraphs(lambda i, m: i, device=torch.device("cpu"), pad_id=0, capture=True)


# -- each family's static forward -------------------------------------------------------------------


@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_static_shapes_give_the_plain_forwards_vectors(family: str, fresh_encoder: Any) -> None:
    enc = fresh_encoder(family)
    plain_batch = enc.encode_queries(QUERIES)
    plain_one = [enc.encode_queries([q])[0] for q in QUERIES]
    assert enc.ready_query_graphs(capture=False)
    assert enc.query_path.startswith("static shapes, eager: 20 shapes")
    # Five queries go as one batch padded to 8 rows; one query alone as a batch of 1.
    assert _max_diff(enc.encode_queries(QUERIES), plain_batch) < 1e-5
    assert _max_diff([enc.encode_queries([q])[0] for q in QUERIES], plain_one) < 1e-5


@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_a_batch_past_every_shape_takes_the_plain_forward(family: str, fresh_encoder: Any) -> None:
    enc = fresh_encoder(family)
    many = [f"{q} {i}" for i in range(5) for q in QUERIES[:4]]  # 20 queries > 16 rows
    long = [" ".join(["revenue"] * 300)]  # > 256 tokens
    plain_many, plain_long = enc.encode_queries(many), enc.encode_queries(long)
    assert enc.ready_query_graphs(capture=False)
    graphs = enc._graphs
    seen = []
    orig = graphs.shape_of
    graphs.shape_of = lambda mask: seen.append(orig(mask)) or seen[-1]
    assert _max_diff(enc.encode_queries(many), plain_many) < 1e-5
    assert _max_diff(enc.encode_queries(long), plain_long) < 1e-5
    assert seen == [None, None]  # neither fitted a shape; both came from the plain forward
    assert plain_long[0].shape[0] > 256


@pytest.mark.parametrize("size", ["tiny", "full"])
@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_static_forward_reads_nothing_back_and_makes_no_host_tensor(family: str, size: str) -> None:
    """What a CUDA graph capture forbids, checked on the meta device: a host read of device data
    fails there or shows in the recorder, and a tensor made on the host meets meta ones. The full
    architectures too (their real configs: Qwen's mrope sections, Gemma's and SmolLM's layers):
    on the meta device they cost no memory."""
    import torch

    from ragspine.models import testing
    from ragspine.models.static_queries import static_forward

    model, _ = testing.random_page_model(family, size, device="meta", dtype=torch.bfloat16)
    forward = static_forward(family, model)
    ids = torch.zeros((4, 32), dtype=torch.long, device="meta")
    mask = torch.ones((4, 32), dtype=torch.long, device="meta")
    rec = _dispatch_recorder()
    with torch.inference_mode(), rec:
        out = forward(ids, mask)
    assert out.shape == (4, 32, model.dim)
    assert not rec.host_reads and not rec.host_tensors, (rec.host_reads, rec.host_tensors)


def test_the_recorder_sees_a_host_read_and_a_host_tensor() -> None:
    """The guard of the test above fires: a forward that asks the device a question, and one that
    brings in a tensor made on the host."""
    import torch

    x = torch.ones((2, 3), device="meta")
    rec = _dispatch_recorder()
    with rec:
        try:
            bool((x > 0).all())  # the question transformers' mask code asks
        except Exception:  # noqa: BLE001  (meta cannot answer; the recorder saw it asked)
            pass
        with pytest.raises(RuntimeError, match="is not on the expected device meta"):
            _ = x + torch.ones((2, 3))  # a host tensor into a device forward
    assert rec.host_reads == {"_local_scalar_dense": 1}
    assert rec.host_tensors["add"] == 1


def test_transformers_plain_forward_is_what_the_static_one_avoids() -> None:
    """Why the static forwards exist: ColQwen2's plain forward over a padded batch asks the host
    whether its mask is all ones (while the static one, above, asks nothing)."""
    import torch

    from ragspine.models import testing

    model, proc = testing.random_page_model("colqwen2")
    batch = proc.process_queries(texts=QUERIES[:2])
    rec = _dispatch_recorder()
    with torch.inference_mode(), rec:
        model(**dict(batch))
    assert rec.host_reads


# -- the check that keeps a path only when it matches --------------------------------------------------


def test_lowest_cosine() -> None:
    from ragspine.models.query_graphs import lowest_cosine

    a = [np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)]
    b = [np.array([[1.0, 1.0], [0.0, 5.0]], dtype=np.float32)]
    assert lowest_cosine(a, b) == pytest.approx(1 / np.sqrt(2))  # (1,0)·(1,1) / √2; the other row 1
    assert lowest_cosine(a, [b[0][:1]]) == -1.0  # a query with another token count


def test_vectors_that_differ_leave_the_plain_forward(fresh_encoder: Any) -> None:
    """A static forward that shifts its tokens by one position (what a wrong padding side or
    position would do) is refused, and queries keep the plain forward's vectors."""
    import torch

    from ragspine.models.query_graphs import QueryGraphs, checked
    from ragspine.models.static_queries import static_forward

    enc = fresh_encoder("colqwen2")
    plain = enc.encode_queries(QUERIES)
    real = static_forward("colqwen2", enc.model)
    shifted = QueryGraphs(lambda ids, mask: real(torch.roll(ids, 1, dims=1), mask),
                          device=enc.device, pad_id=0, capture=False)
    graphs, why = checked(shifted, enc._prepare_queries, lambda t: enc._plain_queries(enc._prepare_queries(t)))
    assert graphs is None
    assert why.startswith("vectors differ from the plain forward's (lowest token cosine ")
    assert float(why.rsplit(" ", 1)[1].rstrip(")")) < 0.999
    assert _max_diff(enc.encode_queries(QUERIES), plain) == 0.0


def test_a_capture_that_fails_leaves_the_plain_forward(fresh_encoder: Any, monkeypatch: Any) -> None:
    from ragspine.models import colpali

    enc = fresh_encoder("colpali")
    plain = enc.encode_queries(QUERIES)

    def refuse(family: str, model: Any) -> Any:
        def forward(ids: Any, mask: Any) -> Any:
            raise RuntimeError("operation not permitted when stream is capturing")

        return forward

    monkeypatch.setattr(colpali, "static_forward", refuse)
    assert not enc.ready_query_graphs(capture=False)
    assert enc.query_path == (
        "plain (could not capture: RuntimeError: operation not permitted when stream is capturing)"
    )
    assert _max_diff(enc.encode_queries(QUERIES), plain) == 0.0


def test_auto_on_a_cpu_says_why_it_stays_plain(tiny_model_dir: Any) -> None:
    from ragspine.models import load_page_encoder
    from ragspine.models.errors import ModelLoadError

    enc = load_page_encoder(str(tiny_model_dir("colpali")), device="cpu")
    assert enc.query_path == "plain (CUDA graphs need a CUDA device; this model is on cpu)"
    assert load_page_encoder(str(tiny_model_dir("colpali")), device="cpu", query_graphs="off").query_path == "plain"
    with pytest.raises(ModelLoadError, match="unknown query_graphs 'cuda'; allowed: auto, off"):
        load_page_encoder(str(tiny_model_dir("colpali")), device="cpu", query_graphs="cuda")


def test_concurrent_queries_each_get_their_own_vectors(fresh_encoder: Any) -> None:
    """The shapes' buffers are shared: replays are serialised, and each caller reads its own
    output before the next one writes."""
    enc = fresh_encoder("colqwen2")
    texts = [f"{q} {i}" for i in range(6) for q in QUERIES[:4]]
    expected = {t: enc.encode_queries([t])[0] for t in texts}
    assert enc.ready_query_graphs(capture=False)
    got: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def run(chunk: list[str]) -> None:
        try:
            for t in chunk:
                got[t] = enc.encode_queries([t])[0]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(texts[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert max(float(np.abs(got[t] - expected[t]).max()) for t in texts) < 1e-5


# -- on a GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("family", PAGE_FAMILIES)
def test_cuda_graphs_give_the_plain_forwards_vectors(family: str, tiny_model_dir: Any) -> None:
    from ragspine.models import load_page_encoder
    from ragspine.models.query_graphs import lowest_cosine

    enc = load_page_encoder(str(tiny_model_dir(family)), device="cuda")  # bf16, graphs by default
    assert enc.query_path.startswith("CUDA graphs: 20 shapes"), enc.query_path
    assert enc._graphs is not None and enc._graphs.captured == 20
    fast = [enc.encode_queries([q])[0] for q in QUERIES] + enc.encode_queries(QUERIES)
    graphs, enc._graphs = enc._graphs, None
    plain = [enc.encode_queries([q])[0] for q in QUERIES] + enc.encode_queries(QUERIES)
    enc._graphs = graphs
    assert lowest_cosine(fast, plain) >= 0.999


def test_every_shape_is_checked_and_one_no_probe_reaches_is_dropped(fresh_encoder: Any) -> None:
    """The check lands a probe batch on every shape; with probes too short to grow past the first
    length, the longer shapes are never compared, so they are dropped and their batches take the
    plain forward."""
    from ragspine.models.query_graphs import QueryGraphs, checked, probe_batches
    from ragspine.models.static_queries import static_forward

    enc = fresh_encoder("colqwen2")
    count = lambda t: int(enc._prepare_queries([t])["attention_mask"].sum())  # noqa: E731
    full = QueryGraphs(static_forward("colqwen2", enc.model), device=enc.device, pad_id=0, capture=False)
    shapes = probe_batches(count, full)
    assert set(shapes) == {(b, n) for b in (1, 2, 4, 8, 16) for n in (32, 64, 128, 256)}
    for (b, n), texts in shapes.items():
        assert len(texts) == b and full.shape(b, max(count(t) for t in texts)) == (b, n)

    short = QueryGraphs(static_forward("colqwen2", enc.model), device=enc.device,
                        pad_id=int(enc.processor.tokenizer.pad_token_id), capture=False)
    plain = lambda t: enc._plain_queries(enc._prepare_queries(t))  # noqa: E731
    graphs, why = checked(short, enc._prepare_queries, plain, probes=("revenue",))
    assert graphs is short
    # "revenue" eight times reaches the lengths 32 and 64 of the tiny tokenizer, not 128 or 256.
    assert why.startswith("static shapes, eager: 10 shapes, 10 unreached by any probe dropped, ")
    long_query = ["revenue grew by twelve percent in the third quarter while operating costs fell " * 4]
    assert count(long_query[0]) > 64
    batch = enc._prepare_queries(long_query)
    assert short.shape_of(batch["attention_mask"]) is None  # the plain forward's
    with pytest.raises(ValueError, match="no kept shape holds a batch of 1 queries of up to"):
        short.encode(batch["input_ids"], batch["attention_mask"])
    one = enc._prepare_queries(["revenue"])
    assert short.shape_of(one["attention_mask"]) == (1, 32)
    assert len(short.encode(one["input_ids"], one["attention_mask"])) == 1


def test_a_family_without_a_static_forward_is_named() -> None:
    from ragspine.models.static_queries import static_forward

    with pytest.raises(ValueError, match=r"no static query forward for family 'colbert'; known \['colidefics3', "):
        static_forward("colbert", object())
