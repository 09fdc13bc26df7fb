"""What a caller says about a document: validated metadata, the filterable fields derived
from it (and from the document's profile, :func:`with_derived`), and the default document id."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragspine.errors import InvalidRequestError
from ragspine.policy import normalize_sensitivity
from ragspine.store.predicates import FIELD_NAME_RE, value_type

#: Payload keys the system writes; metadata fields of these names are not filterable metadata.
_RESERVED = {"doc_id", "page_sensitivity", "page", "kind", "state", "version"}


class DocumentMetadata(BaseModel):
    """What the caller says about a document. Unknown fields are kept as custom metadata."""

    model_config = ConfigDict(extra="allow")

    doc_id: str | None = None
    title: str | None = None
    entity: str | None = None
    period: str | int | None = None
    topic: str | None = None
    geography: str | None = None
    language: str | None = None
    sensitivity: str | None = None
    #: Per-page sensitivity overrides, 1-based page number → level (e.g. ``{"3": "RESTRICTED"}``).
    page_sensitivity: dict[int, str] = Field(default_factory=dict)

    @field_validator("page_sensitivity")
    @classmethod
    def _pages_positive(cls, v: dict[int, str]) -> dict[int, str]:
        bad = [k for k in v if k < 1]
        if bad:
            raise ValueError(f"page numbers are 1-based; got {bad}")
        return v

    def custom(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def fields(self) -> dict[str, Any]:
        """Filterable metadata: declared and custom fields that are set, minus system keys."""
        out: dict[str, Any] = {}
        for k, v in {**self.model_dump(exclude={"page_sensitivity"}), **self.custom()}.items():
            if v is None or k in _RESERVED:
                continue
            if not FIELD_NAME_RE.match(k):
                raise InvalidRequestError(
                    f"metadata field name {k!r} is not allowed: letters, digits and '_' only"
                )
            if isinstance(v, list):
                if not all(isinstance(x, (str, int, float, bool)) for x in v):
                    raise InvalidRequestError(f"metadata field '{k}' must hold scalars, got {v!r}")
            elif not isinstance(v, (str, int, float, bool)):
                raise InvalidRequestError(
                    f"metadata field '{k}' must be a string, number, boolean or list of them; "
                    f"got {type(v).__name__}"
                )
            out[k] = v
        if "sensitivity" in out:
            out["sensitivity"] = normalize_sensitivity(out["sensitivity"])
            if out["sensitivity"] is None:
                del out["sensitivity"]
        return out


#: The caller's field that stands for a derived one (the caller's ``entity`` is the issuer).
_SAME_AS = {"issuer": ("issuer", "entity")}


def with_derived(fields: Mapping[str, Any], derived: Mapping[str, Any],
                 field_types: Mapping[str, str]) -> dict[str, Any]:
    """``fields`` (the caller's filterable metadata) with the ``derived`` ones of the document's
    profile added where the caller set none of that name (nor its alias: ``entity`` for
    ``issuer``), and where the library's recorded type of the name is the derived value's (a
    derived ``period`` string never joins a library whose callers gave ``period`` as a number:
    the field would turn ``mixed`` and lose its range filters)."""
    out = dict(fields)
    for k, v in derived.items():
        if any(a in out for a in _SAME_AS.get(k, (k,))):
            continue
        if field_types.get(k, value_type(v)) != value_type(v):
            continue
        out[k] = v
    return out


def parse_metadata(raw: Mapping[str, Any] | DocumentMetadata | None) -> DocumentMetadata:
    if raw is None:
        return DocumentMetadata()
    if isinstance(raw, DocumentMetadata):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"metadata must be a JSON object, got {type(raw).__name__}")
    try:
        return DocumentMetadata.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InvalidRequestError(f"metadata field '{where}': {first['msg']}") from None


def default_doc_id(filename: str | None, digest: str) -> str:
    if filename:
        stem = Path(filename).stem
        slug = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).strip("-._")
        slug = slug[:100]
        if slug and slug[0].isalnum():
            return slug
    return f"doc-{digest[:12]}"
