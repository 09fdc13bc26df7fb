"""API keys that carry a filter: every read through the key keeps to the documents the filter
lets through (search in every mode, documents, pages, thumbnails, graph, gaps), what needs the
whole library is refused, and a sweep of every route of the OpenAPI document with a planted
out-of-filter document's canary finds it nowhere."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pdfs
import pytest
from fastapi.testclient import TestClient
from ragspine.serving.app import create_app
from serving_kit import assert_problem, clean_settings, search, upload
from test_api_restricted import assert_clean

LIB, OTHER = "filings", "public"
ADMIN = "key-admin-0000"
EMEA = "key-emea-11111"  # filings where region is emea; public whole
NOT_APAC = "key-notapac-22"  # filings where region is not apac (so also documents without a region)
CANARY = "zqxkeyfiltercanary"
#: A second word of the hidden document that the sweep never sends: no answer may hold it, error
#: or not (the first canary may come back only where an error names what the caller asked for).
HIDDEN = "zqxneverasked"
#: The hidden document's entity's other name: a rewrite would add the canary's name to a query.
ALIAS = "宇宙航运"
DOCS = {
    "emea-doc": ({"region": "emea", "entity": "Alpha Emea Ltd", "fiscal_year": 2023},
                 "Harbour revenue grew in the emea region. openwordalpha"),
    "apac-doc": ({"region": "apac", "entity": f"{CANARY} Holdings", "entity_local": ALIAS, "fiscal_year": 2023},
                 f"Harbour revenue grew in the apac region. {CANARY} secret tender {HIDDEN}"),
    "plain-doc": ({"fiscal_year": 2022}, "Harbour revenue grew without a region."),
}
KEYS = f"{ADMIN}=*;{EMEA}=filings(region in [emea]),public;{NOT_APAC}=filings(region ne apac)"
MODES = ("auto", "hybrid", "bm25", "lexical", "economy")


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = clean_settings(data_dir=tmp_path_factory.mktemp("keyfilters"), api_keys=KEYS, gap_log=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for lib in (LIB, OTHER):
            assert c.post("/v1/libraries", json={"name": lib}, headers=h(ADMIN)).status_code == 201
        for doc_id, (meta, text) in DOCS.items():
            r = upload(c, LIB, pdfs.make_pdf([text, f"Second page of {doc_id}: harbour outlook."]),
                       metadata={"doc_id": doc_id, "title": f"Report {doc_id}", **meta}, wait=True, headers=h(ADMIN))
            assert r.status_code == 201 and r.json()["state"] == "succeeded", r.text
        r = upload(c, OTHER, pdfs.make_pdf(["Public harbour bulletin."]), metadata={"doc_id": "bulletin"},
                   wait=True, headers=h(ADMIN))
        assert r.status_code == 201, r.text
        rel = b"source,relation,target,provenance\nAlpha Emea Ltd,peer_of,Beta Corp,market study\n"
        r = c.post(f"/v1/libraries/{LIB}/graph/relations", files={"file": ("rel.csv", rel, "text/csv")},
                   headers=h(ADMIN))
        assert r.status_code == 200, r.text
        yield c


def hit_docs(resp: Any) -> set[str]:
    assert resp.status_code == 200, resp.text
    return {x["doc_id"] for x in resp.json()["hits"]}


@pytest.mark.parametrize("mode", MODES)
def test_search_keeps_to_the_keys_filter_in_every_mode(client: TestClient, mode: str) -> None:
    q = "harbour revenue region"
    assert hit_docs(search(client, q, [LIB], h(ADMIN), mode=mode)) == set(DOCS)  # all three match
    assert hit_docs(search(client, q, [LIB], h(EMEA), mode=mode)) == {"emea-doc"}
    assert hit_docs(search(client, q, [LIB], h(NOT_APAC), mode=mode)) == {"emea-doc", "plain-doc"}
    # Two libraries: the filter binds only the library it is given for.
    assert hit_docs(search(client, "harbour", [LIB, OTHER], h(EMEA), mode=mode)) == {"emea-doc", "bulletin"}


def test_the_keys_filter_composes_with_the_requests_and_is_never_relaxed(client: TestClient) -> None:
    only_plain = [{"field": "doc_id", "op": "eq", "value": "plain-doc"}]
    assert hit_docs(search(client, "harbour", [LIB], h(NOT_APAC), filters=only_plain)) == {"plain-doc"}
    # EMEA's filter and the request's exclude each other: nothing, and the fallback drops only
    # the request's filters.
    assert hit_docs(search(client, "harbour", [LIB], h(EMEA), filters=only_plain)) == set()
    r = search(client, "harbour", [LIB], h(EMEA), filters=only_plain, allow_unfiltered_fallback=True)
    assert hit_docs(r) == {"emea-doc"} and r.json()["filters_relaxed"] is True
    # The corrective loop, rewriting and the post-chain keep it too.
    for kw in ({"corrective": True}, {"rewrite": True}, {"postprocess": ["mmr"]}, {"rerank": True}):
        assert hit_docs(search(client, "harbour revenue", [LIB], h(EMEA), **kw)) <= {"emea-doc"}, kw
    # The canary itself finds nothing through EMEA, and something through the admin key.
    assert hit_docs(search(client, CANARY, [LIB], h(ADMIN), mode="bm25")) == {"apac-doc"}
    assert hit_docs(search(client, CANARY, [LIB], h(EMEA), mode="bm25")) == set()


def test_a_document_outside_the_filter_is_exactly_as_absent_as_a_missing_one(client: TestClient) -> None:
    listed = client.get(f"/v1/libraries/{LIB}/documents", headers=h(EMEA)).json()["documents"]
    assert [d["doc_id"] for d in listed] == ["emea-doc"]
    libs = {x["name"]: x for x in client.get("/v1/libraries", headers=h(EMEA)).json()["libraries"]}
    assert (libs[LIB]["documents"], libs[LIB]["pages"]) == (1, 2)
    assert (libs[OTHER]["documents"]) == 1
    base = f"/v1/libraries/{LIB}/documents"
    for doc in ("apac-doc", "never-uploaded"):
        for url in (f"{base}/{doc}", f"{base}/{doc}/pages/1", f"{base}/{doc}/pages/1/thumbnail",
                    f"{base}/{doc}/pages/1/similarity-map?query=harbour"):
            body = assert_problem(client.get(url, headers=h(EMEA)), 404, "unknown-document")
            assert body["detail"] == f"no document '{doc}' in library '{LIB}'", url
    assert client.get(f"{base}/apac-doc/pages/1", headers=h(ADMIN)).status_code == 200
    assert client.get(f"{base}/emea-doc/pages/1/thumbnail", headers=h(EMEA)).status_code == 200
    assert client.get(f"{base}/plain-doc", headers=h(NOT_APAC)).status_code == 200


def test_what_needs_the_whole_library_is_refused(client: TestClient) -> None:
    base = f"/v1/libraries/{LIB}"
    calls = [
        ("POST", base + "/documents", {"files": {"file": ("x.pdf", pdfs.make_pdf(["x"]), "application/pdf")},
                                       "data": {"metadata": '{"region": "emea"}'}}),
        ("DELETE", base + "/documents/emea-doc", {}),
        ("DELETE", base, {}),
        ("POST", base + "/dense", {}),
        ("POST", base + "/graph/relations", {"files": {"file": ("r.csv", b"source,relation,target\n", "text/csv")}}),
        ("POST", base + "/glossary", {"files": {"file": ("g.csv", b"term,synonyms\nrev,revenue\n", "text/csv")}}),
        ("DELETE", base + "/glossary", {}),
        ("GET", base + "/backup", {}),
        ("GET", "/v1/backup", {}),
        ("POST", "/v1/restore", {"content": b"x"}),
    ]
    for method, url, kw in calls:
        r = client.request(method, url, headers=h(EMEA), **kw)
        body = assert_problem(r, 403)
        assert "filter" in body["detail"] or "every library" in body["detail"], (url, body)
    # Still there, whole.
    assert client.get(f"{base}/documents/emea-doc", headers=h(ADMIN)).status_code == 200
    # The same key reads the library it holds whole, and may write there.
    assert client.post("/v1/libraries/public/glossary", headers=h(EMEA),
                       files={"file": ("g.csv", b"term,synonyms\nport,harbour\n", "text/csv")}).status_code == 200


def test_jobs_are_not_shown_to_a_key_with_a_filter(client: TestClient) -> None:
    r = upload(client, LIB, pdfs.make_pdf(["Harbour later note."]), metadata={"doc_id": "later", "region": "emea"},
               wait=True, headers=h(ADMIN))
    job = r.json()["id"]
    assert client.get(f"/v1/jobs/{job}", headers=h(ADMIN)).status_code == 200
    assert_problem(client.get(f"/v1/jobs/{job}", headers=h(EMEA)), 404)
    assert client.delete(f"/v1/libraries/{LIB}/documents/later", headers=h(ADMIN)).status_code == 204


def test_the_graph_is_the_visible_documents_graph(client: TestClient) -> None:
    ents = f"/v1/libraries/{LIB}/graph/entities"

    def names(key: str, q: str = "") -> set[str]:
        r = client.get(ents, params={"q": q, "limit": 200}, headers=h(key))
        assert r.status_code == 200, r.text
        return {e["name"] for e in r.json()["entities"]}

    assert f"{CANARY} Holdings" in names(ADMIN)
    assert f"{CANARY} Holdings" not in names(EMEA) and "Alpha Emea Ltd" in names(EMEA)
    assert "Beta Corp" in names(EMEA)  # the declared relations are the library's, seen by every key
    assert names(EMEA, CANARY) == set()
    r = client.get(f"{ents}/{CANARY} Holdings/neighbors", headers=h(EMEA))
    assert_problem(r, 404)
    assert CANARY not in r.json()["detail"].replace(f"'{CANARY} Holdings'", "")  # only the name asked for
    # A walk from a visible entity reaches only visible edges; the declared edge is there.
    r = client.get(f"{ents}/Alpha Emea Ltd/neighbors", params={"depth": 3}, headers=h(EMEA))
    assert r.status_code == 200 and CANARY not in r.text
    assert {n["name"] for n in r.json()["neighbors"]} >= {"Beta Corp"}
    # Expansion from the hidden entity is as unknown as any missing one.
    r = search(client, "harbour", [LIB], h(EMEA), expand={"entity": f"{CANARY} Holdings"})
    assert_problem(r, 404)
    assert hit_docs(search(client, "harbour", [LIB], h(ADMIN), expand={"entity": f"{CANARY} Holdings",
                                                                       "include_origin": True})) == {"apac-doc"}


def test_gaps_are_kept_per_filter(client: TestClient) -> None:
    gaps = f"/v1/libraries/{LIB}/gaps"
    assert client.delete(gaps, headers=h(ADMIN)).status_code == 200
    assert search(client, "qqqmissingword", [LIB], h(EMEA), mode="bm25").json()["hits"] == []
    assert search(client, "qqqmissingword", [LIB], h(EMEA), mode="bm25").json()["hits"] == []
    assert search(client, "qqqotherword", [LIB], h(NOT_APAC), mode="bm25").json()["hits"] == []

    def listed(key: str) -> list[dict[str, Any]]:
        r = client.get(gaps, headers=h(key))
        assert r.status_code == 200, r.text
        return r.json()["gaps"]

    emea, notapac, admin = listed(EMEA), listed(NOT_APAC), listed(ADMIN)
    assert [(g["query"], g["hit_count"]) for g in emea] == [("qqqmissingword", 2)]
    assert emea[0]["scope"] == [{"field": "region", "op": "in", "value": ["emea"]}]
    assert [g["query"] for g in notapac] == ["qqqotherword"]
    assert sorted(g["query"] for g in admin) == ["qqqmissingword", "qqqotherword"]
    # Another filter's gap cannot be deleted, and clearing clears one's own.
    assert_problem(client.delete(f"{gaps}/{emea[0]['gap_id']}", headers=h(NOT_APAC)), 404)
    assert client.delete(gaps, headers=h(NOT_APAC)).json() == {"deleted": 1}
    assert [g["query"] for g in listed(ADMIN)] == ["qqqmissingword"]


# -- the sweep ------------------------------------------------------------------------------------


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [x for item in v.values() for x in _strings(item)]
    if isinstance(v, list):
        return [x for item in v for x in _strings(item)]
    return []


def _urls(template: str, choices: dict[str, list[str]]) -> list[str]:
    names = re.findall(r"\{(\w+)(?::path)?\}", template)
    out = []
    for combo in itertools.product(*(choices[n] for n in names)):
        values = dict(zip(names, combo))
        out.append(re.sub(r"\{(\w+)(?::path)?\}", lambda m: values[m.group(1)], template))
    return out


def test_no_route_of_the_openapi_document_leaks_a_document_outside_the_filter(client: TestClient) -> None:
    """Every operation of /openapi.json, called through EMEA's key with every document id
    (the hidden one included), every page, every entity the admin sees (the hidden one
    included) and queries that name the canary: the canary never comes out. A route added
    later without being swept here fails the coverage check at the end."""
    spec = client.get("/openapi.json", headers=h(ADMIN)).json()
    ents = client.get(f"/v1/libraries/{LIB}/graph/entities", params={"limit": 200}, headers=h(ADMIN)).json()
    entity_ids = [e["id"] for e in ents["entities"]]
    hidden = [e["id"] for e in ents["entities"] if CANARY in e["name"]]
    assert hidden  # the sweep asks for the canary's entity by id
    # A gap of the admin's that holds the hidden word (a search for it where it is not).
    assert search(client, HIDDEN, [LIB], h(ADMIN), mode="bm25",
                  filters=[{"field": "doc_id", "op": "eq", "value": "emea-doc"}]).json()["hits"] == []
    gap_ids = [g["gap_id"] for g in client.get(f"/v1/libraries/{LIB}/gaps", headers=h(ADMIN)).json()["gaps"]]
    choices = {"lib": [LIB, OTHER], "doc_id": [*DOCS, "bulletin", "never-uploaded"], "n": ["1", "2", "3"],
               "entity_id": entity_ids, "job_id": ["0" * 32], "gap_id": gap_ids}
    queries = [CANARY, f"harbour {CANARY} tender", "apac region", f"{ALIAS} revenue", f"{CANARY} Holdings 2023"]
    bodies: list[tuple[str, bytes]] = []
    called: set[tuple[str, str]] = set()

    def call(method: str, template: str, url: str, **kw: Any) -> None:
        r = client.request(method, url, headers=h(EMEA), **kw)
        assert r.status_code < 500, (method, url, r.text)
        body = r.content
        if r.status_code >= 400:  # an error may name what was asked for ("no entity '...'"), nothing else
            asked = [url, *map(str, kw.get("params", {}).values()), *_strings(kw.get("json"))]
            for a in sorted((a for a in asked if CANARY in a), key=len, reverse=True):
                body = body.replace(a.encode(), b"").replace(a.split("/")[-1].encode(), b"")
        elif template.endswith("/gaps") or CANARY in str((kw.get("json") or {}).get("query", "")):
            # The caller's own words come back (the gap log keeps queries by design; an answer
            # lists its query variants and the terms its grade missed): the hidden document's
            # other word, which no request names, must not, and no hit may be of a hidden document.
            body = body.replace(CANARY.encode(), b"<asked>")
        else:
            assert CANARY.encode() not in body, (method, url, body[:800])
        if template == "/v1/search" and r.status_code == 200:
            assert {x["doc_id"] for x in r.json()["hits"]} <= {"emea-doc", "bulletin"}, (kw, r.text[:500])
        bodies.append((f"{method} {url}", body))
        called.add((method.lower(), template))

    for template, ops in spec["paths"].items():
        for method in ops:
            for url in _urls(template, choices):
                if method == "get":
                    for q in queries:
                        for other in hidden[:1] + entity_ids[:3]:
                            call("GET", template, url, params={"query": q, "q": q, "from": other, "to": hidden[0],
                                                               "depth": 3, "format": "json", "limit": 200})
                elif template == "/v1/search":
                    for q in queries:
                        for mode in MODES:
                            call("POST", template, url, json={"query": q, "libraries": [LIB, OTHER], "mode": mode,
                                                              "top_k": 100})
                        call("POST", template, url, json={"query": q, "libraries": [LIB], "rewrite": True,
                                                          "corrective": True, "postprocess": ["mmr"]})
                        for ent in hidden + entity_ids[:3]:
                            call("POST", template, url, json={"query": q, "libraries": [LIB], "expand": {
                                "entity": ent, "depth": 3, "include_origin": True}})
                elif method == "post":
                    call("POST", template, url, files={"file": ("x.csv", CANARY.encode(), "text/csv")})
                else:
                    call(method.upper(), template, url)  # refused (403) or another filter's gap (404)
    missing = {(m, t) for t, ops in spec["paths"].items() for m in ops} - called
    assert not missing, f"routes the sweep did not call: {sorted(missing)}"
    for what, body in bodies:
        assert_clean(what, body, [CANARY, HIDDEN])
    # Positive control: through the admin key the same routes do show the canary.
    assert CANARY in client.get(f"/v1/libraries/{LIB}/documents/apac-doc/pages/1", headers=h(ADMIN)).text
    assert HIDDEN in client.get(f"/v1/libraries/{LIB}/gaps", headers=h(ADMIN)).text
    assert HIDDEN in search(client, HIDDEN, [LIB], h(ADMIN), mode="bm25").text
    # Nothing was lost to the sweep's deletes and posts (all refused).
    docs = client.get(f"/v1/libraries/{LIB}/documents", headers=h(ADMIN)).json()["documents"]
    assert {d["doc_id"] for d in docs} >= set(DOCS)


def test_a_question_naming_a_hidden_document_learns_nothing_of_it(client: TestClient) -> None:
    """The document prior lifts the pages of the document a question names (its issuer, here
    the canary's entity). Through EMEA's key that document is invisible: the answer's fusion
    must not even say that a named document counted."""
    q = f"{CANARY} Holdings harbour revenue 2023"
    admin = search(client, q, [LIB], h(ADMIN), mode="bm25").json()
    emea = search(client, q, [LIB], h(EMEA), mode="bm25").json()
    assert "document prior" in admin["fusion"]  # the control: the question names apac-doc
    assert emea["hits"] and {x["doc_id"] for x in emea["hits"]} == {"emea-doc"}
    assert "document prior" not in emea["fusion"], emea["fusion"]


def test_rewrites_use_only_the_aliases_of_documents_the_key_can_see(client: TestClient) -> None:
    """The rewriter adds an entity's other names to a query, and the answer lists the variants:
    through EMEA's key, the hidden document's entity gives no variant."""
    q = f"{ALIAS} harbour revenue"
    admin = search(client, q, [LIB], h(ADMIN), mode="bm25", rewrite=True).json()
    assert CANARY in json.dumps(admin["queries"]).lower()  # the control: the alias is rewritten
    emea = search(client, q, [LIB], h(EMEA), mode="bm25", rewrite=True).json()
    assert CANARY not in json.dumps(emea, ensure_ascii=False).lower(), emea.get("queries")
    assert {x["doc_id"] for x in emea["hits"]} <= {"emea-doc"}

