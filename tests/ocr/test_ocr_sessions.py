"""The PP-OCRv4 models on torch (ragspine.ocr.sessions): converted from the wheel's ONNX files,
they must score what onnxruntime scores; where OCR runs (ragspine.ocr.rapid.resolve_device and
resolve_backend); and the device-side reduction of the recogniser's scores."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ocr_kit import rasterised
from ragspine.ocr import OcrCache, OcrInputError, OcrUnavailableError, RapidOcrEngine, ocr_page
from ragspine.ocr import rapid
from ragspine.ocr.sessions import ReducedCtcDecode, ReducedScores, TorchSession, onnx_to_torch


def ort_run(path: Any, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize(("model", "shapes"), [
    # Detection: an A4 page at 120 dpi and a landscape slide, as RapidOCR sizes them (x32).
    (rapid._DET_MODEL, [(1, 3, 1408, 992), (1, 3, 736, 1312)]),
    # Recognition: batches of crops 48 px high, two widths (the recogniser's steps = width / 8).
    (rapid._REC_MODEL, [(6, 3, 48, 640), (2, 3, 48, 200)]),
])
def test_the_converted_models_score_what_onnxruntime_scores_at_any_input_size(
    model: str, shapes: list[tuple[int, ...]],
) -> None:
    path = rapid._models_dir() / model
    session = TorchSession(path, "cpu")
    rng = np.random.default_rng(7)
    for shape in shapes:
        x = rng.standard_normal(shape, dtype=np.float32)
        want = ort_run(path, x)
        got = session(x)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        # float32 on two runtimes: the measured gap is 2e-6 (detection) and 2e-5 (recognition).
        assert float(np.abs(got - want).max()) < 1e-4


def _unranked_batch_norm_model() -> onnx.ModelProto:
    """Y = BatchNormalization(Reshape(X, S)) with the norm's weights in Constant nodes (as the
    Paddle exporter writes them) and S a graph input, so the norm's input has no inferred rank."""
    c = 3
    weights = {"scale": [2.0, 0.5, 1.0], "bias": [0.0, 1.0, -1.0], "mean": [1.0, 2.0, 3.0], "var": [4.0, 1.0, 0.25]}
    consts = [helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [c], vals))
              for name, vals in weights.items()]
    nodes = [*consts,
             helper.make_node("Reshape", ["X", "S"], ["R"]),
             helper.make_node("BatchNormalization", ["R", *weights], ["Y"], epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "bn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"]),
                      helper.make_tensor_value_info("S", TensorProto.INT64, ["k"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def test_a_batch_norm_of_unknown_rank_converts_and_matches_onnxruntime(tmp_path: Any) -> None:
    from onnx2torch import convert

    path = tmp_path / "bn.onnx"
    onnx.save(_unranked_batch_norm_model(), str(path))
    x = np.arange(2 * 3 * 5, dtype=np.float32)
    shape = np.array([2, 3, 5], dtype=np.int64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, {"X": x, "S": shape})[0]
    # Worked out by hand for one value: x = 7 is (batch 0, channel 1, position 2):
    # (7 - 2) / sqrt(1 + 1e-5) * 0.5 + 1 = 3.49998...
    assert want.shape == (2, 3, 5) and abs(float(want[0, 1, 2]) - 3.5) < 1e-4
    module = onnx_to_torch(path)
    import torch

    got = module(torch.from_numpy(x), torch.from_numpy(shape)).numpy()
    assert float(np.abs(got - want).max()) < 1e-5
    # Without the rewrite, onnx2torch refuses the unranked norm: the rewrite is what converts it.
    plain = onnx.load(str(path))
    for node in [n for n in plain.graph.node if n.op_type == "Constant"]:
        plain.graph.initializer.append(onnx.numpy_helper.from_array(
            onnx.numpy_helper.to_array(node.attribute[0].t), node.output[0]))
        plain.graph.node.remove(node)
    with pytest.raises(NotImplementedError, match="spatial rank"):
        convert(onnx.shape_inference.infer_shapes(plain))


def test_reduced_scores_decode_to_what_the_full_scores_decode() -> None:
    from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode

    decode = CTCLabelDecode(character=list("abc"))  # classes: blank, a, b, c, space
    rng = np.random.default_rng(3)
    scores = rng.random((4, 12, 5)).astype(np.float32)  # (crops, steps, classes)
    scores[0, :, 1] += 2.0  # crop 0 reads "a" at every step: "a" once after de-duplication,
    want = decode(scores)  # scored by the first step of the run
    assert want[0] == ("a", pytest.approx(float(scores[0, 0, 1])))
    reduced = ReducedScores(scores.argmax(axis=2), scores.max(axis=2))
    assert ReducedCtcDecode(decode)(reduced) == want
    assert ReducedCtcDecode(decode)(scores) == want  # full scores pass through unchanged
    with pytest.raises(ValueError, match="word boxes need the full recogniser scores"):
        ReducedCtcDecode(decode)(reduced, True)


def test_a_cuda_session_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # CI's machine, on any machine
    with pytest.raises(RuntimeError, match=r"torch sees no CUDA device \(asked for cuda\)"):
        TorchSession(rapid._models_dir() / rapid._DET_MODEL, "cuda")


@pytest.mark.parametrize(("torch_ok", "ort_ok", "backend", "want"), [
    (True, False, "auto", "torch"),
    (False, True, "auto", "onnxruntime"),  # onnxruntime-gpu installed, torch without a GPU
    (True, True, "auto", "torch"),
    (True, True, "onnxruntime", "onnxruntime"),
    (False, True, "torch", None),
    (True, False, "onnxruntime", None),
])
def test_cuda_runs_on_torch_first_then_onnxruntime_gpu(
    monkeypatch: pytest.MonkeyPatch, torch_ok: bool, ort_ok: bool, backend: str, want: str | None,
) -> None:
    monkeypatch.setattr(rapid, "torch_cuda_status", lambda: None if torch_ok else "torch sees no CUDA device")
    monkeypatch.setattr(rapid, "_ort_cuda_status", lambda: None if ort_ok else "no CUDA provider")
    if want is None:
        with pytest.raises(OcrUnavailableError, match="RAGSPINE_OCR_DEVICE=cuda"):
            RapidOcrEngine(device="cuda", backend=backend)  # type: ignore[arg-type]
        return
    engine = RapidOcrEngine(device="cuda", backend=backend)  # type: ignore[arg-type]
    assert (engine.device, engine.backend) == ("cuda", want)
    # onnxruntime-gpu has no backend mark in the name, only the device (and the recogniser's floor).
    assert engine.name.endswith(":torch:cuda" if want == "torch" else f"side=4000:recw={rapid.REC_MIN_WIDTH}:cuda")


def test_torch_on_the_cpu_is_a_backend_of_its_own_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    engine = RapidOcrEngine(backend="torch")
    assert (engine.device, engine.backend) == ("cpu", "torch")
    assert engine.name.endswith(":torch")  # part of the OCR cache key
    with pytest.raises(OcrInputError, match="OCR backend must be one of"):
        rapid.resolve_backend("tpu", "cuda")
    with pytest.raises(OcrInputError, match="openvino runs on the CPU only"):
        rapid.resolve_backend("openvino", "cuda")
    # Without onnx2torch the engine is refused when built, naming the package, not at a page.
    monkeypatch.setitem(sys.modules, "onnx2torch", None)
    with pytest.raises(OcrUnavailableError, match=r"^OCR on torch \(RAGSPINE_OCR_BACKEND=torch\) needs the "
                                                   r"'onnx2torch' package, which is not installed: pip install onnx2torch$"):
        RapidOcrEngine(backend="torch")


def test_a_model_torch_cannot_run_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.ocr import OcrError
    from ragspine.ocr import sessions

    def refuse(model: Any) -> Any:
        raise NotImplementedError("Converter is not implemented (OperationDescription(...Foo...))")

    monkeypatch.setattr(sessions, "onnx_to_torch", refuse)
    engine = RapidOcrEngine(backend="torch")
    with pytest.raises(OcrError, match=r"^could not run the OCR models on torch \(cpu\): NotImplementedError: "
                                       r"Converter is not implemented"):
        engine.recognize(np.zeros((32, 32, 3), np.uint8))


@pytest.mark.slow
def test_real_ocr_on_torch_reads_what_onnxruntime_reads() -> None:
    from test_ocr_rapid import assert_box_near, report_page

    scan = rasterised(report_page(), dpi=200)[0]
    kw: dict[str, Any] = {"mode": "auto", "dpi": 150, "min_text_chars": 20, "min_image_fraction": 0.1}
    on_torch = ocr_page(scan, RapidOcrEngine(backend="torch", threads=1), cache=OcrCache(), **kw)
    on_ort = ocr_page(scan, RapidOcrEngine(backend="onnxruntime", threads=1), cache=OcrCache(), **kw)
    assert len(on_ort.lines) >= 4  # the page's stamp, sentence, Chinese line and heading
    assert [ln.text for ln in on_torch.lines] == [ln.text for ln in on_ort.lines]
    for a, b in zip(on_torch.lines, on_ort.lines):
        assert_box_near(a.box, b.box, 0.5)


@pytest.mark.parametrize(("data", "why"), [
    (b"", "NotImplementedError: Onnx IR is too old"),  # an empty file parses as an empty model
    (b"\x00not a model" * 64, "DecodeError: Error parsing message"),
])
def test_a_corrupt_model_file_is_an_ocr_error_naming_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, data: bytes, why: str,
) -> None:
    from ragspine.ocr import OcrError

    for name in (rapid._DET_MODEL, rapid._REC_MODEL):
        (tmp_path / name).write_bytes(data)
    monkeypatch.setattr(rapid, "_models_dir", lambda: tmp_path)
    with pytest.raises(OcrError, match=rf"^could not run the OCR models on torch \(cpu\): {why}"):
        RapidOcrEngine(backend="torch").recognize(np.zeros((32, 32, 3), np.uint8))
