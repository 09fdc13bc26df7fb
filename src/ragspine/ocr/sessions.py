"""Inference sessions that stand in for RapidOCR's ``OrtInferSession``: the same PP-OCRv4 ONNX
files, run by another runtime. RapidOCR keeps its pre- and post-processing; only the call
``session(batch)[0]`` (the first output) changes hands.

* :class:`OpenVinoSession`: OpenVINO on the CPU (2-3x onnxruntime's speed there;
  see ragspine.ocr.rapid).
* :class:`TorchSession`: the ONNX graph converted to a ``torch.fx`` module by ``onnx2torch``
  and run by torch, on the CPU or a CUDA device. It is how OCR runs on a GPU where onnxruntime
  has no CUDA provider: the ``onnxruntime-gpu`` wheel is several hundred MB and must replace
  the CPU wheel, while torch with CUDA is already there for the page models.

Why ONNX -> torch is converted at load time instead of shipping torch weights: the ONNX files
inside ``rapidocr-onnxruntime``'s wheel are the one copy of the models ragspine has (no
download at run time), so what runs on the GPU is provably the model the CPU runs. The
conversion takes ~0.2 s per model.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

#: OpenVINO inputs are padded to a multiple of these many pixels (see OpenVinoSession):
#: detection images on both sides, recognition batches in width.
DET_SIDE_STEP = 256
REC_WIDTH_STEP = 64
#: PP-OCRv4's recogniser input height in pixels: inputs this low are recognition batches.
REC_HEIGHT = 48
#: Entries of OpenVINO's CPU cache of primitives prepared per input shape (its property
#: CPU_RUNTIME_CACHE_CAPACITY, default 5000; None keeps the default). Every page brings new
#: shapes, so the cache only grows. One worker over 420 MMLongBench pages: 2.08 GB at its peak
#: with the default, 1.55 GB with none (1.40 GB with the heap trimmed after each page as well,
#: ragspine.indexing.ocr_pool), in the same time (32 entries: the same as none).
OV_SHAPE_CACHE: int | None = 0


class OpenVinoSession:
    """Stands in for RapidOCR's ``OrtInferSession`` (``session(x)[0]`` is the first output):
    the same ONNX file compiled by OpenVINO for the CPU. ``threads`` None: OpenVINO's own
    choice (every core)."""

    def __init__(self, model: Path, threads: int | None) -> None:
        import openvino as ov

        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = int(threads)
            # OpenVINO pins its threads to cores by default: one-thread engines in several
            # worker processes all landed on the same core (2 workers read 1.2x the pages of one
            # instead of ~1.9x). The OS places them better.
            config["ENABLE_CPU_PINNING"] = False
        if OV_SHAPE_CACHE is not None:
            config["CPU_RUNTIME_CACHE_CAPACITY"] = str(OV_SHAPE_CACHE)
        try:
            self._model = ov.Core().compile_model(str(model), "CPU", config)
        except RuntimeError:  # an OpenVINO without that (unlisted) property: its default cache
            config.pop("CPU_RUNTIME_CACHE_CAPACITY", None)
            self._model = ov.Core().compile_model(str(model), "CPU", config)

    def __call__(self, batch: np.ndarray) -> list[np.ndarray]:
        # Inputs padded up to a step of pixels with zeros (what the models' own convolution
        # padding sees past an edge). OpenVINO compiles and keeps memory per input shape, and
        # every region and crop batch has its own. bench/ocr.py, 162 MMLongBench pages, two
        # workers: unpadded 2.49 pages/s and 4.65 GB over the process tree; detection padded to
        # 256 and recognition to 64 px, 2.87 pages/s and 3.17 GB, nDCG@10 0.4422 against 0.4420.
        # Recognition padded to 256 px as well saved more (2.78 GB) but read less (0.4417): its
        # sequence mixing sees the padding, so its step stays small.
        n, c, h, w = batch.shape  # (n, 3, h, w): detection one image, recognition 48 px high crops
        rec = h <= REC_HEIGHT
        step = REC_WIDTH_STEP if rec else DET_SIDE_STEP
        hh = h if rec else -(-h // step) * step
        ww = -(-w // step) * step
        if (hh, ww) != (h, w):
            padded = np.zeros((n, c, hh, ww), dtype=batch.dtype)
            padded[:, :, :h, :w] = batch
            batch = padded
        out = self._model(batch)[0]  # first output, like onnxruntime's run(None, ...)[0]
        if out.ndim == 4:  # detection: (n, 1, hh, ww) probability map, cropped back to (h, w)
            out = out[:, :, :h, :w]
        # Recognition: (n, ww / 8, classes); the padded columns read as CTC blanks, as the
        # padding RapidOCR itself adds to the narrower crops of a batch does.
        return [np.ascontiguousarray(out)]


class TorchSession:
    """Stands in for RapidOCR's ``OrtInferSession``: the ONNX file converted to torch
    (:func:`onnx_to_torch`) on ``device`` ("cpu", "cuda", "cuda:1"). Inputs are float32 numpy
    arrays, as with onnxruntime; no padding (torch keeps no state per shape that grows).
    cuDNN's settings are the process's (torch's defaults: no autotuner, which would tune
    again for every page's shapes; TF32 convolutions, which read ~10 % of lines differently
    from the CPU and are 3-4x faster than float32 on an H200: docs/measured.md).

    ``reduce_classes``: the output (the recogniser's (n, steps, classes) scores) is reduced on
    the device to the best class and its probability per step, returned as a
    :class:`ReducedScores` for :class:`ReducedCtcDecode`. ``threads`` sets torch's intra-op
    threads on the CPU (process-wide: meant for a one-engine worker process)."""

    def __init__(self, model: Path, device: str, threads: int | None = None, *,
                 reduce_classes: bool = False) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"torch sees no CUDA device (asked for {device})")
        if threads is not None and self.device.type == "cpu":
            torch.set_num_threads(int(threads))
        self.reduce_classes = reduce_classes
        self._module = onnx_to_torch(model).to(self.device).eval()

    def __call__(self, batch: np.ndarray) -> list[Any]:
        torch = self._torch
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).to(self.device)
        with torch.inference_mode():
            out = self._module(x)
            out = out[0] if isinstance(out, (list, tuple)) else out
            if self.reduce_classes:  # (n, steps, classes) -> best class and its score per step
                prob, idx = out.max(dim=2)
                return [ReducedScores(idx.cpu().numpy(), prob.float().cpu().numpy())]
            return [out.float().cpu().numpy()]


class ReducedScores:
    """The recogniser's scores reduced to what CTC decoding reads: per crop and step, the best
    class (``idx``, (n, steps) int) and its probability (``prob``, (n, steps) float32)."""

    def __init__(self, idx: np.ndarray, prob: np.ndarray) -> None:
        self.idx = idx
        self.prob = prob


class ReducedCtcDecode:
    """Wraps RapidOCR's ``CTCLabelDecode``: :class:`ReducedScores` go straight to its
    ``decode`` (which is what its ``__call__`` does after its own argmax and max); anything
    else goes through it unchanged."""

    def __init__(self, decode_op: Any) -> None:
        self._op = decode_op

    def __call__(self, preds: Any, return_word_box: bool = False, **kwargs: Any) -> Any:
        if not isinstance(preds, ReducedScores):
            return self._op(preds, return_word_box, **kwargs)
        if return_word_box:  # ragspine never asks for word boxes (ragspine.ocr.rapid)
            raise ValueError("word boxes need the full recogniser scores")
        return self._op.decode(preds.idx, preds.prob, return_word_box, is_remove_duplicate=True)


def torch_import_status() -> str | None:
    """None when the torch backend's packages import, else the one to install (``torch`` or
    ``onnx2torch``, which brings ``onnx``)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch"
    try:
        import onnx2torch  # noqa: F401
    except ImportError:
        return "onnx2torch"
    return None


