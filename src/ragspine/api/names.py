"""The shapes of names the API accepts, as regular expressions the OpenAPI document declares
and the server enforces (``ragspine.catalog.libraries`` checks them with these patterns)."""

#: A library: 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit. The
#: leading character keeps internal collections (``_jobs``) out of every library route.
LIBRARY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
#: A document id: 1-128 letters, digits, '.', '-' or '_', starting with a letter or digit (and
#: never containing '..': the server refuses that too; a regex without look-ahead cannot say it).
DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: A job id: 32 lowercase hex digits.
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
#: A knowledge-gap id (``ragspine.chain.gaps``): a UUID.
GAP_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
