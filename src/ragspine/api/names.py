"""The shapes of names the API accepts, as regular expressions the OpenAPI document declares
and the server enforces (``ragspine.catalog.libraries`` checks them with these patterns)."""

#: A library: 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit. The
#: leading character keeps internal collections (``_jobs``) out of every library route.
LIBRARY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
#: A document id: 1-128 letters, digits, '.', '-' or '_', starting with a letter or digit (and
#: never containing '..': the server refuses that too; a regex without look-ahead cannot say it).
DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: A metadata field name (a custom field of an upload, a filter's field).
FIELD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
#: A query: no control characters (C0 but tab/newline/CR, DEL, C1), no U+FFFD, and at least
#: one character that is not white space.
CONTROL = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\ufffd"
QUERY_PATTERN = f"^[^{CONTROL}]*[^\\s{CONTROL}][^{CONTROL}]*$"
#: The entity types of the relation graph (``ragspine.graph``).
ENTITY_TYPES = ("company", "subsidiary", "segment", "metric", "period", "geography")
#: A job id: 32 lowercase hex digits.
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
#: A knowledge-gap id (``ragspine.chain.gaps``): a UUID.
GAP_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
