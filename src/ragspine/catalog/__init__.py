"""What a library is: its record (which model wrote each vector field, metadata field types,
BM25 length statistics), its document manifest (the active version of every document; writing
an entry is the commit of a replace), point ids, and the vector fields a library gets from the
models configured when it is created. Kept in the store itself; indexing writes it, retrieval
and the engine read it.
"""

from ragspine.catalog.fields import (
    LibraryModels,
    fields_from_record,
    first_stage_query,
    first_stage_vectors,
    identity,
    library_fields,
    library_models,
    pooled_vectors,
)
from ragspine.catalog.libraries import (
    AVGDL_DRIFT,
    BM25_MODEL,
    DENSE_CHUNK,
    LIBRARY_POINT,
    MODEL_FIELDS,
    PAGE_FDE,
    PAGE_FULL,
    PAGE_POOLED,
    LengthStats,
    Libraries,
    LibraryRecord,
    check_doc_id,
    check_library_name,
    doc_point,
    expected_encoders,
    point_id,
)

__all__ = [
    "AVGDL_DRIFT", "BM25_MODEL", "DENSE_CHUNK", "LIBRARY_POINT", "MODEL_FIELDS", "PAGE_FDE", "PAGE_FULL", "PAGE_POOLED",
    "LengthStats", "Libraries", "LibraryModels", "LibraryRecord", "check_doc_id", "check_library_name",
    "doc_point", "expected_encoders", "fields_from_record", "first_stage_query", "first_stage_vectors", "identity", "library_fields", "library_models", "point_id",
    "pooled_vectors",
]
