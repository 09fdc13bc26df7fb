"""The pages a question names by number, as pages of a library's documents: by their own
number, or by the number of a figure or table on them.

"What does the chart on page 14 show?", "the table on page 8", "slide 31", "the last page": the
question's numbers (:func:`ragspine.scoring.page_refs.page_refs`) name, in each document, the
page at that place in the file and the pages that print that number (a report's page 8 is often
its 12th page: :mod:`ragspine.indexing.page_labels`, read at ingest into the profile's
``printed_pages``). A number counted from the end (-1 the last page) is resolved against the
document's length. "Figure 3" and "Table 1-1" (:func:`ragspine.scoring.page_refs.figure_refs`)
name the pages whose caption lines begin with them (the profile's ``captions``). Only pages the
document kept are named: a RESTRICTED page was never indexed.

Page ranking uses the named pages as a prior (:func:`ragspine.scoring.priors.named_pages`) on
the pages the other channels found: on a shelf, "page 14" names page 14 of every document, and
the question's words decide which of them is the one. A question that names no page is ranked
exactly as without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragspine.catalog import Libraries
from ragspine.retrieval.channels.entries import EntryIndex


@dataclass(frozen=True)
class Numbering:
    """How one document's pages are numbered: the kept pages, the file's length, and the
    pages each printed number is on."""

    kept: frozenset[int]
    total: int
    printed: Mapping[int, tuple[int, ...]]  # printed number -> physical pages
    captions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # figure:3 -> pages
    by_page: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # physical page -> printed numbers

    def named(self, refs: frozenset[int], figures: frozenset[str] = frozenset()) -> frozenset[int]:
        """The kept pages ``refs`` names, by place (from the end where negative) or by print,
        and the pages of the figures and tables ``figures`` names."""
        out = set()
        for n in refs:
            place = n if n > 0 else self.total + 1 + n
            if place in self.kept:
                out.add(place)
            out.update(self.printed.get(n, ()))
        for key in figures:
            out.update(self.captions.get(key, ()))
        return frozenset(out & self.kept)

    def has_any(self, refs: frozenset[int]) -> bool:
        """Whether the file has any page ``refs`` names: by place (a page dropped at index build
        is still in the file) or by a printed number."""
        return any((0 < n <= self.total) or (n < 0 and -n <= self.total) or n in self.printed for n in refs)


def numbering(entry: Mapping[str, Any]) -> Numbering:
    """How a manifest entry's document numbers its pages."""
    kept = frozenset(int(n) for n in entry.get("page_numbers") or ())
    printed: dict[int, list[int]] = {}
    by_page: dict[int, tuple[int, ...]] = {}
    # The profile's JSON (ragspine.indexing.profile): {"12": [8]}, physical page -> printed numbers.
    for page, numbers in ((entry.get("profile") or {}).get("printed_pages") or {}).items():
        by_page[int(page)] = tuple(int(n) for n in numbers)
        for n in numbers:
            printed.setdefault(int(n), []).append(int(page))
    captions = {str(k): tuple(int(p) for p in v)
                for k, v in ((entry.get("profile") or {}).get("captions") or {}).items()}
    return Numbering(kept, int(entry.get("pages_total") or max(kept, default=0)),
                     {n: tuple(sorted(p)) for n, p in printed.items()}, captions, by_page)


class PageNumbers:
    """``pages(library, refs, active, figures)``: ``doc_id -> the kept pages refs and figures
    name`` for the library's documents that have any."""

    name = "page_numbers"

    def __init__(self, libraries: Libraries) -> None:
        self._docs = EntryIndex(libraries, numbering)

    def pages(self, library: str, refs: frozenset[int], active: Mapping[str, int],
              figures: frozenset[str] = frozenset()) -> dict[str, frozenset[int]]:
        if not (refs or figures) or not active:
            return {}
        out = {d: n.named(refs, figures) for d, n in self._docs.get(library, active).items()}
        return {d: p for d, p in out.items() if p}

    def named_in(self, library: str, active: Mapping[str, int], doc_id: str, refs: frozenset[int]) -> frozenset[int]:
        """The kept pages of ``doc_id`` that ``refs`` names (:meth:`Numbering.named`)."""
        n = self._docs.get(library, active).get(doc_id)
        return n.named(refs) if n is not None else frozenset()

    def has_any(self, library: str, active: Mapping[str, int], doc_id: str, refs: frozenset[int]) -> bool | None:
        """Whether ``doc_id`` has any of the pages ``refs`` names (:meth:`Numbering.has_any`);
        None where the library does not know the document."""
        n = self._docs.get(library, active).get(doc_id)
        return None if n is None else n.has_any(refs)

    def printed(self, library: str, active: Mapping[str, int], doc_id: str, page: int) -> list[int]:
        """The numbers printed on a page, where they are not its place (a hit's citation shows
        them: the question's "page 8" is the hit's page 12)."""
        n = self._docs.get(library, active).get(doc_id)
        return list(n.by_page.get(page, ())) if n is not None else []
