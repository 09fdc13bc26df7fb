"""Path parameters as the OpenAPI document declares them.

The patterns and bounds are declared, not enforced here: the engine enforces them and its error
names the rule in words (``library name 'X' is not allowed: use 1-63 lowercase letters...``),
which is more use to a caller than a regular expression. The declaration lets a generated
client or a schema fuzzer send what the API accepts.
"""

from typing import Annotated

from fastapi import Path

from ragspine.api.names import (
    DOC_ID_PATTERN,
    GAP_ID_PATTERN,
    JOB_ID_PATTERN,
    LIBRARY_NAME_PATTERN,
)

Lib = Annotated[str, Path(description="library name", json_schema_extra={"pattern": LIBRARY_NAME_PATTERN})]
DocId = Annotated[str, Path(description="document id", json_schema_extra={"pattern": DOC_ID_PATTERN})]
PageNo = Annotated[int, Path(description="1-based page number", json_schema_extra={"minimum": 1})]
JobId = Annotated[str, Path(description="job id (32 hex digits)", json_schema_extra={"pattern": JOB_ID_PATTERN})]
GapId = Annotated[str, Path(description="gap id (a UUID)", json_schema_extra={"pattern": GAP_ID_PATTERN})]
