"""Shared pieces of the backup tests (``import backup_kit``): numpy page and dense encoders
(deterministic, no weights, every vector field of a real library), and a source library with a
bit of everything a backup must carry."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.config import Settings
from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.demo.corpus import demo_relations_csv
from ragspine.engine import Engine
from ragspine.models.base import EncodedPage
from ragspine.models.modelset import ModelSet

#: The document of the source library whose OCR is still owed (every page a scan).
SCANNED = "scanned-memo"
PAGE_DIM = 16
DENSE_DIM = 24
_PROJ = np.random.default_rng(11).standard_normal((3, PAGE_DIM)).astype(np.float32)


def _hashed(token: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


class NumpyPages:
    """A page model: the page as a 6 x 4 grid of patch colours, projected to 16 dimensions."""

    model_id, revision, dim = "test/numpy-pages", "1", PAGE_DIM

    def encode_pages(self, images: list[Any]) -> list[EncodedPage]:
        out = []
        for im in images:
            a = np.asarray(im.convert("RGB").resize((4, 6)), dtype=np.float32) / 255.0  # (6, 4, 3)
            v = a.reshape(-1, 3) @ _PROJ + 0.01
            out.append(EncodedPage(v.astype(np.float32), np.ones(len(v), dtype=bool), (6, 4)))
        return out

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        return [np.stack([_hashed(w, PAGE_DIM) for w in re.findall(r"\w+", t.lower())[:8] or ["empty"]])
                for t in texts]


class NumpyDense:
    """A dense model: the normalised sum of hashed word vectors."""

    model_id, revision, dim = "test/numpy-dense", "1", DENSE_DIM

    def encode(self, texts: list[str], kind: str = "passage") -> np.ndarray:
        out = []
        for t in texts:
            v = sum((_hashed(w, DENSE_DIM) for w in re.findall(r"\w+", t.lower())), np.zeros(DENSE_DIM, np.float32))
            n = float(np.linalg.norm(v)) or 1.0
            out.append((v / n).astype(np.float32))
        return np.stack(out) if out else np.zeros((0, DENSE_DIM), np.float32)


def models(page: bool = True, dense: bool = True) -> ModelSet:
    return ModelSet(page=NumpyPages() if page else None, dense=NumpyDense() if dense else None)


def settings(data_dir: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {"data_dir": data_dir, "page_render_dpi": 36, "reranker": "none", "dense_model": "none"}
    return Settings(**{**base, **kw})


GLOSSARY = b"term,synonyms\nrevenue,turnover\n"


def build_source(engine: Engine, docs: list[DemoDocument]) -> None:
    """The demo library with relations, a glossary and a knowledge gap."""
    engine.create_library(DEMO_LIBRARY)
    for d in docs:
        engine.ingest(DEMO_LIBRARY, d.path, d.metadata)
    engine.graph.upload_relations(DEMO_LIBRARY, demo_relations_csv().encode(), "demo-relations.csv")
    engine.glossaries.upload(DEMO_LIBRARY, GLOSSARY, "glossary.csv")
    engine.gaps.record(DEMO_LIBRARY, "zebra crossings in antarctica", [], "no passage covers the query")
