"""Hit assembly: the citations of the ranked pages (document, page, bbox, passage) and the
RESTRICTED exit filter. It takes the fused pages and their candidates, nothing else of a search."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragspine.config import Settings
from ragspine.policy import CLASSIFICATION, point_restricted
from ragspine.retrieval.fusion import Cand
from ragspine.retrieval.request import PageKey, SearchHit, SearchRequest
from ragspine.scoring.query_terms import query_tokens
from ragspine.scoring.tokenizer import tokenize
from ragspine.store.base import Store

if TYPE_CHECKING:
    from ragspine.retrieval.lexical import LexicalIndex

#: The score keys every hit carries (None where that channel did not find the page).
SCORE_KEYS = ("bm25", "bm25_page", "dense", "visual", "document", "fused", "rerank")


def best_passage(query_tokens: list[str], page_payload: dict[str, Any]) -> dict[str, Any]:
    """The passage of a page sharing the most query tokens (first one on ties), as a chunk
    payload. Used when a page was found by the page channel only."""
    text: str = page_payload.get("text", "")
    wanted = Counter(query_tokens)
    best, best_score = None, -1
    for ref in page_payload.get("chunks", []):
        toks = Counter(tokenize(text[ref["start"] : ref["end"]]))
        score = sum(min(c, toks[t]) for t, c in wanted.items())
        if score > best_score:
            best, best_score = ref, score
    base = {k: page_payload[k] for k in ("doc_id", "title", "meta", "version", "page", "sensitivity", CLASSIFICATION)
            if k in page_payload}
    if best is None:
        return {**base, "chunk_id": f"{page_payload['doc_id']}/p{page_payload['page']}", "text": text,
                "bbox": [0.0, 0.0, page_payload.get("width", 0.0), page_payload.get("height", 0.0)]}
    return {**base, "chunk_id": best["chunk_id"], "text": text[best["start"] : best["end"]], "bbox": best["bbox"],
            "text_source": best.get("text_source", "pdf")}



class HitAssembler:
    """Ranked pages in, cited hits out: one retrieve per library of the passage (or page) points
    of just these pages (from the lexical index's payload cache when there is one)."""

    def __init__(self, settings: Settings, store: Store, lexical: LexicalIndex | None) -> None:
        self.settings = settings
        self.store = store
        self.lexical = lexical

    def hits(self, req: SearchRequest, keys: list[PageKey], cands: dict[PageKey, Cand],
             timings: dict[str, float], also: Sequence[str] = ()) -> list[SearchHit]:
        """Citations for the ranked pages: one retrieve per library of the passage (or page)
        points of just these pages. A page found whole cites its passage sharing the most of
        the query's tokens and ``also`` (the tokens the search added: line items, corrections)."""
        t = time.perf_counter()
        qtoks: list[str] | None = None
        want: dict[str, list[str]] = {}
        for key in keys:
            c = cands[key]
            want.setdefault(key[0], []).append(c.chunk_id or c.page_id or "")
        payloads: dict[tuple[str, str], dict[str, Any]] = {}
        for lib, ids in want.items():
            ids = [i for i in ids if i]
            if self.lexical is not None:  # cached: a point's payload never changes once live
                got = self.lexical.payloads(lib, ids)
            else:
                got = {r.id: r.payload for r in self.store.retrieve(lib, ids)}
            for i, p in got.items():
                payloads[(lib, i)] = p
        out: list[SearchHit] = []
        for key in keys:
            c = cands[key]
            p = payloads.get((key[0], c.chunk_id or c.page_id or ""))
            if p is None:  # deleted between ranking and fetching: not a hit any more
                continue
            if c.chunk_id is None:
                if qtoks is None:
                    qtoks = [*query_tokens(req.query, drop_question_words=self.settings.bm25_drop_question_words),
                             *also]
                p = best_passage(qtoks, p)
            if point_restricted(p):  # defence in depth: never leaves
                continue
            out.append(
                SearchHit(
                    library_id=key[0],
                    doc_id=p["doc_id"],
                    title=p.get("title", p["doc_id"]),
                    page=int(p["page"]),
                    bbox=[float(x) for x in p["bbox"]],
                    chunk_id=p["chunk_id"],
                    text=p["text"],
                    scores={k: c.scores.get(k) for k in SCORE_KEYS},
                    version=int(p["version"]),
                    metadata=dict(p.get("meta") or {}),
                    classification=p.get(CLASSIFICATION),
                    text_source=p.get("text_source", "pdf"),
                )
            )
        timings["fetch"] = round((time.perf_counter() - t) * 1000, 3)
        return out
