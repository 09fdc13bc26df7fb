"""What a document's pages say about it as a whole: the readers behind
:func:`ragspine.indexing.profile.document_profile` (a filing's cover, the first page's title, the
kind named on the first pages, slides, running headers, the language, the outline). Each reads
only the pages it is given: the pages the RESTRICTED policy kept."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragspine.indexing.pdf import PageContent, ParsedPDF

#: Pages read as "the first pages" (the first kept pages, among the first ``COVER_WITHIN``).
COVER_PAGES = 3
COVER_WITHIN = 5
#: Top band (share of the page height) where running headers are looked for.
HEADER_BAND = 0.1
#: A running header repeats on at least this share of the kept pages (and on 3 of them).
HEADER_SHARE = 0.3
#: Outline entries kept in a profile (a manifest entry stays small).
MAX_OUTLINE = 400
#: Longest title, issuer and outline title kept, in characters.
MAX_TITLE = 200
MAX_ISSUER = 100
#: Characters of kept text read to tell the language.
LANGUAGE_SAMPLE = 20_000



@dataclass(frozen=True)
class OutlineEntry:
    title: str
    level: int  # 1 = top
    page: int  # 1-based physical page where the section starts
    end_page: int  # last page of the section (inclusive)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "level": self.level, "page": self.page, "end_page": self.end_page}


# -- outline ------------------------------------------------------------------------------------

def pdf_outline(parsed: ParsedPDF, kept: set[int], last_page: int) -> list[OutlineEntry]:
    """The PDF's outline with page ranges; entries on pages not kept are left out (their
    titles may name what a RESTRICTED page holds)."""
    if parsed.doc is None:
        return []
    try:
        toc = parsed.doc.get_toc(simple=True)
    except Exception:  # a damaged outline is no reason to refuse a readable PDF
        return []
    rows = [(int(lvl), " ".join(str(title).split()), int(page)) for lvl, title, page, *_ in toc]
    rows = [r for r in rows if r[1] and r[2] >= 1]
    out: list[OutlineEntry] = []
    for i, (lvl, title, page) in enumerate(rows):
        end = last_page
        for lvl2, _t, page2 in rows[i + 1:]:
            if lvl2 <= lvl:
                end = max(page, page2 - 1) if page2 > page else page
                break
        if page in kept:
            out.append(OutlineEntry(title[:MAX_TITLE], lvl, page, end))
    return out[:MAX_OUTLINE]


_ITEM_LINE = re.compile(r"^\s*(item\s+(\d{1,2}[a-c]?)\s*[.:\-—–]?\s*(.*))$", re.I)
_PART_LINE = re.compile(r"^\s*(part\s+(i{1,3}|iv))\s*\.?\s*$", re.I)


def item_outline(kept_pages: Sequence[PageContent], last_page: int) -> list[OutlineEntry]:
    """10-K / 10-Q Items and Parts that stand as lines of their own, where the PDF has no outline.
    A page listing four Items or more is a table of contents and is skipped; an Item seen again
    later (a running header, a cross-reference) keeps its first place."""
    found: list[tuple[int, int, str, str]] = []  # (page, level, key, title)
    seen: set[str] = set()
    for p in kept_pages:
        hits = []
        for text, _bbox in p.lines:
            if text.lstrip()[:4].lower() not in ("item", "part"):
                continue
            t = " ".join(text.split())
            if len(t) > 120:
                continue
            if m := _ITEM_LINE.match(t):
                hits.append((2, "item " + m.group(2).lower(), t))
            elif m := _PART_LINE.match(t):
                hits.append((1, "part " + m.group(2).lower(), t.upper()))
        if sum(1 for h in hits if h[0] == 2) >= 4:
            continue
        for level, key, title in hits:
            if key not in seen:
                seen.add(key)
                found.append((p.number, level, key, title))
    if sum(1 for f in found if f[1] == 2) < 3:
        return []
    out = []
    for i, (page, level, _key, title) in enumerate(found):
        end = last_page
        for page2, level2, _k, _t in found[i + 1:]:
            if level2 <= level:
                end = max(page, page2 - 1)
                break
        out.append(OutlineEntry(title[:MAX_TITLE], level, page, end))
    return out[:MAX_OUTLINE]


# -- first pages ----------------------------------------------------------------------------------

_FORMS = (("10-K", re.compile(r"\bform\s+10-?k\b", re.I)), ("10-Q", re.compile(r"\bform\s+10-?q\b", re.I)),
          ("8-K", re.compile(r"\bform\s+8-?k\b", re.I)))
_MONTHS = {m: i + 1 for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
_YEAR_ENDED = re.compile(
    r"(?:fiscal\s+)?year\s+ended\s*:?\s*([a-z]+)\.?\s+\d{1,2}\s*,?\s*((?:19|20)\d\d)", re.I)
_QUARTER_ENDED = re.compile(
    r"quarterly\s+period\s+ended\s*:?\s*([a-z]+)\.?\s+\d{1,2}\s*,?\s*((?:19|20)\d\d)", re.I)
_FILE_NUMBER = re.compile(r"commission\s+file\s+(number|no)", re.I)
_REGISTRANT = re.compile(r"exact\s+name\s+of\s+(the\s+)?registrant", re.I)
_NOT_A_NAME = re.compile(r"commission\s+file|^\(|^\d[\d\s\-]*$|^form\b|securities and exchange", re.I)
_KINDS = (
    ("earnings_release", re.compile(
        r"earnings\s+release|(reports|announces)\s.{0,60}\b(quarter|year|annual)\b.{0,40}\bresults", re.I | re.S)),
    ("annual_report", re.compile(r"\bannual\s+report\b|年度报告|年报", re.I)),
    ("statistical_bulletin", re.compile(r"\bstatistical\s+bulletin\b|\bbulletin\b|统计公报", re.I)),
    ("manual", re.compile(
        r"\b(user|owner'?s|instruction|operating|reference)\s+(manual|guide)\b|\bhandbook\b|\bguidebook\b"
        r"|\bmanual\b|quick\s+start\s+guide|使用手册|说明书", re.I)),
    ("brochure", re.compile(r"\bbrochure\b|\bprospectus\b", re.I)),
    ("report", re.compile(r"\breport\b|\bsurvey\b|\bfindings\b|报告", re.I)),
)
_BYLINE = re.compile(r"^(by|authors?)\b|^arxiv:", re.I)
_PAPER = re.compile(r"^\s*abstract\b|\babstract\s*[—:.\-]|\barxiv:", re.I | re.M)
COMPANY = re.compile(
    r"\b(inc|incorporated|corp|corporation|company|co|ltd|limited|plc|llc|group|holdings|n\.?v|s\.?a|ag|se"
    r"|center|centre|institute|university|association|foundation|council|bureau|agency|commission)\b\.?",
    re.I)


def cover_pages(kept_pages: Sequence[PageContent]) -> list[PageContent]:
    return [p for p in kept_pages if p.number <= COVER_WITHIN][:COVER_PAGES]


def cover_text(cover: Sequence[PageContent]) -> str:
    return "\n".join(t for p in cover for t, _b in p.lines)


def filing_cover(cover: Sequence[PageContent]) -> dict[str, Any]:
    """Form, fiscal year or quarter, and registrant of an SEC filing's cover."""
    text = cover_text(cover)
    out: dict[str, Any] = {}
    for form, rx in _FORMS:
        if rx.search(text):
            out["doc_type"] = form
            break
    if m := _QUARTER_ENDED.search(text):
        month = _MONTHS.get(m.group(1).lower())
        if month:
            out["period"] = f"{m.group(2)}-Q{(month - 1) // 3 + 1}"
            out["fiscal_year"] = int(m.group(2))
    elif (m := _YEAR_ENDED.search(text)) and m.group(1).lower() in _MONTHS:
        out["fiscal_year"] = int(m.group(2))
        out["period"] = f"FY{m.group(2)}"
    for p in cover:
        lines = [" ".join(t.split()) for t, _b in p.lines]
        for i, t in enumerate(lines):
            if _REGISTRANT.search(t):
                for prev in reversed(lines[max(0, i - 3):i]):
                    if prev and not _NOT_A_NAME.search(prev) and not _REGISTRANT.search(prev):
                        out["issuer"] = prev[:MAX_ISSUER]
                        break
                break
        if "issuer" in out:
            break
    if "issuer" not in out and "doc_type" in out:
        # Covers without the registrant caption (3M's) name the filer right below the commission
        # file number, in capitals.
        lines = [" ".join(t.split()) for p in cover for t, _b in p.lines]
        for i, t in enumerate(lines):
            if _FILE_NUMBER.search(t):
                for nxt in lines[i + 1:i + 3]:
                    if (nxt and len(nxt) <= 60 and not _NOT_A_NAME.search(nxt) and re.search(r"[A-Za-z]", nxt)
                            and (nxt.isupper() or COMPANY.search(nxt))):
                        out["issuer"] = nxt
                        break
                break
    return out


