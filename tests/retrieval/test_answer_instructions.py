"""A question's instructions about its answer's form are left out of what the channels search.

The library holds a style guide whose words are exactly the instruction's ("write the answer in
int format", "list format") and a report page that answers the question. With the instruction
searched, the style guide is a hit (it shares four rare words with the query); left out, the
guide shares no word with the question and is no hit, and the answer says what was left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.retrieval.search import NOTE_CHARS, SearchRequest

LIB = "reports"
REPORT = "Northwind's revenue in 2023 was 512 million dollars, up from 470 million in 2022."
GUIDE = ("House style: write every figure as int format or float format; a series goes as list format; "
         "yes or no questions get a direct reply.")
QUESTION = "What was Northwind's revenue in 2023? Please write the answer in int format."


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(Settings(data_dir=tmp_path / "data", dense_model="none"))
    try:
        eng.create_library(LIB)
        eng.ingest_text(LIB, "report", REPORT, title="Annual report 2023")
        eng.ingest_text(LIB, "guide", GUIDE, title="House style")
        yield eng
    finally:
        eng.close()


def _search(engine: Engine, **over: object) -> object:
    searcher = engine.searcher_for(engine.settings.model_copy(update=over))
    return searcher.search(SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=5))


def test_the_instruction_is_not_searched_and_the_answer_says_so(engine: Engine) -> None:
    res = _search(engine)
    assert [h.doc_id for h in res.hits] == ["report"]
    assert res.notes == ["answer_instructions: left out of the search: 'Please write the answer in int format.'"]
    # ...and what was searched, which the web page marks in passages (not "write", "int", "format")
    assert res.searched == "What was Northwind's revenue in 2023?"
    assert res.to_json()["searched"] == res.searched


def test_an_answer_says_what_was_searched_only_when_it_differs(engine: Engine) -> None:
    res = _search(engine, drop_answer_instructions=False)
    assert res.searched is None and "searched" not in res.to_json()
    res = engine.search({"query": "What was Northwind's revenue in 2023?", "libraries": [LIB], "mode": "bm25"})
    assert res.searched is None
    # through the query chain (its variants are searched apart and fused) the first one's is kept
    res = engine.search({"query": QUESTION, "libraries": [LIB], "mode": "bm25", "rewrite": True})
    assert res.searched == "What was Northwind's revenue in 2023?"


def test_with_the_rule_off_the_instruction_finds_the_style_guide(engine: Engine) -> None:
    res = _search(engine, drop_answer_instructions=False)
    assert [h.doc_id for h in res.hits] == ["report", "guide"]  # the guide matches "write", "int", "format"
    assert not any(n.startswith("answer_instructions") for n in res.notes)


def test_the_callers_request_keeps_the_question_as_asked(engine: Engine) -> None:
    # The searcher searches a copy: the gap log and rewrites see the question whole, and a key's
    # filter (the request's private scope) goes with the copy.
    req = SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=5).scoped(
        {LIB: [{"field": "doc_id", "op": "eq", "value": "guide"}]})
    res = engine.searcher_for(engine.settings).search(req)
    assert req.query == QUESTION
    assert res.hits == [] and res.notes[0].startswith("answer_instructions")  # the scope held: no report


def test_the_corrective_grade_judges_the_question_that_was_searched(engine: Engine) -> None:
    # The instruction's words are in no passage: counted as the question's, they would leave
    # the grade short of terms ("northwind", "revenue", "2023" are all in the report's page).
    def first_grade(**over: object) -> dict[str, object]:
        chain = engine.chain_for(engine.settings.model_copy(update=over), record_gaps=False)
        res = chain.search(SearchRequest(query=QUESTION, libraries=[LIB], mode="bm25", top_k=5, corrective=True))
        return res.corrective["steps"][0]

    on, off = first_grade(), first_grade(drop_answer_instructions=False)
    assert on["coverage"] == 1.0 and on["ok"]
    # Searched whole, the question has 6 coverage terms (northwind, revenue, 2023, please, write,
    # int; "answer" and "format" are frame words); the report and the guide it now finds hold
    # all but "please": 5/6.
    assert off["coverage"] == round(5 / 6, 4)


def test_a_long_instruction_is_quoted_short_in_the_note(engine: Engine) -> None:
    long = QUESTION + " " + " ".join(f"Please write answer {i} in list format." for i in range(40))
    searcher = engine.searcher_for(engine.settings)
    res = searcher.search(SearchRequest(query=long, libraries=[LIB], mode="bm25", top_k=5))
    assert [h.doc_id for h in res.hits] == ["report"]
    (note,) = res.notes
    quoted = note.split("left out of the search: ", 1)[1]
    assert len(quoted) == NOTE_CHARS + 2 and quoted.endswith("…'")  # 200 characters and the quotes
