"""A batch of points as two backup members: JSON (ids, payloads, where each vector is) and an
uncompressed npz of the batch's vectors, one array per field.

Vectors are kept exactly: each array is stored in the smallest form that gives back the same
float32 values, tried in order: int8 codes with a float32 scale per row (what an int8 page
column holds: quantizing its dequantized values again gives the same codes), float16 (a float16
field), else float32. A ColPali page of int8 codes is 1,030 x 128 bytes plus 4 KB of scales
instead of 527 KB of float32.
"""

from __future__ import annotations

import io
import uuid
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragspine.backup.archive import BackupFileError
from ragspine.scoring.bm25 import SparseVector
from ragspine.scoring.multivector import quantize_int8
from ragspine.store.base import PointData

#: A batch is cut after this many points or this many bytes of float32 vectors.
BATCH_POINTS = 512
BATCH_VECTOR_BYTES = 32 << 20


def vector_bytes(p: PointData) -> int:
    return sum(int(np.asarray(v).size) * 4 for v in p.dense.values())


def _compact(key: str, a: np.ndarray, out: dict[str, np.ndarray]) -> None:
    """Store ``a`` (2-D float32) under ``key`` in the smallest exact form (module docstring)."""
    if a.size and np.isfinite(a).all():
        q = quantize_int8(a)
        if np.array_equal(q.dequantize(), a):
            out[key + ".codes"], out[key + ".scale"] = q.codes, q.scale.reshape(-1)
            return
    half = a.astype(np.float16)
    if np.array_equal(half.astype(np.float32), a):
        out[key + ".f16"] = half
        return
    out[key + ".f32"] = a


def encode(points: Sequence[PointData]) -> tuple[list[dict[str, Any]], bytes]:
    """The JSON rows and the npz bytes of one batch."""
    rows: list[dict[str, Any]] = []
    sparse: dict[str, tuple[list[int], list[float]]] = {}
    single: dict[str, list[np.ndarray]] = {}
    multi: dict[str, list[np.ndarray]] = {}
    sizes: dict[str, int] = {}
    for p in points:
        row: dict[str, Any] = {"id": p.id, "payload": p.payload}
        for f, sv in sorted(p.sparse.items()):
            idx, val = sparse.setdefault(f, ([], []))
            row.setdefault("sparse", {})[f] = [len(idx), len(sv.indices)]
            idx.extend(sv.indices)
            val.extend(sv.values)
        for f, v in sorted(p.dense.items()):
            a = np.asarray(v, dtype=np.float32)
            if a.ndim == 1:
                row.setdefault("single", {})[f] = len(single.setdefault(f, []))
                single[f].append(a)
            else:
                at = sizes.get(f, 0)
                row.setdefault("multi", {})[f] = [at, int(a.shape[0])]
                multi.setdefault(f, []).append(a)
                sizes[f] = at + int(a.shape[0])
        rows.append(row)
    arrays: dict[str, np.ndarray] = {}
    for f, (idx, val) in sparse.items():
        arrays[f"sparse.{f}.indices"] = np.asarray(idx, dtype=np.uint32)
        arrays[f"sparse.{f}.values"] = np.asarray(val, dtype=np.float32)
    for f, vs in single.items():
        _compact(f"single.{f}", np.stack(vs), arrays)
    for f, vs in multi.items():
        _compact(f"multi.{f}", np.concatenate(vs), arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return rows, buf.getvalue()


def _arrays(name: str, data: bytes) -> dict[str, np.ndarray]:
    """The npz member's arrays: stored entries only (no inflating), numbers only (no pickles)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    raise BackupFileError(f"backup member {name} holds a compressed array ({info.filename})")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise BackupFileError(f"backup member {name} is not a valid array file: {exc}") from None


def _field_array(name: str, arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    if key + ".codes" in arrays:
        codes, scale = arrays[key + ".codes"], arrays.get(key + ".scale")
        if codes.dtype != np.int8 or codes.ndim != 2 or scale is None or scale.dtype != np.float32 \
                or scale.shape != (codes.shape[0],):
            raise BackupFileError(f"backup member {name}: array {key} is malformed")
        return codes.astype(np.float32) * scale[:, None]
    for suffix, dtype in ((".f16", np.float16), (".f32", np.float32)):
        a = arrays.get(key + suffix)
        if a is not None:
            if a.dtype != dtype or a.ndim != 2:
                raise BackupFileError(f"backup member {name}: array {key} is malformed")
            return a.astype(np.float32)
    raise BackupFileError(f"backup member {name} lacks the vectors of {key}")


def _span(name: str, v: Any, total: int) -> tuple[int, int]:
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x >= 0 for x in v)
            and v[0] + v[1] <= total):
        raise BackupFileError(f"backup member {name}: a vector span {v!r} is out of range")
    return v[0], v[0] + v[1]


def decode(name: str, rows: Any, data: bytes) -> list[PointData]:
    """The points of one batch (``rows`` from its JSON member, ``data`` its npz member)."""
    if not isinstance(rows, list):
        raise BackupFileError(f"backup member {name} does not hold a list of points")
    arrays = _arrays(name, data)
    fields: dict[str, np.ndarray] = {}
    out: list[PointData] = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("payload"), dict):
            raise BackupFileError(f"backup member {name}: a point has no payload")
        try:
            pid = str(uuid.UUID(str(row.get("id"))))
        except ValueError:
            raise BackupFileError(f"backup member {name}: point id {row.get('id')!r} is not a UUID") from None
        p = PointData(pid, row["payload"])
        for key in ("sparse", "single", "multi"):
            if not isinstance(row.get(key) or {}, dict):
                raise BackupFileError(f"backup member {name}: point {pid} has a malformed {key} map")
        for f, span in (row.get("sparse") or {}).items():
            idx, val = arrays.get(f"sparse.{f}.indices"), arrays.get(f"sparse.{f}.values")
            if idx is None or val is None or idx.dtype != np.uint32 or val.dtype != np.float32 \
                    or idx.shape != val.shape or idx.ndim != 1:
                raise BackupFileError(f"backup member {name} lacks the sparse vectors of {f}")
            a, b = _span(name, span, len(idx))
            p.sparse[f] = SparseVector(idx[a:b].tolist(), val[a:b].tolist())
        for kind in ("single", "multi"):
            for f, where in (row.get(kind) or {}).items():
                key = f"{kind}.{f}"
                if key not in fields:
                    fields[key] = _field_array(name, arrays, key)
                m = fields[key]
                if kind == "single":
                    if not isinstance(where, int) or not 0 <= where < len(m):
                        raise BackupFileError(f"backup member {name}: vector row {where!r} is out of range")
                    p.dense[f] = m[where]
                else:
                    a, b = _span(name, where, len(m))
                    p.dense[f] = m[a:b]
                if not np.isfinite(p.dense[f]).all():
                    raise BackupFileError(f"backup member {name}: point {pid} has non-finite values in {f}")
        out.append(p)
    return out
