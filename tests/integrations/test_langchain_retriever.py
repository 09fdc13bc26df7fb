"""What only the LangChain retriever has: a Runnable's batch (one search per query), Documents
with their stable ids, and an API key that stays out of its repr."""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from retriever_kit import KEY_STAR, UNIQUE, UNIQUE_DOC, UNIQUE_PAGE, Counting, LiveServer

from ragspine.client import Client
from ragspine.integrations.langchain import RagspineRetriever


def test_batch_sends_one_search_per_query(live: LiveServer) -> None:
    transport = Counting()
    with Client(live.url, api_key=KEY_STAR, transport=transport) as client:
        r = RagspineRetriever(client=client, libraries=["reports", "archive"], top_k=1)
        out = r.batch([UNIQUE, "zebracorn"], config={"max_concurrency": 1})
    assert transport.sent == [("POST", "/v1/search")] * 2
    assert [b["query"] for b in transport.bodies] == [UNIQUE, "zebracorn"]
    assert [[d.id for d in docs] for docs in out] == [[f"reports/{UNIQUE_DOC}/p{UNIQUE_PAGE}/c0"],
                                                      ["archive/archive-2019/p1/c0"]]


def test_a_chain_reads_the_citations(live: LiveServer) -> None:
    """The README's use: a chain step turns documents into cited context for a prompt."""
    r = RagspineRetriever(url=live.url, api_key=KEY_STAR, libraries="reports", top_k=2)

    def cite(docs: list[Document]) -> str:
        return "\n".join(f"[{d.metadata['title']}, p. {d.metadata['page']}] {d.page_content}" for d in docs)

    context = (r | RunnableLambda(cite)).invoke(UNIQUE)
    assert context.splitlines()[0].startswith(f"[Acme 2023 annual report, p. {UNIQUE_PAGE}] ")
    assert UNIQUE in context.splitlines()[0]
    r.close()


def test_the_api_key_stays_out_of_the_repr(live: LiveServer) -> None:
    r = RagspineRetriever(url=live.url, api_key=KEY_STAR, libraries="reports")
    assert KEY_STAR not in repr(r) and KEY_STAR not in str(r.model_dump())
    assert r.invoke(UNIQUE)[0].metadata["doc_id"] == UNIQUE_DOC  # the key is still used
    r.close()
