"""Errors of the relation graph. Each derives from :class:`GraphError` and from the
:mod:`ragspine.errors` class whose HTTP status it answers with, so the REST layer maps it to a
clear ``application/problem+json`` 4xx."""

from __future__ import annotations

from ragspine.errors import InvalidRequestError, NotFoundError, OversizeError, RagspineError


class GraphError(RagspineError):
    """Base class of every error the relation graph raises on purpose."""


class UnknownEntityError(GraphError, NotFoundError):
    type = "unknown-entity"
    title = "Unknown entity"


class AmbiguousEntityError(GraphError, InvalidRequestError):
    type = "ambiguous-entity"
    title = "Ambiguous entity"


class UnknownRelationError(GraphError, InvalidRequestError):
    type = "unknown-relation"
    title = "Unknown relation"


class DepthOutOfRangeError(GraphError, InvalidRequestError):
    type = "depth-out-of-range"
    title = "Depth out of range"


class RelationsFileError(GraphError, InvalidRequestError):
    """A relations file that cannot be read or does not hold valid rows."""

    type = "invalid-relations"
    title = "Invalid relations file"


class RelationCycleError(RelationsFileError):
    type = "relation-cycle"
    title = "Relations form a cycle"


class SelfLoopError(RelationsFileError):
    type = "relation-self-loop"
    title = "Relation from an entity to itself"


class RelationsTooLargeError(GraphError, OversizeError):
    title = "Relations file too large"