def torch_cuda_status() -> str | None:
    """None when OCR can run on torch with CUDA here, else why not (one line)."""
    missing = torch_import_status()
    if missing is not None:
        return f"{missing} is not installed"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


_DOMAIN = "ragspine"  # our own ONNX operator domain (no dots: it becomes part of torch module names)
_ANY_RANK_BN = "BatchNormalizationAnyRank"
_REGISTER_LOCK = threading.Lock()
_REGISTERED = False


def onnx_to_torch(model: Path) -> Any:
    """The ONNX model at ``model`` as a ``torch.fx.GraphModule`` in float32 on the CPU.

    Two rewrites of the graph first, both exact, so that onnx2torch 1.5 can convert
    Paddle's export of PP-OCRv4:
    * ``Constant`` nodes become initializers: the Paddle exporter stores every weight as a
      Constant node, and onnx2torch's Conv and MatMul converters read weights from initializers.
    * A ``BatchNormalization`` whose input has no inferred rank becomes an operator of
      ragspine's own domain (registered with onnx2torch's public ``add_converter``):
      onnx2torch picks ``BatchNorm1d/2d/3d`` from that rank, and the recogniser's reshapes
      leave it unknown for some. Ours broadcasts over whatever rank arrives.
    """
    import onnx
    from onnx import numpy_helper
    from onnx2torch import convert

    _register_batch_norm()
    graph = onnx.load(str(model))
    nodes = []
    for node in graph.graph.node:
        if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
            array = numpy_helper.to_array(node.attribute[0].t)
            graph.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
        else:
            nodes.append(node)
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    initializers = {i.name for i in graph.graph.initializer}
    inputs = [i for i in graph.graph.input if i.name not in initializers]
    del graph.graph.input[:]
    graph.graph.input.extend(inputs)
    graph = onnx.shape_inference.infer_shapes(graph)
    ranked = {v.name for v in [*graph.graph.value_info, *graph.graph.input]
              if v.type.tensor_type.HasField("shape")}
    unranked = [n for n in graph.graph.node
                if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx") and n.input[0] not in ranked]
    for node in unranked:
        node.op_type, node.domain = _ANY_RANK_BN, _DOMAIN
    if unranked:
        graph.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    return convert(graph)


def _register_batch_norm() -> None:
    """Registers the converter of :data:`_ANY_RANK_BN` with onnx2torch, once per process."""
    global _REGISTERED
    with _REGISTER_LOCK:
        if _REGISTERED:
            return
        import torch
        from onnx2torch.node_converters.registry import add_converter
        from onnx2torch.utils.common import OnnxMapping, OperationConverterResult

        class AnyRankBatchNorm(torch.nn.Module):
            """Inference-time batch norm over dimension 1 of an input of any rank."""

            def __init__(self, scale: Any, bias: Any, mean: Any, var: Any, eps: float) -> None:
                super().__init__()
                k = scale / torch.sqrt(var + eps)
                self.register_buffer("k", k)
                self.register_buffer("b", bias - mean * k)

            def forward(self, x: Any) -> Any:
                shape = [1, -1] + [1] * (x.dim() - 2)
                return x * self.k.view(shape) + self.b.view(shape)

        @add_converter(operation_type=_ANY_RANK_BN, version=1, domain=_DOMAIN)
        def _convert(node: Any, graph: Any) -> Any:
            weights = [graph.initializers[name].to_torch().float() for name in node.input_values[1:5]]
            module = AnyRankBatchNorm(*weights, float(node.attributes.get("epsilon", 1e-5)))
            return OperationConverterResult(
                torch_module=module,
                onnx_mapping=OnnxMapping(inputs=(node.input_values[0],), outputs=node.output_values))

        _REGISTERED = True
