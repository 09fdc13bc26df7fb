"""Multi-hop search on the demo corpus: questions whose answer pages can only be reached
through the graph, with the pages and the citation of every edge of the path asserted.

The asker knows one name. The answer lies in another entity's report, on a page that never
names the asked entity, so no filter on the asked entity and no query about it finds it; the
declared relations (demo-relations.csv) and the reports' metadata do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from ragspine.demo import DEMO_LIBRARY, DemoDocument
from ragspine.engine import Engine
from ragspine.errors import FilterError, InvalidRequestError
from ragspine.graph.errors import DepthOutOfRangeError, UnknownEntityError, UnknownRelationError

BULLETIN = "acme-energy-bulletin-2023"
GLOBEX = "globex-corp-ar-2022"
HOLDINGS = "acme-holdings-ar-2023"
FILE = "demo-relations.csv"

ROW2 = {"kind": "declared", "provenance": "Acme Robotics Annual Report 2023, p.1: 'A subsidiary of Acme Holdings'",
        "file": FILE, "row": 2}
ROW3 = {"kind": "declared", "provenance": "阿克米能源有限公司2023年经营统计公报, p.1: 公司是阿克米控股的全资子公司",
        "file": FILE, "row": 3}
ROW6 = {"kind": "declared", "provenance": "Acme Holdings Annual Report 2023, p.6: 'Globex Corp, the closest listed peer'",
        "file": FILE, "row": 6}


def edge(source: str, relation: str, target: str, *citations: dict[str, Any], total: int | None = None) -> dict[str, Any]:
    return {"source": source, "relation": relation, "target": target, "citations": list(citations),
            "citations_total": len(citations) if total is None else total}


def metadata_link(doc_id: str, entity: str) -> dict[str, Any]:
    return edge(f"doc:{doc_id}", "mentions", entity,
                {"kind": "metadata", "doc_id": doc_id, "version": 1, "field": "entity"})


def page_text(docs: list[DemoDocument], doc_id: str, page: int) -> str:
    doc = next(d for d in docs if d.doc_id == doc_id)
    with pymupdf.open(doc.path) as pdf:
        return str(pdf[page - 1].get_text())


def search(engine: Engine, query: str, **kw: Any) -> dict[str, Any]:
    return engine.search({"query": query, "libraries": [DEMO_LIBRARY], "top_k": 5, **kw}).to_json()


def pages(res: dict[str, Any]) -> list[tuple[str, int]]:
    return [(h["doc_id"], h["page"]) for h in res["hits"]]


def via_of(hit: dict[str, Any], entity: str) -> dict[str, Any]:
    return next(v for v in hit["via"] if v["entity"]["id"] == entity)


def test_revenue_of_the_subsidiaries_asked_in_chinese(demo_reader: Engine, demo_docs: list[DemoDocument]) -> None:
    """阿克米控股的子公司营业收入 — the revenue lines of Acme Holdings' subsidiaries: the Chinese
    bulletin of Acme Energy, reached as Acme Holdings ←subsidiary_of— Acme Energy ←entity— report."""
    # Without the graph: the asked entity's own documents hold no such page.
    assert search(demo_reader, "营业收入", filters=[{"field": "entity", "op": "eq", "value": "Acme Holdings"}])["hits"] == []

    res = search(demo_reader, "营业收入", expand={"entity": "阿克米控股", "relation": "subsidiary_of"})
    assert sorted(pages(res)) == [(BULLETIN, 1), (BULLETIN, 2), (BULLETIN, 3)]  # page 4 is RESTRICTED
    assert res["expansion"]["libraries"][0]["origin"] == {"id": "acme-holdings", "name": "Acme Holdings", "type": "company"}
    assert [(e["id"], e["depth"]) for e in res["expansion"]["libraries"][0]["entities"]] == [
        ("acme-energy", 1), ("acme-robotics", 1), ("acme-services", 1)]

    p3 = next(h for h in res["hits"] if h["page"] == 3)
    text = page_text(demo_docs, BULLETIN, 3)
    assert "营业收入" in p3["text"] and "阿克米控股" not in text and "Acme Holdings" not in text
    assert p3["via"] == [{
        "library_id": DEMO_LIBRARY,
        "from": {"id": "acme-holdings", "name": "Acme Holdings", "type": "company"},
        "entity": {"id": "acme-energy", "name": "Acme Energy", "type": "subsidiary"},
        "depth": 1,
        "path": [edge("acme-energy", "subsidiary_of", "acme-holdings", ROW3), metadata_link(BULLETIN, "acme-energy")],
    }]
    # Page 2 names no subsidiary in its metadata sense, but mentions 阿克米机器人: it comes in
    # through Acme Energy (the report's entity) and through the passage naming Acme Robotics.
    p2 = next(h for h in res["hits"] if h["page"] == 2)
    robo = via_of(p2, "acme-robotics")
    assert robo["path"][0] == edge("acme-robotics", "subsidiary_of", "acme-holdings", ROW2)
    [cite] = robo["path"][1]["citations"]
    assert (cite["kind"], cite["doc_id"], cite["page"], cite["match"]) == ("text", BULLETIN, 2, "阿克米机器人")
    assert cite["chunk_id"].startswith(f"{BULLETIN}/p2/c") and len(cite["bbox"]) == 4
    assert via_of(p2, "acme-energy")["path"][1] == metadata_link(BULLETIN, "acme-energy")


def test_operating_margin_of_the_closest_peer(demo_reader: Engine, demo_docs: list[DemoDocument]) -> None:
    """Operating margin by segment of Acme Holdings' peer: Globex's report, page 2."""
    own = search(demo_reader, "operating margin by segment",
                 filters=[{"field": "entity", "op": "eq", "value": "Acme Holdings"}])
    assert {d for d, _ in pages(own)} == {HOLDINGS}

    res = search(demo_reader, "operating margin by segment", expand={"entity": "Acme Holdings", "relation": "peer_of"})
    top = res["hits"][0]
    assert (top["doc_id"], top["page"]) == (GLOBEX, 2)
    assert "Acme" not in page_text(demo_docs, GLOBEX, 2)
    assert top["via"][0]["path"] == [edge("acme-holdings", "peer_of", "globex-corp", ROW6),
                                     metadata_link(GLOBEX, "globex-corp")]
    # Pages of other documents come in only where their text names the peer, cited by chunk.
    for h in res["hits"]:
        [v] = h["via"]
        link = v["path"][-1]
        if h["doc_id"] != GLOBEX:
            assert {c["kind"] for c in link["citations"]} == {"text"}
            assert {c["page"] for c in link["citations"]} == {h["page"]}
            assert "globex" in page_text(demo_docs, h["doc_id"], h["page"]).lower()


def test_three_hops_to_a_sister_company(demo_reader: Engine) -> None:
    """营业收入 of Acme Robotics' sister companies: Robotics —subsidiary_of→ Holdings
    ←subsidiary_of— Energy ←entity— bulletin, every edge cited."""
    res = search(demo_reader, "营业收入", expand={"entity": "Acme Robotics", "relation": "subsidiary_of", "depth": 2})
    assert sorted(pages(res)) == [(BULLETIN, 1), (BULLETIN, 2), (BULLETIN, 3)]
    p3 = next(h for h in res["hits"] if h["page"] == 3)
    [v] = p3["via"]
    assert v["depth"] == 2 and v["from"]["id"] == "acme-robotics"
    assert v["path"] == [
        edge("acme-robotics", "subsidiary_of", "acme-holdings", ROW2),
        edge("acme-energy", "subsidiary_of", "acme-holdings", ROW3),
        metadata_link(BULLETIN, "acme-energy"),
    ]
    # Page 1 names 阿克米控股 itself: it is also reached one hop away, through Acme Holdings.
    p1 = next(h for h in res["hits"] if h["page"] == 1)
    assert [x["entity"]["id"] for x in p1["via"]] == ["acme-holdings", "acme-energy"]


def test_origin_is_searched_only_when_asked(demo_reader: Engine) -> None:
    req = {"entity": "Acme Holdings", "relation": "subsidiary_of"}
    without = search(demo_reader, "dividend per share", expand=req)
    assert all(v["depth"] == 1 for h in without["hits"] for v in h["via"])
    with_origin = search(demo_reader, "dividend per share", expand={**req, "include_origin": True})
    p6 = next(h for h in with_origin["hits"] if (h["doc_id"], h["page"]) == (HOLDINGS, 6))
    assert via_of(p6, "acme-holdings") == {
        "library_id": DEMO_LIBRARY, "from": {"id": "acme-holdings", "name": "Acme Holdings", "type": "company"},
        "entity": {"id": "acme-holdings", "name": "Acme Holdings", "type": "company"}, "depth": 0,
        "path": [metadata_link(HOLDINGS, "acme-holdings")],
    }


def test_filters_still_narrow_and_fallback_keeps_the_graph(demo_reader: Engine) -> None:
    req = {"entity": "Acme Holdings", "relation": "peer_of"}
    q = "operating margin by segment"
    in_2023 = search(demo_reader, q, expand=req, filters=[{"field": "period", "op": "eq", "value": 2023}])
    assert GLOBEX not in {d for d, _ in pages(in_2023)} and in_2023["hits"]
    none = search(demo_reader, q, expand=req, filters=[{"field": "period", "op": "eq", "value": 1999}])
    assert none["hits"] == [] and not none["filters_relaxed"]
    relaxed = search(demo_reader, q, expand=req, filters=[{"field": "period", "op": "eq", "value": 1999}],
                     allow_unfiltered_fallback=True)
    assert relaxed["filters_relaxed"] and relaxed["hits"][0]["doc_id"] == GLOBEX
    assert all(h["via"] for h in relaxed["hits"])  # still only what the graph reaches


def test_same_request_same_answer(demo_reader: Engine) -> None:
    req = {"entity": "Acme Holdings", "relation": ["subsidiary_of", "peer_of"], "depth": 2}
    a = search(demo_reader, "revenue 2023", expand=req)
    b = search(demo_reader, "revenue 2023", expand=req)
    for r in (a, b):
        r.pop("timings_ms")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["hits"] and all(h["via"] for h in a["hits"])


def test_plain_search_has_no_via(demo_reader: Engine) -> None:
    res = search(demo_reader, "revenue")
    assert "expansion" not in res and all("via" not in h for h in res["hits"])


@pytest.mark.parametrize(
    ("expand", "error", "message"),
    [
        ({"entity": "Initech"}, UnknownEntityError, r"no entity 'Initech' in the graph of 'demo'"),
        ({"entity": "Acme Holdings", "relation": "owns"}, UnknownRelationError, r"unknown relation 'owns'"),
        ({"entity": "Acme Holdings", "depth": 4}, DepthOutOfRangeError, r"depth must be an integer from 1 to 3, got 4"),
        ({"entity": "Acme Holdings", "depth": 0}, DepthOutOfRangeError, r"from 1 to 3"),
    ],
)
def test_bad_expansions(demo_reader: Engine, expand: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        search(demo_reader, "revenue", expand=expand)


def test_bad_filter_is_still_an_error(demo_reader: Engine) -> None:
    with pytest.raises(FilterError):
        search(demo_reader, "revenue", expand={"entity": "Acme Holdings"},
               filters=[{"field": "period", "op": "gte", "value": "2020"}])


def test_searcher_refuses_expand_it_cannot_run(demo_reader: Engine) -> None:
    from ragspine.retrieval.search import SearchRequest

    req = SearchRequest(query="revenue", libraries=[DEMO_LIBRARY], expand={"entity": "Acme Holdings"})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="'expand' needs the relation graph"):
        demo_reader.searcher.search(req)


def test_data_dir_layout(demo_reader: Engine) -> None:
    folder = Path(demo_reader.settings.data_dir) / "graphs" / DEMO_LIBRARY
    assert sorted(p.name for p in folder.iterdir()) == ["graph.sqlite"]
