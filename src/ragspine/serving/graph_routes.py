"""REST routes of the relation graph, mounted by :func:`ragspine.serving.app.create_app`.

Same auth as every other route (the caller's :class:`~ragspine.serving.auth.Principal` must be
allowed the library); errors are the graph's :mod:`ragspine.graph.errors`, answered by the
app's handlers as ``application/problem+json``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route signatures at runtime, and
# ``Who`` and ``Relation`` are local to the factory.
import asyncio
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Path, Query, UploadFile

from ragspine.api import EntityList, GraphNeighbors, GraphPaths, RelationsUploaded
from ragspine.api.names import ENTITY_TYPES
from ragspine.serving.auth import Auth, Principal
from ragspine.serving.openapi import typed
from ragspine.serving.params import Lib

if TYPE_CHECKING:
    from ragspine.engine import Engine


def graph_router(engine: "Engine", auth: Auth) -> APIRouter:
    """The ``/v1/libraries/{lib}/graph`` routes over ``engine``'s graph, behind ``auth``."""
    from ragspine.graph import (
        DEFAULT_MAX_HOPS,
        DEFAULT_NEIGHBORS,
        MAX_DEPTH,
        MAX_NEIGHBORS,
        MAX_PATH_HOPS,
        MAX_RELATIONS_BYTES,
    )
    from ragspine.graph.errors import RelationsTooLargeError

    router = APIRouter(prefix="/v1/libraries/{lib}/graph", tags=["graph"])
    Who = Annotated[Principal, Depends(auth)]
    Relation = Annotated[str | None, Query(description="relation(s), comma-separated: subsidiary_of, "
                                                      "peer_of, derived_from, mentions, co_occurs_with")]

    @router.post("/relations", **typed(RelationsUploaded))
    async def upload_relations(
        lib: Lib,
        who: Who,
        file: Annotated[UploadFile, File(description="CSV with the header source,relation,target,"
                                        "provenance (optional: source_type, target_type, source_aliases, "
                                        "target_aliases) or the same rows as JSON")],
        mode: Annotated[Literal["replace", "merge"], Query(description="replace the previous upload, "
                                                                     "or add to it")] = "replace",
    ) -> dict[str, Any]:
        """Declare relations between entities. The file is validated in full (unknown relation
        or type, self-loops, cycles in subsidiary_of / derived_from: 422 naming the row) before
        anything changes."""
        who.require_whole(lib, "declaring relations")
        data = await file.read(MAX_RELATIONS_BYTES + 1)
        if len(data) > MAX_RELATIONS_BYTES:
            raise RelationsTooLargeError(
                f"the relations file is larger than the limit of {MAX_RELATIONS_BYTES} bytes"
            )
        name = file.filename or "relations"

        def work() -> dict[str, Any]:
            engine.library(lib)
            return engine.graph.upload_relations(lib, data, filename=name, mode=mode)

        return await asyncio.to_thread(work)

    @router.get("/entities", **typed(EntityList))
    def entities(
        lib: Lib,
        who: Who,
        q: Annotated[str, Query(max_length=256, description="name or alias (any language); "
                                                            "empty lists every entity")] = "",
        type: Annotated[str | None, Query(description="only entities of this type",
                                          json_schema_extra={"enum": list(ENTITY_TYPES)})] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 20,
    ) -> dict[str, Any]:
        """Resolve a name or alias: exact matches first, then names starting with it, then
        names containing it."""
        who.require(lib)
        engine.library(lib)
        return {"entities": [n.to_json() for n in engine.graph.entities(lib, q, type=type, limit=limit,
                                                                      scope=who.scope(lib))]}

    # ``:path``: a name given as the id may hold '/' ("S&P/ASX 200"); the client encodes it as
    # %2F, and the server has decoded it before routing.
    @router.get("/entities/{entity_id:path}/neighbors", **typed(GraphNeighbors))
    def neighbors(
        lib: Lib,
        who: Who,
        entity_id: Annotated[str, Path(description="entity id (or a name or alias naming one entity)")],
        relation: Relation = None,
        depth: Annotated[int, Query(description=f"hops, 1 to {MAX_DEPTH}")] = 1,
        direction: Annotated[Literal["both", "out", "in"], Query()] = "both",
        limit: Annotated[int, Query(description=f"1 to {MAX_NEIGHBORS}")] = DEFAULT_NEIGHBORS,
    ) -> dict[str, Any]:
        """Entities within ``depth`` hops, nearest first, each with the path that reaches it
        and the citations of every edge."""
        who.require(lib)
        engine.library(lib)
        return engine.graph.neighbors(lib, entity_id, relation=relation, depth=depth, direction=direction,
                                      limit=limit, scope=who.scope(lib))

    @router.get("/paths", **typed(GraphPaths))
    def paths(
        lib: Lib,
        who: Who,
        from_: Annotated[str, Query(alias="from", description="entity id, name or alias")],
        to: Annotated[str, Query(description="entity id, name or alias")],
        max_hops: Annotated[int, Query(description=f"1 to {MAX_PATH_HOPS}")] = DEFAULT_MAX_HOPS,
        relation: Relation = None,
    ) -> dict[str, Any]:
        """A shortest path between two entities (edges in either direction), each edge with its
        citations; ``found`` is false when none is within ``max_hops``."""
        who.require(lib)
        engine.library(lib)
        return engine.graph.paths(lib, from_, to, max_hops=max_hops, relation=relation, scope=who.scope(lib))

    return router
