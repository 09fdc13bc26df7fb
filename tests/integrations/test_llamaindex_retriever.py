"""What only the LlamaIndex retriever has: nodes whose prompt and embedding text carry title,
doc_id and page but not the rest of the citation, scored with the fused score, with their
document as source."""

from __future__ import annotations

import asyncio

from llama_index.core.schema import MetadataMode, NodeRelationship
from retriever_kit import KEY_STAR, UNIQUE, UNIQUE_DOC, UNIQUE_PAGE, LiveServer

from ragspine.integrations.llamaindex import PROMPT_METADATA_KEYS, RagspineRetriever


def test_prompts_get_title_doc_and_page_only(live: LiveServer) -> None:
    r = RagspineRetriever(url=live.url, api_key=KEY_STAR, libraries="reports")
    for got in (r.retrieve(UNIQUE), asyncio.run(r.aretrieve(UNIQUE))):
        node = got[0].node
        assert PROMPT_METADATA_KEYS == ("title", "doc_id", "page")
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            text = node.get_content(metadata_mode=mode)
            header, _, body = text.partition("\n\n")
            assert header.splitlines() == [f"doc_id: {UNIQUE_DOC}", "title: Acme 2023 annual report",
                                           f"page: {UNIQUE_PAGE}"]
            assert body == node.text and UNIQUE in body
        # Everything else stays on the node for the app.
        assert node.metadata["bbox"] and node.metadata["thumbnail_url"].startswith(live.url)
        assert node.metadata["doc_metadata"]["score"] == "AA-"
        assert got[0].score == node.metadata["scores"]["fused"]
        assert node.ref_doc_id == f"reports/{UNIQUE_DOC}"
        assert node.relationships[NodeRelationship.SOURCE].node_id == f"reports/{UNIQUE_DOC}"
    r.close()
