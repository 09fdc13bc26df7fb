"""The REST API's request and response models: the one schema the server declares and the
client (:mod:`ragspine.client`) parses with.

Needs only pydantic, so ``ragspine[client]`` installs without the server's dependencies. The
server validates every response it sends against these models (``response_model``), so a
field added to a response without its model fails the server's tests, not a user's client.
"""

from ragspine.api.graph import (
    Entity,
    EntityList,
    GraphEdge,
    GraphNeighbor,
    GraphNeighbors,
    GraphPaths,
    RelationsUploaded,
)
from ragspine.api.names import DOC_ID_PATTERN, JOB_ID_PATTERN, LIBRARY_NAME_PATTERN
from ragspine.api.resources import (
    CreateLibrary,
    DenseAdded,
    Document,
    DocumentList,
    Gap,
    GapList,
    GapsCleared,
    Glossary,
    IngestResult,
    Job,
    LibraryCreated,
    LibraryList,
    LibrarySummary,
    Page,
    Passage,
    Problem,
    Restored,
    RestoredLibrary,
    UploadMetadata,
)
from ragspine.api.search import (
    MODES,
    POST_STEPS,
    ExpandSpec,
    Hit,
    Mode,
    PostStep,
    SearchRequest,
    SearchResponse,
)

__all__ = [
    "DOC_ID_PATTERN",
    "JOB_ID_PATTERN",
    "LIBRARY_NAME_PATTERN",
    "MODES",
    "POST_STEPS",
    "CreateLibrary",
    "DenseAdded",
    "Document",
    "DocumentList",
    "Entity",
    "EntityList",
    "ExpandSpec",
    "Gap",
    "GapList",
    "GapsCleared",
    "Glossary",
    "GraphEdge",
    "GraphNeighbor",
    "GraphNeighbors",
    "GraphPaths",
    "Hit",
    "IngestResult",
    "Job",
    "LibraryCreated",
    "LibraryList",
    "LibrarySummary",
    "Mode",
    "Page",
    "Passage",
    "PostStep",
    "Problem",
    "RelationsUploaded",
    "Restored",
    "RestoredLibrary",
    "SearchRequest",
    "SearchResponse",
    "UploadMetadata",
]
