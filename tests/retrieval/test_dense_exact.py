"""The dense channel scans a library exactly up to RAGSPINE_DENSE_EXACT_MAX_PASSAGES passages
and asks the HNSW graph above it: the bound, counted in the library's passages, shown on
both sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.models.modelset import ModelSet


class WordDense:
    """4-d vectors from the text's length and vowels (the channel must run, not rank well)."""

    model_id, revision, dim = "test/word-dense", "1", 4

    def encode(self, texts: list[str], kind: str = "document") -> list[np.ndarray]:
        return [np.array([1.0, len(t) % 7, sum(c in "aeiou" for c in t) % 5, 0.5], np.float32) for t in texts]


@pytest.mark.parametrize(("bound", "exact"), [(3, True), (2, False), (0, False)])
def test_the_bound_counts_the_librarys_passages(data_dir: Path, monkeypatch: pytest.MonkeyPatch, bound: int,
                                                exact: bool) -> None:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", dense_exact_max_passages=bound),
                 models=ModelSet(dense=WordDense()))
    try:
        eng.create_library("lib")
        for i, text in enumerate(["Revenue grew in Asia.", "Costs fell in Europe.", "Margins held in Africa."]):
            eng.ingest_text("lib", f"d{i}", text)
        assert eng.libraries.get("lib").stats["bm25_chunk"].count == 3
        seen: list[bool] = []
        real = eng.store.search_dense

        def spy(*a: Any, exact: bool = False, **kw: Any) -> Any:
            seen.append(exact)
            return real(*a, exact=exact, **kw)

        monkeypatch.setattr(eng.store, "search_dense", spy)
        hits = eng.search({"query": "revenue", "libraries": ["lib"], "mode": "hybrid"}).hits
        assert hits and seen == [exact]
        assert any(h.scores["dense"] is not None for h in hits)
    finally:
        eng.close()
