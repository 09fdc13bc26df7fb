"""The query chain through the engine: rewrite, the corrective loop, the post-chain, the gap log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.retrieval.search import SearchRequest, SearchResponse

EN = "Acme Holdings reported strong revenue growth in Asia."
ZH = "阿克米控股在亚洲的营业收入大幅增长。"
RELATIONS = ("source,relation,target,provenance,source_aliases\n"
             "Acme Holdings,peer_of,Beta Corp,annual report p.3,阿克米控股\n").encode()


def make(data_dir: Path, **kw: Any) -> Engine:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", **kw))
    eng.create_library("lib")
    eng.ingest_text("lib", "en", EN, {"region": "asia"})
    eng.ingest_text("lib", "zh", ZH, {"region": "asia"})
    eng.ingest_text("lib", "beta", "Beta Corp turnover fell in Europe.", {"region": "europe"})
    return eng


@pytest.fixture
def eng(data_dir: Path) -> Engine:
    e = make(data_dir)
    yield e
    e.close()


def search(eng: Engine, query: str, **kw: Any) -> SearchResponse:
    return eng.search({"query": query, "libraries": ["lib"], "mode": "bm25", **kw})


def test_a_graph_alias_finds_the_report_that_uses_the_other_language(eng: Engine) -> None:
    assert [h.doc_id for h in search(eng, "Acme Holdings").hits] == ["en"]
    eng.graph.upload_relations("lib", RELATIONS, "relations.csv")
    res = search(eng, "Acme Holdings", rewrite=True)
    assert [q["query"] for q in res.queries] == ["Acme Holdings", "阿克米控股"]
    assert res.queries[1]["sources"] == ["graph"]
    found = {h.doc_id: h.found_by for h in res.hits}
    assert found == {"en": [0], "zh": [1]}
    # Without the flag nothing changes, and the answer says nothing of queries.
    plain = search(eng, "Acme Holdings")
    assert [h.doc_id for h in plain.hits] == ["en"] and plain.queries is None
    assert "queries" not in plain.to_json() and "found_by" not in plain.to_json()["hits"][0]


def test_the_glossary_rewrites_and_fusion_counts_each_variant_once(eng: Engine) -> None:
    eng.glossaries.upload("lib", "term,synonyms\nrevenue,turnover|营业收入\n".encode(), "g.csv")
    res = search(eng, "revenue", rewrite=True)
    assert [q["query"] for q in res.queries] == ["revenue", "turnover", "营业收入"]
    by_doc = {h.doc_id: h for h in res.hits}
    assert {d: h.found_by for d, h in by_doc.items()} == {"en": [0], "beta": [1], "zh": [2]}
    # Each page found by one variant at rank 1: RRF 1/(60+1) each; ties go to the id order.
    assert [h.doc_id for h in res.hits] == ["beta", "en", "zh"]
    assert all(h.scores["fused"] == pytest.approx(1 / 61) for h in res.hits)
    assert res.to_json()["hits"][0]["found_by"] == [1]


def test_the_setting_is_the_default_and_a_request_overrides_it(data_dir: Path) -> None:
    eng = make(data_dir, rewrite=True)
    try:
        eng.glossaries.upload("lib", b"term,synonyms\nrevenue,turnover\n", "g.csv")
        assert {h.doc_id for h in search(eng, "revenue").hits} == {"en", "beta"}
        assert {h.doc_id for h in search(eng, "revenue", rewrite=False).hits} == {"en"}
    finally:
        eng.close()


def test_corrective_drops_filters_only_when_allowed(eng: Engine) -> None:
    flt = [{"field": "region", "op": "eq", "value": "africa"}]
    res = search(eng, "revenue growth", filters=flt, corrective=True)
    assert res.abstained and res.hits == []
    assert [s["step"] for s in res.corrective["steps"]] == ["search"]
    assert res.corrective["reason"] == "no passage matched the query"
    res = search(eng, "revenue growth", filters=flt, corrective=True, allow_unfiltered_fallback=True)
    assert not res.abstained and [h.doc_id for h in res.hits] == ["en"]
    assert [(s["step"], s["verdict"]) for s in res.corrective["steps"]] == [("search", "no_hits"),
                                                                           ("drop_filters", "ok")]
    assert res.filters_relaxed and any(r.startswith("filters_relaxed") for r in res.degraded_reasons)


def test_corrective_rewrites_a_weak_answer(data_dir: Path) -> None:
    eng = make(data_dir, corrective_min_coverage=0.8)
    try:
        eng.glossaries.upload("lib", b"term,synonyms\nturnover upswing,revenue growth\n", "g.csv")
        # "turnover upswing asia holdings": Acme's page, first, has asia and holdings (2/4 < 0.8,
        # two terms missing); the variant "revenue growth asia holdings" covers all four there.
        res = search(eng, "turnover upswing asia holdings", corrective=True, top_k=1)
        assert [(s["step"], s["verdict"]) for s in res.corrective["steps"]] == [("search", "low_coverage"),
                                                                               ("rewrite", "ok")]
        assert res.corrective["steps"][0]["coverage"] == 0.5
        assert res.corrective["steps"][1]["coverage"] == pytest.approx(1.0)
        assert [h.doc_id for h in res.hits] == ["en"] and not res.abstained
        assert [q["query"] for q in res.queries] == ["turnover upswing asia holdings", "revenue growth asia holdings"]
    finally:
        eng.close()


def test_corrective_abstains_after_at_most_two_actions(eng: Engine) -> None:
    eng.glossaries.upload("lib", b"term,synonyms\nturnover,revenue\n", "g.csv")
    flt = [{"field": "region", "op": "eq", "value": "europe"}]
    res = search(eng, "turnover dividends buyback plans", filters=flt, corrective=True,
                 allow_unfiltered_fallback=True)
    steps = res.corrective["steps"]
    assert [s["step"] for s in steps] == ["search", "drop_filters", "rewrite"]
    assert all(s["verdict"] == "low_coverage" for s in steps)
    assert res.abstained and res.hits == [] and res.corrective["actions"] == 2
    assert "missing: dividends, buyback, plans" in res.corrective["reason"]
    gaps = eng.gaps.list("lib")
    assert [(g["query"], g["reason"][:10]) for g in gaps] == [("turnover dividends buyback plans", "abstained:")]
    assert gaps[0]["filters"] == flt
    assert res.to_json()["abstained"] is True


def test_postprocess_reorders_and_keeps_citations_byte_for_byte(data_dir: Path) -> None:
    eng = Engine(Settings(data_dir=data_dir, reranker="none", mmr_lambda=0.5))
    try:
        eng.create_library("lib")
        texts = {"a": "harbour traffic grew in the north terminal", "b": "harbour traffic grew in the north terminal",
                 "c": "harbour fees rose", "d": "harbour dredging ended"}
        for doc, text in texts.items():
            eng.ingest_text("lib", doc, text)
        plain = search(eng, "harbour traffic grew", top_k=4)
        assert [h.doc_id for h in plain.hits] == ["a", "b", "c", "d"]
        cites = {h.doc_id: {k: v for k, v in h.to_json().items() if k != "scores"} for h in plain.hits}
        # Fused 3/61, 3/62, 3/63, 3/64 (first to fourth in both BM25 channels, weights 1 + 2):
        # relevance a 1, b 0.656, c 0.323, d 0. Cosines: a-b 1, a-c = a-d = 1/sqrt(21) = 0.218.
        # MMR, lambda 0.5, after a: b 0.328 - 0.5 = -0.172; c 0.161 - 0.109 = 0.052; d -0.109 -> c.
        res = search(eng, "harbour traffic grew", top_k=2, postprocess=["mmr", "lost_in_middle"])
        assert [h.doc_id for h in res.hits] == ["a", "c"]
        assert res.postprocess == ["mmr", "lost_in_middle"]
        for h in res.hits:
            assert {k: v for k, v in h.to_json().items() if k != "scores"} == cites[h.doc_id]
        only_lim = search(eng, "harbour traffic grew", top_k=4, postprocess=["lost_in_middle"])
        assert [h.doc_id for h in only_lim.hits] == ["a", "c", "d", "b"]
    finally:
        eng.close()


def test_bad_chain_requests_are_422(eng: Engine) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="postprocess lists a step twice"):
        search(eng, "revenue", postprocess=["mmr", "mmr"])
    with pytest.raises(ValidationError):
        search(eng, "revenue", postprocess=["shuffle"])


def test_restricted_content_never_leaves_through_the_chain(data_dir: Path) -> None:
    """(docs/invariants.md, 1) A RESTRICTED page's words cannot come back through a variant,
    a corrective retry, the post-chain or the gap log; the canary typed as a query is kept in
    the gap log as the user typed it, and nothing else of the page is."""
    import json

    import pdfs
    from pdfs import Page

    from ragspine.chain.gaps import KIND_GAP
    from ragspine.store.base import Where

    eng = Engine(Settings(data_dir=data_dir, reranker="none"))
    try:
        eng.create_library("lib")
        pdf = pdfs.make_pdf([Page(["Harbour traffic grew this year."]),
                             Page(["Harbour zqxchaincanary plan zqxsecretbody."], header="RESTRICTED")])
        eng.ingest("lib", pdf, {"doc_id": "report"})
        eng.glossaries.upload("lib", b"term,synonyms\nharbour,zqxchaincanary\n", "g.csv")
        answers = [
            search(eng, "harbour plan", rewrite=True, corrective=True, postprocess=["mmr", "lost_in_middle"]),
            search(eng, "zqxchaincanary", rewrite=True, corrective=True),
            search(eng, "zqxsecretbody plan", corrective=True, postprocess=["mmr"]),
        ]
        assert [h.page for h in answers[0].hits] == [1]
        # The canary's glossary group leads to the public page (variant "harbour"), never to page 2.
        assert [h.page for h in answers[1].hits] == [1] and answers[1].hits[0].found_by == [1]
        assert answers[2].abstained
        for res in answers:
            text = json.dumps([h.to_json() for h in res.hits], ensure_ascii=False)
            assert "zqx" not in text
        gaps = eng.store.scroll("lib", Where(kind=KIND_GAP))
        assert [g.payload["query"] for g in gaps] == ["zqxsecretbody plan"]
        for g in gaps:  # the query as typed, its filters, key filter, counts and times - nothing found
            assert set(g.payload) == {"kind", "gap_id", "query", "filters", "scope", "hit_count", "first_seen",
                                      "last_seen", "reason", "writes"}
            assert g.payload["scope"] == "[]"  # searched without an API key's filter
            assert all(len(w) == 32 and int(w, 16) >= 0 for w in g.payload["writes"])  # random ids only
    finally:
        eng.close()


def test_a_variant_over_the_query_limit_is_skipped_not_an_error(data_dir: Path) -> None:
    eng = make(data_dir, max_query_chars=16)
    try:
        eng.glossaries.upload("lib", b"term,synonyms\nrevenue,turnover figures of the year\n", "g.csv")
        res = search(eng, "revenue growth", rewrite=True)  # 14 chars; the variant would be 36
        assert [q["query"] for q in res.queries] == ["revenue growth"]
        assert [h.doc_id for h in res.hits] == ["en"]
    finally:
        eng.close()


def test_corrective_abstains_when_the_document_never_mentions_the_year_asked(data_dir: Path) -> None:
    # The report is about 2023: asked about 2021, the topic's words are all there (coverage
    # passes), the year is not; asked about 2023, it answers.
    eng = make(data_dir)
    try:
        eng.ingest_text("lib", "acme-2023", "Acme Holdings revenue in Asia grew 12 percent in 2023.", {"region": "asia"})
        res = search(eng, "How much did Acme Holdings revenue in Asia grow in 2021?", corrective=True)
        assert res.abstained and res.hits == []
        assert res.corrective["steps"][0]["verdict"] == "unmentioned"
        assert res.corrective["reason"] == "the first hit's document never mentions 2021"
        assert not search(eng, "How much did Acme Holdings revenue in Asia grow in 2023?", corrective=True).abstained
    finally:
        eng.close()


def test_the_specifics_rule_can_be_turned_off(data_dir: Path) -> None:
    eng = make(data_dir, corrective_specifics=False)
    try:
        eng.ingest_text("lib", "acme-2023", "Acme Holdings revenue in Asia grew 12 percent in 2023.", {"region": "asia"})
        res = search(eng, "How much did Acme Holdings revenue in Asia grow in 2021?", corrective=True)
        assert not res.abstained and "acme-2023" in [h.doc_id for h in res.hits]
    finally:
        eng.close()


def test_the_specifics_rule_reads_a_misspelt_name_as_corrected_and_not_under_a_keys_filter(data_dir: Path) -> None:
    eng = make(data_dir)
    try:
        eng.ingest_text("lib", "zorblax-2023", "Zorblax revenue in Asia grew 12 percent in 2023.",
                        {"region": "asia", "entity": "Zorblax"})
        # "Zorbalx" is Zorblax one swap off: asked as written, the document would never mention it.
        res = search(eng, "How much did Zorbalx revenue in Asia grow in 2023?", corrective=True)
        assert not res.abstained and res.hits[0].doc_id == "zorblax-2023"
        res = search(eng, "How much did Zorblax revenue in Asia grow in 2021?", corrective=True)
        assert res.abstained and res.corrective["reason"] == "the first hit's document never mentions 2021"
        # A key whose filter hides part of the library: the rule does not read the documents.
        req = SearchRequest(query="How much did Zorblax revenue in Asia grow in 2021?", libraries=["lib"],
                            mode="bm25", corrective=True).scoped({"lib": [{"field": "region", "op": "eq", "value": "asia"}]})
        res = eng.search(req)
        assert not res.abstained and res.hits[0].doc_id == "zorblax-2023"
    finally:
        eng.close()


def test_a_misspelt_word_written_as_a_name_is_read_as_the_word(data_dir: Path) -> None:
    # "Companay" is capitalised, so it is read as a name; no document's name is near it, but the
    # library's word "company" is one edit away in three passages: the grade reads it so.
    eng = make(data_dir)
    try:
        for i, region in enumerate(("asia", "europe", "africa")):
            eng.ingest_text("lib", f"note-{i}", f"The insurance company interviewed clients in {region} in 2016.",
                            {"region": region})
        q = "Who did the Traveler Insurance Companay interview in Asia in 2016?"
        res = search(eng, q, corrective=True)
        assert not res.abstained and res.hits[0].doc_id == "note-0"
        # Without corrections the name is a specific the document never mentions.
        off = make(data_dir / "off", spelling_corrections=False)
        try:
            for i, region in enumerate(("asia", "europe", "africa")):
                off.ingest_text("lib", f"note-{i}", f"The insurance company interviewed clients in {region} in 2016.",
                                {"region": region})
            res = search(off, q, corrective=True)
            assert res.abstained and res.corrective["reason"] == "the first hit's document never mentions companay"
        finally:
            off.close()
    finally:
        eng.close()


def test_corrective_abstains_on_a_page_the_document_does_not_have(data_dir: Path) -> None:
    eng = make(data_dir)
    try:
        res = search(eng, "What does page 50 say about Acme Holdings revenue growth in Asia?", corrective=True)
        assert res.abstained and res.hits == []
        assert res.corrective["steps"][0]["verdict"] == "no_such_page"
        assert res.corrective["reason"] == "the first hit's document has no page 50"
        res = search(eng, "What does page 1 say about Acme Holdings revenue growth in Asia?", corrective=True)
        assert not res.abstained and res.hits[0].doc_id == "en"
        gaps = eng.gaps.list("lib")
        assert [g["reason"] for g in gaps] == ["abstained: the first hit's document has no page 50"]
    finally:
        eng.close()
