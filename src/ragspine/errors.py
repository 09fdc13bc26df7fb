"""One exception tree for ragspine.

Every error a user can cause derives from :class:`RagspineError`. Each class carries a stable
problem ``type`` (used in ``application/problem+json`` answers) and the HTTP status the API maps
it to, so the REST layer never has to guess and never answers a bare 500 for bad input.
Messages say what was received, what is allowed, and how to fix it.
"""

from __future__ import annotations


class RagspineError(Exception):
    """Base class of every error ragspine raises on purpose."""

    status: int = 500
    type: str = "internal-error"
    title: str = "Internal error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# -- input documents ---------------------------------------------------------------------------


class DocumentError(RagspineError):
    """The uploaded file cannot be indexed."""

    status = 422
    type = "invalid-document"
    title = "The document cannot be indexed"


class NotAPDFError(DocumentError):
    status = 415
    type = "not-a-pdf"
    title = "Not a PDF"


class CorruptPDFError(DocumentError):
    type = "corrupt-pdf"
    title = "Corrupt PDF"


class EncryptedPDFError(DocumentError):
    type = "encrypted-pdf"
    title = "Encrypted PDF"


class EmptyPDFError(DocumentError):
    type = "empty-pdf"
    title = "Empty PDF"


class NoTextError(DocumentError):
    """Nothing of the document could be made searchable: no text layer, OCR found no text (or
    is off), and the library has no page vectors to search the images by."""

    type = "no-text"
    title = "No text to index"


class OversizeError(DocumentError):
    status = 413
    type = "too-large"
    title = "Too large"


# -- requests ----------------------------------------------------------------------------------


class InvalidRequestError(RagspineError):
    status = 422
    type = "invalid-request"
    title = "Invalid request"


class FilterError(InvalidRequestError):
    """A metadata predicate that cannot be applied. Never turned into 'no filter'."""

    type = "invalid-filter"
    title = "Invalid filter"


class NotFoundError(RagspineError):
    status = 404
    type = "not-found"
    title = "Not found"


class LibraryNotFoundError(NotFoundError):
    type = "unknown-library"
    title = "Unknown library"


class DocumentNotFoundError(NotFoundError):
    type = "unknown-document"
    title = "Unknown document"


class ConflictError(RagspineError):
    status = 409
    type = "conflict"
    title = "Conflict"


class LibraryBusyError(ConflictError):
    """Another replica holds the library's writer lease for longer than a writer waits."""

    type = "library-busy"
    title = "The library is being written by another replica"


class LeaseLostError(ConflictError):
    """This replica's writer lease ran out (or was taken over) before its write committed;
    nothing of that write became visible."""

    type = "writer-lease-lost"
    title = "The write lost its library lease"


class OcrClaimLostError(ConflictError):
    """This replica's claim on a document's OCR ran out (or was taken over by another replica)
    while it read the pages: it stops, and the claim's new holder finishes the OCR."""

    type = "ocr-claim-lost"
    title = "The OCR lost its claim"


class ModelMismatchError(ConflictError):
    """A library was indexed with another model than the one configured now (docs/invariants.md, 5)."""

    type = "model-mismatch"
    title = "Library was indexed with another model"


class StoreError(RagspineError):
    status = 503
    type = "store-unavailable"
    title = "Store unavailable"


class DataDirInUseError(StoreError):
    """Another process holds the embedded store's data dir (see ``ragspine.store.edge``)."""

    type = "data-dir-in-use"
    title = "Data dir in use"


class ServerStoppingError(RagspineError):
    """The server is stopping: an ingest that had not finished within the drain time was
    stopped before its version went live (nothing of it was committed)."""

    status = 503
    type = "server-stopping"
    title = "Server stopping"


class ServiceUnavailableError(RagspineError):
    """A model the request needs is configured but not available now (failed to load, or its
    deployment is down); nothing was changed, the request can be retried."""

    status = 503
    type = "model-unavailable"
    title = "Model unavailable"


class MissingExtraError(RagspineError):
    """An optional dependency is not installed; the message names the extra to install."""

    status = 501
    type = "missing-extra"
    title = "Optional dependency missing"

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed: "
            f"pip install 'ragspine[{extra}]'"
        )
