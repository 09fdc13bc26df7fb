"""ragspine as a retriever of the RAG frameworks: thin adapters over :mod:`ragspine.client`.

- :mod:`ragspine.integrations.langchain`: ``RagspineRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'ragspine[langchain]'``);
- :mod:`ragspine.integrations.llamaindex`: ``RagspineRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'ragspine[llamaindex]'``).

Each query is one ``search`` call of the client and nothing more: no second search, no
permission check or re-ranking of their own (the server has done both). Every document or
node keeps the hit's citation (library, document, 1-based page, bbox in PDF points, chunk),
its scores and an absolute thumbnail URL. These modules import only :mod:`ragspine.client`,
:mod:`ragspine.api` and their framework (an import-linter contract in ``pyproject.toml``).
"""