def largest_font_title(cover: Sequence[PageContent]) -> str | None:
    """The lines of the first page set in its largest type (when it stands out from the body
    text), in the upper two thirds of the page: a report's or paper's title. A line's height
    stands for its font size: the parser's lines carry no sizes, and reading the page's spans
    again cost up to 130 ms on a dense cover (bench/profiles.py), as much as parsing it."""
    if not cover or cover[0].number != 1:
        return None
    page = cover[0]
    lines: list[tuple[float, float, str]] = []  # (height, top, text)
    sizes: list[float] = []
    for text, (x0, y0, x1, y1) in page.lines:
        t = " ".join(text.split())
        if not t or x1 - x0 < y1 - y0:  # vertical (an arXiv stamp)
            continue
        sizes.extend([y1 - y0] * len(t))
        lines.append((y1 - y0, y0, t))
    if not lines:
        return None
    body = statistics.median(sizes)
    top = max(h for h, _y, _t in lines)
    if top < 1.25 * body:
        return None
    picked = [t for h, y, t in sorted(lines, key=lambda x: x[1])
              if h >= 0.9 * top and y < page.height * 0.67 and re.search(r"[^\W\d_]", t) and not _BYLINE.match(t)]
    title = " ".join(picked[:3]).strip()
    return title[:MAX_TITLE] if len(title) >= 4 else None


