"""A document known as a whole: its title, issuer, period, kind, language and outline
(:func:`document_profile`), from what the PDF says about itself and what its kept pages show.

Where each field comes from, first found wins (``DocumentProfile.sources`` records which):

- ``user``: the caller's metadata (``title``, ``entity`` or ``issuer``, ``period``,
  ``fiscal_year``, ``doc_type``, ``language``);
- ``first_pages``: the cover of a filing ("FORM 10-K", "For the fiscal year ended December 31,
  2018", the company name above "(Exact name of registrant as specified in its charter)"), a
  title in the largest font of the first page, the kind named on the first pages;
- ``pdf_metadata``: the PDF's own title, unless it is a word processor's leftover
  ("Microsoft Word - draft3.docx", "untitled", a file name);
- ``filename``: names such as ``3M_2018_10K.pdf`` or ``PH_2016.06.08_Economy-Final.pdf``;
- ``running_header``: a line repeated in the top band of many pages (a company name there is
  taken as the issuer, any other as a last-resort title);
- ``outline``: the PDF's outline (bookmarks), or ``headings`` where it has none and the pages
  carry 10-K / 10-Q Items ("Item 7. Management's Discussion ...") as lines of their own;
- ``page_text``: the language, from the script and common words of the kept text.

Beside those fields, ``printed_pages``: the number printed on each kept page where it is not
the page's place in the file (:mod:`ragspine.indexing.page_labels`), so that "the table on page
8" finds the page that shows "8"; and ``captions``: the pages of each numbered figure and table
(:mod:`ragspine.indexing.captions`), so that "Figure 3" finds the page whose caption it is.

RESTRICTED: only the pages the policy kept are read (``kept_pages``; the open PDF is read for
those page numbers only), and an outline entry pointing at any other page is left out, so no
word of a dropped or held-back page reaches the profile, the manifest, or a hit's metadata.

Written by hand: no library reads a filing's cover or a report's kind; each rule is a regular
expression over a few pages, ~1 ms per document (``bench/profiles.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragspine.indexing.captions import caption_pages
from ragspine.indexing.page_labels import pdf_page_labels, printed_pages
from ragspine.indexing.pdf import PageContent, ParsedPDF
from ragspine.indexing.profile_pages import (
    COMPANY,
    MAX_ISSUER,
    MAX_TITLE,
    OutlineEntry,
    cover_pages,
    cover_text,
    filing_cover,
    item_outline,
    kind_named,
    language_of,
    largest_font_title,
    looks_like_slides,
    pdf_outline,
    running_header,
)

#: Bumped whenever a rule here changes what a profile holds: part of the content key, so the
#: next ingest of an unchanged PDF computes its profile again.
PROFILE_VERSION = 2

#: The kinds a document can be (``DocumentProfile.doc_type``); None where nothing says which.
DOC_TYPES = (
    "10-K", "10-Q", "8-K", "annual_report", "earnings_release", "statistical_bulletin",
    "research_paper", "slides", "manual", "brochure", "report",
)
#: Where a field came from (``DocumentProfile.sources`` values).
SOURCES = ("user", "pdf_metadata", "outline", "headings", "filename", "first_pages", "running_header", "page_text")
#: Words at most in a running header taken as another name of the issuer (``aliases``).
ALIAS_MAX_WORDS = 6


@dataclass(frozen=True)
class DocumentProfile:
    title: str | None = None
    issuer: str | None = None
    period: str | None = None  # "FY2018", "2018-Q3", "2016-06-08", "2018"
    fiscal_year: int | None = None
    doc_type: str | None = None  # one of DOC_TYPES
    language: str | None = None  # "en", "zh", "ja", "ko", "fr", "de", "es"
    outline: tuple[OutlineEntry, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    #: Other names of the issuer found in the document (the file name's, the cover's, a running
    #: header's), the issuer itself left out: "NETFLIX" beside "Netflix, Inc.".
    aliases: tuple[str, ...] = ()
    #: physical page -> the numbers printed on it, for the kept pages whose printed number is not
    #: their place in the file (a spread prints two).
    printed_pages: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: ``figure:3`` / ``table:1-1`` -> the kept pages whose caption lines begin with it.
    captions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title, "issuer": self.issuer, "period": self.period, "fiscal_year": self.fiscal_year,
            "doc_type": self.doc_type, "language": self.language,
            "outline": [e.to_json() for e in self.outline], "sources": dict(self.sources),
            "aliases": list(self.aliases),
            "printed_pages": {str(k): list(v) for k, v in sorted(self.printed_pages.items())},
            "captions": {k: list(v) for k, v in self.captions.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DocumentProfile:
        d = d or {}
        return cls(
            title=d.get("title"), issuer=d.get("issuer"), period=d.get("period"), fiscal_year=d.get("fiscal_year"),
            doc_type=d.get("doc_type"), language=d.get("language"),
            outline=tuple(OutlineEntry(str(e["title"]), int(e["level"]), int(e["page"]), int(e["end_page"]))
                          for e in d.get("outline") or ()),
            sources=dict(d.get("sources") or {}), aliases=tuple(str(a) for a in d.get("aliases") or ()),
            printed_pages=printed_of(d),
            captions={str(k): tuple(int(n) for n in v) for k, v in (d.get("captions") or {}).items()},
        )

    def derived_fields(self) -> dict[str, Any]:
        """The filterable fields this profile derived itself (not the caller's): ``issuer``,
        ``period`` (str), ``fiscal_year`` (int), ``doc_type``, ``language``."""
        out: dict[str, Any] = {}
        for k in ("issuer", "period", "fiscal_year", "doc_type", "language"):
            v = getattr(self, k)
            if v is not None and self.sources.get(k) != "user":
                out[k] = v
        return out


def printed_of(profile: Mapping[str, Any] | None) -> dict[int, tuple[int, ...]]:
    """A profile's (JSON) ``printed_pages`` as ``physical page -> printed numbers``; empty for a
    profile written before they were read."""
    raw = (profile or {}).get("printed_pages") or {}
    return {int(k): tuple(int(n) for n in v) for k, v in raw.items()}


# -- the caller's metadata ----------------------------------------------------------------------

def _user_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What the caller said, in profile terms (its values are not checked against the vocabulary:
    a ``doc_type`` outside it is the caller's own field, and the profile derives its own)."""
    out: dict[str, Any] = {}
    if isinstance(meta.get("title"), str) and meta["title"].strip():
        out["title"] = meta["title"].strip()
    for key in ("issuer", "entity"):
        if isinstance(meta.get(key), str) and meta[key].strip():
            out["issuer"] = meta[key].strip()
            break
    period = meta.get("period")
    if isinstance(period, bool):
        period = None
    if isinstance(period, int):
        out["period"] = str(period)
        if 1900 <= period <= 2100:
            out["fiscal_year"] = period
    elif isinstance(period, str) and period.strip():
        out["period"] = period.strip()
    fy = meta.get("fiscal_year")
    if isinstance(fy, str) and fy.strip().isdigit():
        fy = int(fy.strip())
    if isinstance(fy, int) and not isinstance(fy, bool):
        out["fiscal_year"] = fy
    dt = meta.get("doc_type")
    if isinstance(dt, str) and _vocab_type(dt) is not None:
        out["doc_type"] = _vocab_type(dt)
    if isinstance(meta.get("language"), str) and meta["language"].strip():
        out["language"] = meta["language"].strip()
    return out


def _vocab_type(value: str) -> str | None:
    v = re.sub(r"[\s_\-]+", "", value.lower())
    for t in DOC_TYPES:
        if re.sub(r"[\s_\-]+", "", t.lower()) == v:
            return t
    return None


# -- file name ----------------------------------------------------------------------------------

_FORM_TOKEN = re.compile(r"^(10-?k|10-?q|8-?k)$", re.I)
_YEAR_TOKEN = re.compile(r"^(19|20)\d\d$")
_ISO_DATE = re.compile(r"^((?:19|20)\d\d)[.\-](\d\d)[.\-](\d\d)$")
_US_DATE = re.compile(r"^(\d\d)[.\-](\d\d)[.\-]((?:19|20)\d\d)$")
_HEX_NAME = re.compile(r"^[0-9a-f]{16,}$", re.I)


def _from_filename(filename: str | None) -> dict[str, Any]:
    """Issuer, year, date and form of names like ``3M_2018_10K.pdf``: tokens between ``_``. An
    issuer is taken only with a form token (``PH_2016.06.08`` says nothing of who wrote it)."""
    if not filename:
        return {}
    tokens = [t for t in Path(filename).stem.split("_") if t]
    out: dict[str, Any] = {}
    first_marker = None
    for i, t in enumerate(tokens):
        if _FORM_TOKEN.match(t):
            form = t.upper().replace("-", "")
            out["doc_type"] = {"10K": "10-K", "10Q": "10-Q", "8K": "8-K"}[form]
        elif _YEAR_TOKEN.match(t):
            out.setdefault("fiscal_year", int(t))
        elif (m := _ISO_DATE.match(t)) and _valid_date(m.group(1), m.group(2), m.group(3)):
            out.setdefault("date", f"{m.group(1)}-{m.group(2)}-{m.group(3)}")
        elif (m := _US_DATE.match(t)) and _valid_date(m.group(3), m.group(1), m.group(2)):
            out.setdefault("date", f"{m.group(3)}-{m.group(1)}-{m.group(2)}")
        else:
            continue
        if first_marker is None:
            first_marker = i
    if "doc_type" in out and first_marker:
        who = tokens[:first_marker]
        if len(who) <= 3 and not any(_HEX_NAME.match(t) for t in who):
            out["issuer"] = " ".join(who)[:MAX_ISSUER]
    return out


def _valid_date(y: str, m: str, d: str) -> bool:
    return 1 <= int(m) <= 12 and 1 <= int(d) <= 31


# -- PDF metadata -------------------------------------------------------------------------------

_JUNK_TITLE = re.compile(
    r"^(microsoft (word|powerpoint|excel)\b|untitled|document\d*$|presentation\d*$|powerpoint presentation"
    r"|slide \d+|title$|none$|contents$|table of contents$|\d+$)|\.(docx?|pptx?|xlsx?|pdf|indd|qxd|rtf|txt)\s*$", re.I)


def _metadata_title(meta: Mapping[str, str]) -> str | None:
    t = " ".join(str(meta.get("title") or "").split())
    if len(t) < 4 or _JUNK_TITLE.search(t):
        return None
    if " " not in t and (len(t) > 20 or "_" in t):  # a file or job name, not a title
        return None
    return t[:MAX_TITLE]


# -- the profile ----------------------------------------------------------------------------------

def document_profile(parsed: ParsedPDF, filename: str | None, meta: Mapping[str, Any],
                     kept_pages: Sequence[PageContent]) -> DocumentProfile:
    """The profile of a document from its kept pages (after the RESTRICTED policy), its PDF
    metadata and outline, its file name and the caller's metadata ``meta`` (which wins).

    Plain text (``parsed.doc`` None) gets the caller's fields only: its title is the one given."""
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        if value is not None and value != "" and key not in fields:
            fields[key] = value
            sources[key] = source

    for k, v in _user_fields(meta).items():
        put(k, v, "user")
    if parsed.doc is None:
        return DocumentProfile(**fields, sources=sources)

    kept = sorted(kept_pages, key=lambda p: p.number)
    kept_numbers = {p.number for p in kept}
    last = parsed.doc.page_count
    cover = cover_pages(kept)
    filing = filing_cover(cover)
    named = _from_filename(filename)
    for k in ("issuer", "fiscal_year", "period", "doc_type"):
        put(k, filing.get(k), "first_pages")
    if looks_like_slides(kept):
        put("doc_type", "slides", "first_pages")
    put("doc_type", named.get("doc_type"), "filename")
    put("issuer", named.get("issuer"), "filename")
    put("period", named.get("date"), "filename")
    put("fiscal_year", named.get("fiscal_year"), "filename")
    if "period" not in fields and "fiscal_year" in fields:
        year = fields["fiscal_year"]
        kind = fields.get("doc_type")
        put("period", f"FY{year}" if kind in ("10-K", "annual_report") else str(year), sources["fiscal_year"])
    if "fiscal_year" not in fields and "period" in fields and re.match(r"^(19|20)\d\d", fields["period"]):
        put("fiscal_year", int(fields["period"][:4]), sources["period"])

    header = running_header(kept)
    names = [filing.get("issuer"), named.get("issuer")]
    if header is not None and COMPANY.search(header):
        put("issuer", header[:MAX_ISSUER], "running_header")
        if len(header.split()) <= ALIAS_MAX_WORDS:
            names.append(header[:MAX_ISSUER])
        header = None  # an organisation's name, not the document's title
    seen = {str(fields.get("issuer") or "").casefold()}
    aliases = []
    for n in names:
        if n and n.casefold() not in seen:
            seen.add(n.casefold())
            aliases.append(n)
    if fields.get("doc_type") in ("10-K", "10-Q", "8-K"):
        # A filing's cover title is the commission's name: the form, its filer and period say more.
        put("title", " ".join(x for x in (fields.get("issuer"), f"Form {fields['doc_type']}", fields.get("period"))
                              if x), sources["doc_type"])
    put("title", _metadata_title(parsed.pdf_metadata), "pdf_metadata")
    put("title", largest_font_title(cover), "first_pages")
    put("title", header, "running_header")
    put("doc_type", kind_named(cover_text(cover), fields.get("title")), "first_pages")
    put("language", language_of(kept), "page_text")

    outline = pdf_outline(parsed, kept_numbers, last)
    source = "outline"
    if not outline:
        outline, source = item_outline(kept, last), "headings"
    if outline:
        sources["outline"] = source
    labels = pdf_page_labels(parsed.doc, [p.number for p in kept])
    return DocumentProfile(**fields, outline=tuple(outline), sources=sources, aliases=tuple(aliases),
                           printed_pages={k: tuple(v) for k, v in printed_pages(kept, labels).items()},
                           captions={k: tuple(v) for k, v in caption_pages(kept).items()})


def sections_at(outline: Sequence[OutlineEntry], page: int) -> list[str]:
    """Titles of the outline entries whose range covers ``page``, outermost first (the innermost
    entry of each level: the section path of the page)."""
    path: dict[int, str] = {}
    for e in outline:
        if e.page <= page <= e.end_page:
            path[e.level] = e.title
            for deeper in [lvl for lvl in path if lvl > e.level]:
                del path[deeper]
    return [path[lvl] for lvl in sorted(path)]
