"""REST routes of the query chain's per-library state: the glossary and the knowledge-gap log.

Same auth as every other route (an API key sees the glossary and gaps of the libraries it
covers, as it sees their documents); errors are answered by the app's handlers as
``application/problem+json``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route signatures at runtime.
import asyncio
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, File, Query, UploadFile
from fastapi.responses import Response

from ragspine.api import GapList, GapsCleared, Glossary
from ragspine.serving.auth import Auth, Principal
from ragspine.serving.openapi import typed
from ragspine.serving.params import GapId, Lib

if TYPE_CHECKING:
    from ragspine.engine import Engine


def chain_router(engine: "Engine", auth: Auth) -> APIRouter:
    """``/v1/libraries/{lib}/glossary`` and ``/v1/libraries/{lib}/gaps`` over ``engine``."""
    from ragspine.chain.gaps import MAX_GAPS_LISTED
    from ragspine.chain.glossary import MAX_GLOSSARY_BYTES
    from ragspine.errors import OversizeError

    router = APIRouter(prefix="/v1/libraries/{lib}")
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/glossary", tags=["query chain"], **typed(Glossary))
    async def upload_glossary(
        lib: Lib,
        who: Who,
        file: Annotated[UploadFile, File(description="CSV with the header term,synonyms (optional kind: "
                                        "metric, entity, other); synonyms separated by '|'. Or JSON: "
                                        '[{"term", "synonyms": [...], "kind"}]')],
    ) -> dict[str, Any]:
        """Replace the library's glossary. Validated in full first: 422 naming every bad row
        (empty or one-character names, a term defined twice, a term without synonyms)."""
        who.require_whole(lib, "replacing the glossary")
        data = await file.read(MAX_GLOSSARY_BYTES + 1)
        if len(data) > MAX_GLOSSARY_BYTES:
            raise OversizeError(f"the glossary is larger than the limit of {MAX_GLOSSARY_BYTES} bytes")
        name = file.filename or "glossary"

        def work() -> dict[str, Any]:
            engine.library(lib)
            return engine.glossaries.upload(lib, data, name)

        return await asyncio.to_thread(work)

    @router.get("/glossary", tags=["query chain"], **typed(Glossary))
    def get_glossary(lib: Lib, who: Who) -> dict[str, Any]:
        """The library's glossary (404 when none was uploaded)."""
        who.require(lib)
        engine.library(lib)
        return engine.glossaries.get(lib)

    @router.delete("/glossary", status_code=204, tags=["query chain"])
    def delete_glossary(lib: Lib, who: Who) -> Response:
        who.require_whole(lib, "deleting the glossary")
        engine.library(lib)
        engine.glossaries.delete(lib)
        return Response(status_code=204)

    @router.get("/gaps", tags=["query chain"], **typed(GapList))
    def list_gaps(
        lib: Lib,
        who: Who,
        limit: Annotated[int, Query(ge=1, le=MAX_GAPS_LISTED)] = 100,
    ) -> dict[str, Any]:
        """Queries the library could not answer (no hit, or the corrective loop abstained),
        most asked first: ``{gap_id, query (normalised), filters, hit_count, first_seen,
        last_seen, reason}``. A key with a filter sees the gaps searched through that filter."""
        who.require(lib)
        engine.library(lib)
        return {"gaps": engine.gaps.list(lib, limit, who.scope(lib))}

    @router.delete("/gaps/{gap_id}", status_code=204, tags=["query chain"])
    def delete_gap(lib: Lib, gap_id: GapId, who: Who) -> Response:
        """Clear one gap (e.g. once a document that answers it is indexed)."""
        who.require(lib)
        engine.library(lib)
        engine.gaps.delete(lib, gap_id, who.scope(lib))
        return Response(status_code=204)

    @router.delete("/gaps", tags=["query chain"], **typed(GapsCleared))
    def clear_gaps(lib: Lib, who: Who) -> dict[str, int]:
        """Clear every gap of the library (a key with a filter: those searched through it);
        says how many there were."""
        who.require(lib)
        engine.library(lib)
        return {"deleted": engine.gaps.clear(lib, who.scope(lib))}

    return router