def kind_named(cover_text: str, title: str | None) -> str | None:
    hay = f"{title or ''}\n{cover_text}"
    if _PAPER.search(cover_text):
        return "research_paper"
    for kind, rx in _KINDS:
        if rx.search(hay):
            return kind
    return None


def looks_like_slides(kept_pages: Sequence[PageContent]) -> bool:
    """Most pages landscape and little text on them: a slide deck."""
    if len(kept_pages) < 3:
        return False
    wide = sum(1 for p in kept_pages if p.width > 1.1 * p.height)
    chars = sum(len(p.text) for p in kept_pages) / len(kept_pages)
    return wide >= 0.7 * len(kept_pages) and chars < 900


# -- running headers ------------------------------------------------------------------------------

def running_header(kept_pages: Sequence[PageContent]) -> str | None:
    """The line found in the top band of most pages (digits aside: page numbers, dates)."""
    if len(kept_pages) < 3:
        return None
    count: Counter[str] = Counter()
    shown: dict[str, str] = {}
    for p in kept_pages:
        seen = set()
        for text, bbox in p.lines:
            if bbox[3] > p.height * HEADER_BAND:
                continue
            t = " ".join(text.split())
            key = re.sub(r"[\d\W_]+", " ", t.lower()).strip()
            if len(key) < 3 or key in seen:
                continue
            seen.add(key)
            count[key] += 1
            shown.setdefault(key, re.sub(r"[\s|·•\-–—]*\d+\s*$", "", t).strip())
    if not count:
        return None
    key, n = count.most_common(1)[0]
    if n < max(3, HEADER_SHARE * len(kept_pages)):
        return None
    return shown[key][:MAX_TITLE] or None


# -- language -------------------------------------------------------------------------------------

_STOPWORDS = {
    "en": {"the", "and", "of", "to", "in", "is", "for", "that", "with", "on"},
    "fr": {"le", "la", "les", "et", "des", "du", "une", "est", "pour", "dans"},
    "de": {"der", "die", "und", "das", "ist", "nicht", "mit", "den", "von", "zu"},
    "es": {"el", "los", "las", "y", "del", "una", "por", "para", "con", "es"},
}


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_LETTER = re.compile(r"[^\W\d_]")


def language_of(kept_pages: Sequence[PageContent]) -> str | None:
    """``zh`` / ``ja`` / ``ko`` when CJK script is a fifth of the letters of the kept text, else the
    European language whose common words it uses most (None with too little text to tell)."""
    sample = ""
    for p in kept_pages:
        sample += p.text + "\n"
        if len(sample) >= LANGUAGE_SAMPLE:
            break
    sample = sample[:LANGUAGE_SAMPLE]
    cjk = len(_CJK.findall(sample))
    kana = len(_KANA.findall(sample))
    hangul = len(_HANGUL.findall(sample))
    letters = len(_LETTER.findall(sample))
    east = cjk + kana + hangul
    if letters and east >= 0.2 * letters:
        if hangul > cjk + kana:
            return "ko"
        return "ja" if kana >= 0.1 * east else "zh"
    words = Counter(re.findall(r"[a-zà-ÿ]+", sample.lower()))
    scores = {lang: sum(words[w] for w in ws) for lang, ws in _STOPWORDS.items()}
    best = max(scores, key=lambda k: scores[k])
    return best if scores[best] >= 5 else None
