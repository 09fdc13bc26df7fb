"""What of a question is searched: the question, without what it says about its answer's form.

Questions that reach a retrieval server from chat assistants, agents (MCP) and evaluation sets
carry instructions for whoever answers: "Please write the answer in int format.", "Answer 'yes'
or 'no'.", "The answer should be formatted as a list, for example ["P-1", "P-2"]", "请以整数形式
作答。". None of it is about the documents: BM25 weighs "format", "list", "integer" by their IDF
like any other word (high in a library of reports, where they are rare), the dense and page
encoders fold them into the question's vector, and the cross-encoder reads them as part of the
question. :func:`search_text` leaves them out (``RAGSPINE_DROP_ANSWER_INSTRUCTIONS``).

The rule is narrow on purpose, since a word left out cannot be searched for:

- the first sentence always stays (it holds the question, and may itself begin "List all the
  countries ..."); only its trailing example list goes ("..., e.g., ["9%", "8%"]");
- a later sentence goes when it is an instruction about the answer: it begins with an answer
  verb (write, give, list, return, round, ...) and names a form (format, list, integer, order,
  decimal, ...), or it begins "The answer ...", "Your answer ...", "Answer in/with/'yes' ...",
  "Directly answer", "e.g." or "for example"; in Chinese, it begins with 请/答案/回答/以/用 and
  names a form (格式, 形式, 列表, 整数, 小数, 作答, ...);
- a hint about where to look stays: "Use the cash flow statement." names no form.

Measured on MMLongBench (docs/measured.md, "Answer instructions left out of the search").
"""

from __future__ import annotations

import re

#: Sentence ends: Latin ones before white space ("e.g." and "U.S." inside a sentence are not
#: ends), CJK ones anywhere (Chinese puts no space after them).
_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=\S)|(?<=[。？！])\s*(?=\S)")
_VERB = (r"(?:write|writeh|give|put|provide|return|list|state|express|present|output|format|round|answer|"
         r"respond|reply|enumerate|rank|sort|order)")
_FORM = (r"(?:answer|format|formatted|list|integer|int|float|floqt|string|order|decimals?|digits?|yes|no|words?|"
         r"number|nearest|percentage|percent|ascending|descending|alphabetical|english|sentence|phrase)")
_INSTRUCTION_EN = re.compile(
    r"^(?:please\s+)?(?:"
    rf"{_VERB}\b.*\b{_FORM}\b"
    r"|(?:your|the|my)\s+answer\b"
    r"|answer\s+(?:in|with|as|only|directly|using|by)\b|answer\s*['\"‘“]"
    r"|(?:directly|just|only)\s+(?:answer|give|write|return)\b"
    r"|(?:e\.g\.|for\s+example|such\s+as)\s*[,:]?\s*[\[(\"'‘“]"
    r"|(?:in|use|using|with)\s+(?:the\s+)?(?:following\s+)?format\b"
    r")",
    re.IGNORECASE,
)
_INSTRUCTION_ZH = re.compile(r"^(?:请|答案|回答|以|用|直接).*(?:格式|形式|列表|整数|小数|作答|回答|保留|是或否|排序|顺序)")
#: A trailing example of the answer's form: ", e.g., [...]", " for example ("...")".
_EXAMPLE = re.compile(r"[,;，；]?\s*(?:e\.g\.|for\s+example|such\s+as|例如)\s*[,:，：]?\s*[\[(\"'“‘].*$", re.IGNORECASE)


#: A unit is what the document's tables say too ("in millions", "(in thousands)", "百万元"): an
#: instruction that names one stays searched.
_UNIT = re.compile(r"\b(?:thousands?|millions?|billions?|usd|dollars?|euros?|rmb|yuan)\b|千元|万元|百万|亿元", re.IGNORECASE)
#: The end of an example list ("... e.g., ["9%", "8%"]"): what follows it may be the question's own.
_LIST_END = re.compile(r"[\])”\"']\s*")


def _instruction(sentence: str) -> bool:
    s = sentence.strip()
    return bool(_INSTRUCTION_EN.match(s) or _INSTRUCTION_ZH.match(s)) and not _UNIT.search(s)


def _after_example(sentence: str) -> str:
    """What an instruction sentence says after its example list, when that is more than a word
    ("Please write the answer in list format, e.g., ["9%"] in the 2013 tracking survey?")."""
    m = _EXAMPLE.search(sentence)
    if m is None:
        return ""
    ends = list(_LIST_END.finditer(sentence, m.start()))
    rest = sentence[ends[-1].end():].strip() if ends else ""
    return rest if len(rest.split()) > 1 else ""


def split_instructions(query: str) -> tuple[str, list[str]]:
    """``(searched, left_out)``: ``query`` without its instructions about the answer's form (see
    the module doc), and those instructions. ``searched`` is ``query`` exactly as asked when
    nothing is left out, or when nothing else would be left."""
    parts = _SENTENCE.split(query.strip())
    dropped: list[str] = []
    kept = [parts[0]]
    for p in parts[1:]:
        if not _instruction(p):
            kept.append(p)
            continue
        rest = _after_example(p)
        dropped.append(p.strip()[: len(p.strip()) - len(rest)].strip() if rest else p.strip())
        if rest:
            kept.append(rest)
    trimmed = []
    for p in kept:
        m = _EXAMPLE.search(p)
        if m is not None and m.start() > 0:
            dropped.append(m.group(0).lstrip(",;，； "))
            p = p[: m.start()]
        trimmed.append(p.strip())
    out = " ".join(p for p in trimmed if p)
    if not dropped or not out:
        return query, []
    return out, dropped


def search_text(query: str) -> str:
    """What of ``query`` is searched (:func:`split_instructions`)."""
    return split_instructions(query)[0]
