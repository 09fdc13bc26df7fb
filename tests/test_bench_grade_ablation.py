"""bench/grade_ablation.py: each part it switches off is off inside its context, on again after,
on examples worked out by hand; a part it does not know is an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_kit import load_bench

from ragspine.chain import grade as grade_mod
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.retrieval.search import SearchHit
from ragspine.scoring.query_text import search_text

ga = load_bench("grade_ablation")


def _hit(text: str, **metadata: str) -> SearchHit:
    return SearchHit(library_id="lib", doc_id="d", title="", page=1, bbox=[0.0, 0.0, 1.0, 1.0], chunk_id="d/c0",
                     text=text, version=1, scores={"bm25": 1.0}, metadata=dict(metadata))


def _ok(query: str, hit: SearchHit, min_coverage: float = 0.5) -> bool:
    return grade_mod.grade(query, [hit], min_coverage=min_coverage, depth=3).ok


@pytest.fixture
def chain(data_dir: Path) -> Iterator[object]:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", dense_model="none"))
    try:
        eng.create_library("lib")
        eng.ingest_text("lib", "acme", "Acme Holdings revenue grew in Asia.")
        eng.ingest_text("lib", "beta", "Beta Holdings revenue fell in Europe.")  # three passages hold
        eng.ingest_text("lib", "gamma", "Gamma Holdings revenue rose in Africa.")  # the words: corrections
        yield eng.chain_for(eng.settings, record_gaps=False)
    finally:
        eng.close()


# (part, what holds with it on, evaluated again with it off: must flip)
CHECKS = {
    "frame words": lambda: _ok("How many black arrows are in the Acme logo?", _hit("Acme")),
    "two missing words at least": lambda: _ok("acme bike", _hit("acme"), 0.6),
    "document fields": lambda: _ok("Netflix advertising FY2015 expense", _hit("advertising expense", issuer="Netflix",
                                                                             period="FY2015")),
    "codes as specifics": lambda: grade_mod.specifics("What is EPS code AR03?", lambda w: True) == ["ar03"],
    "example numbers left out": lambda: grade_mod.specifics("How many charts (like 2024)?", lambda w: True) == [],
    "the '?Round' split and 'like [...]' examples": lambda: search_text(
        "What is the margin?Round your answer to two decimal places.") == "What is the margin?",
}


@pytest.mark.parametrize("part", ga.PARTS)
def test_each_part_is_off_inside_its_context_and_on_after(part: str, chain: object) -> None:
    searcher = chain.searcher  # type: ignore[attr-defined]
    if part in CHECKS:
        assert CHECKS[part]()
        with ga.part_off(part, chain):
            assert not CHECKS[part]()
        assert CHECKS[part]()
        return
    if part == "a page the document does not have":
        assert searcher.document_has_pages("lib", "acme", frozenset({50})) is False
        with ga.part_off(part, chain):
            assert searcher.document_has_pages("lib", "acme", frozenset({50})) is None
        assert searcher.document_has_pages("lib", "acme", frozenset({50})) is False
    elif part == "no agreement asked of a named page":
        assert searcher.named_pages("lib", "acme", frozenset({1})) == {1}
        with ga.part_off(part, chain):
            assert searcher.named_pages("lib", "acme", frozenset({1})) == frozenset()
    elif part in ("corrected spellings in coverage", "names read as words"):
        # Through the chain: "Holdngs" and "revenu" are one edit from words three passages hold.
        # Without corrections in coverage, "holdngs", "revenu" and "grow" are missing (2/5);
        # with "Holdngs" read as a name only, it is a specific no document mentions.
        def graded() -> dict[str, object]:
            res = chain.search(ga_request("How did Acme Holdngs revenu grow in Asia?"))  # type: ignore[attr-defined]
            return res.corrective["steps"][0]
        assert graded()["ok"]
        with ga.part_off(part, chain):
            off = graded()
        assert graded()["ok"]
        if part == "corrected spellings in coverage":
            assert (off["ok"], off["verdict"], off["coverage"]) == (False, "low_coverage", 0.4)
        else:
            assert (off["ok"], off["verdict"]) == (False, "unmentioned")
    else:
        pytest.fail(f"no check for part {part!r}")


def ga_request(query: str) -> object:
    from ragspine.evaluation import ChainFlags

    return ChainFlags(corrective=True).request(query, "lib", "bm25", 5)


def test_a_part_it_does_not_know_is_an_error(chain: object) -> None:
    with pytest.raises(ValueError, match="unknown part"):
        with ga.part_off("no such part", chain):
            pass
