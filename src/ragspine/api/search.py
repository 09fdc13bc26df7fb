"""A search as the API sees it: the request the server validates and the response it sends."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from ragspine.api._base import Reply
from ragspine.api.names import FIELD_NAME_PATTERN, LIBRARY_NAME_PATTERN, QUERY_PATTERN

Mode = Literal["auto", "hybrid", "vector", "bm25", "lexical", "economy"]
MODES: tuple[str, ...] = ("auto", "hybrid", "vector", "bm25", "lexical", "economy")
#: Steps of the post-chain, applied after rerank in the order given (see ragspine.chain).
PostStep = Literal["mmr", "lost_in_middle"]
POST_STEPS: tuple[str, ...] = ("mmr", "lost_in_middle")

#: Unicode category Cc (C0, DEL, C1) except tab, newline and carriage return: a regex, because
#: calling unicodedata.category per character cost 4% of a BM25 search.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")



#: A filter as the schema declares it (the server checks it, naming what is wrong).
FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["field", "op", "value"],
    "additionalProperties": False,
    "properties": {
        "field": {"type": "string", "pattern": FIELD_NAME_PATTERN},
        "op": {"enum": ["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "between"]},
        "value": {},
    },
}


class ExpandSpec(BaseModel):
    """Search over the entities the relation graph reaches from ``entity`` (an id, name or
    alias) along ``relation`` (one, a list, or comma-separated; default: the declared kinds
    subsidiary_of, peer_of, derived_from) up to ``depth`` hops (1-3). Validated and run by
    :meth:`ragspine.graph.GraphService.search`; hits say which path brought them in (``via``)."""

    model_config = ConfigDict(extra="forbid")

    entity: str = Field(min_length=1, max_length=256)
    relation: str | list[str] | None = None
    #: Checked by the graph, which names the limit: declared here, not enforced twice.
    depth: int = Field(1, json_schema_extra={"minimum": 1, "maximum": 3})
    direction: Literal["both", "out", "in"] = "both"
    #: Search the start entity's own documents too.
    include_origin: bool = False


class SearchRequest(BaseModel):
    """A search. ``top_k`` is bounded by ``RAGSPINE_MAX_TOP_K`` (default 1000)."""

    model_config = ConfigDict(extra="forbid")

    # The server checks the bounds below against its settings (RAGSPINE_MAX_QUERY_CHARS,
    # RAGSPINE_MAX_TOP_K) and names them in its error; the schema declares their defaults.
    query: str = Field(description="the question, in any language, at most RAGSPINE_MAX_QUERY_CHARS "
                       "(default 4096) characters; no control characters",
                       json_schema_extra={"minLength": 1, "maxLength": 4096, "pattern": QUERY_PATTERN})
    libraries: list[str] = Field(min_length=1, max_length=64, json_schema_extra={
        "items": {"type": "string", "pattern": LIBRARY_NAME_PATTERN}})
    filters: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra={"items": FILTER_SCHEMA}, description='metadata conditions, all of which must hold: {"field": ..., '
        '"op": "eq|ne|in|nin|gt|gte|lt|lte|between", "value": ...}')
    mode: Mode = "auto"
    top_k: int = Field(10, description="1 to RAGSPINE_MAX_TOP_K (default 1000)",
                       json_schema_extra={"minimum": 1, "maximum": 1000})
    rerank: bool = False
    allow_unfiltered_fallback: bool = False
    #: Multi-hop search through the relation graph (see :class:`ExpandSpec`).
    expand: ExpandSpec | None = None
    #: The query chain (:mod:`ragspine.chain`, run by ``Engine.search``; a bare
    #: :class:`Searcher` leaves them to it). ``rewrite``: also search the glossary and alias
    #: variants of the query and fuse them (``None``: ``RAGSPINE_REWRITE``).
    rewrite: bool | None = None
    #: Grade the answer and act when it is weak: drop filters (when allowed), rewrite, abstain.
    corrective: bool = False
    #: After rerank: ``mmr`` (drop near-duplicate passages), ``lost_in_middle`` (best at both ends).
    postprocess: list[PostStep] = Field(default_factory=list, max_length=len(POST_STEPS),
                                        json_schema_extra={"uniqueItems": True})

    #: Per library, filters an API key carries (its scope): never sent by a client, never in the
    #: schema, set by the server from the caller's key (:meth:`scoped`). ANDed with ``filters``
    #: in every channel of that library, and never dropped (not by the unfiltered fallback, not
    #: by the corrective loop). ``model_copy`` keeps it; a request rebuilt from its JSON does
    #: not, which is why the server sets it after validation, on the object it searches with.
    _scope: dict[str, list[dict[str, Any]]] = PrivateAttr(default_factory=dict)

    @property
    def scope(self) -> dict[str, list[dict[str, Any]]]:
        return self._scope

    def scoped(self, scope: dict[str, list[dict[str, Any]]]) -> SearchRequest:
        """A copy whose searches of each library in ``scope`` keep to its filters."""
        out = self.model_copy()
        out._scope = {lib: list(fs) for lib, fs in scope.items() if fs}
        return out

    @field_validator("query")
    @classmethod
    def _clean_query(cls, v: str) -> str:
        bad = _CONTROL.search(v)
        if bad:
            raise ValueError(f"query contains control characters (e.g. {bad.group()!r}); remove them")
        if "\ufffd" in v:
            raise ValueError("query is not valid UTF-8 (it contains U+FFFD replacement characters)")
        if not v.strip():
            raise ValueError("query is empty")
        return v

    @field_validator("postprocess")
    @classmethod
    def _steps_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"postprocess lists a step twice: {v}")
        return v


class Hit(Reply):
    """A ranked passage with its citation: document, 1-based page, bounding box in PDF points
    (x0, y0, x1, y1, origin top-left) and chunk."""

    library_id: str
    doc_id: str
    title: str
    page: int = Field(ge=1)
    bbox: list[float]
    chunk_id: str
    text: str
    text_source: Literal["pdf", "ocr"] = "pdf"
    #: Each channel's score (None where the channel did not find the passage) and the fused one.
    scores: dict[str, float | None]
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: The page's thumbnail, relative to the server.
    thumbnail_url: str | None = None
    #: With ``expand``: the graph paths that brought the hit in, every edge with its citations.
    via: list[dict[str, Any]] | None = None
    #: With ``rewrite``: indexes into the response's ``queries`` of the variants that found it.
    found_by: list[int] | None = None
    #: The numbers printed on the page where they are not its place (``page``): a report's
    #: 12th page printing "8" (the PDF's page labels, else its header or footer).
    printed_pages: list[int] = Field(default_factory=list)


class SearchResponse(Reply):
    hits: list[Hit]
    mode: str
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    filters_relaxed: bool = False
    #: The corrective loop found no context good enough and returned none (``corrective.reason``).
    abstained: bool = False
    timings_ms: dict[str, float] = Field(default_factory=dict)
    #: Channels left out on purpose, and why (``dense_skipped: query language zh ...``), and what of
    #: the question was not searched (``answer_instructions: ...``).
    notes: list[str] = Field(default_factory=list)
    #: The fusion that ranked the hits: per library its rule and weights (``rrf(k=60; bm25 1,
    #: bm25_page 4)``, ``convex(bm25 0.2, ...)``) and what pages borrowed (``document prior 0.3``),
    #: then how libraries were fused.
    fusion: str = ""
    #: The question as every channel searched it, where that is not ``query``: its instructions
    #: about the answer's form left out ("Please write the answer in int format."; the ``notes``
    #: quote them). What the web page marks in passages.
    searched: str | None = None
    #: With ``expand``: the start entity and the entities searched, per library.
    expansion: dict[str, Any] | None = None
    #: With ``rewrite``: the queries searched, the original first, each with its substitutions.
    queries: list[dict[str, Any]] | None = None
    #: With ``corrective``: the grades and actions taken, and why it abstained.
    corrective: dict[str, Any] | None = None
    #: With ``postprocess``: the steps applied.
    postprocess: list[str] | None = None
