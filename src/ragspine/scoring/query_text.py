"""What of a question is searched: the question, without what it says about its answer's form.

Questions that reach a retrieval server from chat assistants, agents (MCP) and evaluation sets
carry instructions for whoever answers: "Please write the answer in int format.", "Answer 'yes'
or 'no'.", "The answer should be formatted as a list, for example ["P-1", "P-2"]", "请以整数形式
作答。". None of it is about the documents: BM25 weighs "format", "list", "integer" by their IDF
like any other word (high in a library of reports, where they are rare), the dense and page
encoders fold them into the question's vector, and the cross-encoder reads them as part of the
question. :func:`search_text` leaves them out (``RAGSPINE_DROP_ANSWER_INSTRUCTIONS``).

The rule is narrow on purpose, since a word left out cannot be searched for:

- sentences end at ". ", "? ", "! " and at Chinese ends, not after an abbreviation ("Apple
  Inc. returned", "U.S. sales", "No. 3");
- the first sentence always stays (it holds the question, and may itself begin "List all the
  countries ..."); only an example list in brackets that closes it goes ("..., e.g., ["9%",
  "8%"]"), not one inside it ("such as \"supply chain disruption\", did ...");
- a later sentence goes when it begins as an instruction (an answer verb: write, give, list,
  return, round, ...; "The answer", "Your answer", "Answer", "Directly answer", "e.g.") *and*
  says something about the form ("in int format", "as a list", "an integer", "ascending order",
  "three decimal places", "'yes' or 'no'"): "List the segments in order of revenue." and "Give
  the percentage of net sales from China." stay. What such a sentence says after its example
  list stays too. In Chinese, only a short sentence that is an instruction and nothing else
  ("请以整数形式作答。"), not "请用列表形式列出，并说明持股比例。";
- a hint about where to look ("Use the cash flow statement.", "Answer using the cash flow
  statement.", "请根据现金流量表回答。") and a unit ("Answer in millions.") stay.

Measured on MMLongBench (docs/measured.md, "Answer instructions and the kind a question names").
"""

from __future__ import annotations

import re

#: Words ending in a full stop that do not end a sentence ("Apple Inc. returned", "U.S. sales").
_ABBREVIATIONS = frozenset(
    "inc corp co ltd plc llc no nos vs etc approx fig figs e.g i.e u.s u.k mr mrs ms dr st jan feb mar apr "
    "jun jul aug sep sept oct nov dec".split()
)
#: A sentence ends at ". ", "? " and "! ", at a Chinese end, and at a "?" written straight against
#: the next sentence's capital ("... for Netflix?Answer in percentage term"), as questions pasted
#: from forms and spreadsheets are (not at a "!": "Yahoo!Japan" is a name).
_END = re.compile(r"(?<=[.?!])\s+(?=\S)|(?<=[。？！])\s*(?=\S)|(?<=[?!])(?=[\u4e00-\u9fff])|(?<=[A-Za-z0-9)\"']\?)(?=[A-Z][a-z])")
#: A sentence that begins as an instruction to the answerer ...
_LEAD_EN = re.compile(
    r"^(?:please\s+)?(?:(?:write|writeh|give|put|provide|return|list|express|format|round|respond|reply|enumerate)\b"
    r"|(?:your|the|my)\s+answer\b|answer\b|(?:directly|just|only)\s+(?:answer|give|write|return)\b"
    r"|e\.g\.|for\s+example\b)",
    re.IGNORECASE,
)
#: ... and says something about the answer's form (not merely an answer verb: "List the segments
#: in order of revenue." and "Give the percentage of net sales from China." are questions).
_FORM_EN = re.compile(
    r"\bformat(?:ted)?\b"
    r"|\b(?:in|as|into|with)\s+(?:an?\s+|the\s+)?(?:\w+\s+){0,2}(?:list|int|integer|float|floqt|string|json|words?|english|chinese)\b"
    r"|\b(?:an?|the)\s+(?:\w+\s+)?(?:integer|int|float|number|list|string)\s*[.?!]?\s*$"
    r"|\bround\w*\b.*\b(?:decimal|places?|nearest|integer|hundred|thousand)\b|\bnearest\b"
    r"|\b(?:ascending|descending|descend|ascend|alphabetical|reverse)\b"
    r"|\b(?:directly|only)\s+answer\b|['\"‘“]\s*(?:yes|no|true|false|left|right)\s*['\"’”]"
    r"|^(?:e\.g\.|for\s+example)\s*[,:]?\s*[\[(]",
    re.IGNORECASE,
)
#: A short Chinese instruction and nothing else: "请以整数形式作答。", "答案请保留两位小数。"
_INSTRUCTION_ZH = re.compile(r"^(?:请|答案|回答|直接)[^，,；;并和及]{0,12}(?:格式|形式|整数|小数|列表|是或否)[^，,；;并和及]{0,6}[。.!！]?$")
#: A unit is what the document's tables say too ("in millions", "(in thousands)", "百万元"): an
#: instruction that names one stays searched.
_UNIT = re.compile(r"\b(?:thousands?|millions?|billions?|usd|dollars?|euros?|rmb|yuan)\b|千元|万元|百万|亿元", re.IGNORECASE)
#: An example list of the answer's form that ends its sentence: ", e.g., ["9%", "8%"]", " for
#: example (1, 2)", " like ['2014', '2018']" (after "like", a list in square brackets only: "look
#: like (a)" is a question's own words). Found from its keyword (no leading white space in the
#: pattern: a search over a long run of spaces would be quadratic); only a bracketed list that
#: closes the sentence.
_EXAMPLE = re.compile(r"(?:(?:e\.g\.|for\s+example|such\s+as)\s*[,:，：]?\s*(?:\[[^\]]*\]|\([^)]*\))|\blike\s*\[[^\]]*\])"
                      r"\s*[.?!。？！]?\s*$",
                      re.IGNORECASE)
#: The end of an example list inside an instruction sentence: what follows may be the question's.
_LIST_END = re.compile(r"[\])]\s*")


def _sentences(query: str) -> list[str]:
    """``query`` cut at its sentence ends, not after an abbreviation ("Inc.", "U.S.", "No.")."""
    out: list[str] = []
    start = 0
    for m in _END.finditer(query):
        before = query[start:m.start()].split()
        last = before[-1].lower().rstrip(".") if before else ""
        if query[m.start() - 1] == "." and last in _ABBREVIATIONS:
            continue
        out.append(query[start:m.start()])
        start = m.end()
    out.append(query[start:])
    return out


def _instruction(sentence: str) -> bool:
    s = sentence.strip()
    if _UNIT.search(s):
        return False
    return bool((_LEAD_EN.match(s) and _FORM_EN.search(s)) or _INSTRUCTION_ZH.match(s))


def _cut_example(sentence: str) -> tuple[str, str]:
    """``(kept, example)``: a sentence without the example list that ends it."""
    m = _EXAMPLE.search(sentence)
    if m is None or m.start() == 0:
        return sentence, ""
    return sentence[: m.start()].rstrip(" ,;，；"), sentence[m.start():].strip()


def _after_example(sentence: str) -> str:
    """What an instruction sentence says after its example list, when that is more than a word
    ("Please write the answer in list format, e.g., ["9%"] in the 2013 tracking survey?")."""
    m = re.search(r"(?:e\.g\.|for\s+example)", sentence, re.IGNORECASE)
    if m is None:
        return ""
    ends = list(_LIST_END.finditer(sentence, m.start()))
    rest = sentence[ends[-1].end():].strip() if ends else ""
    return rest if len(rest.split()) > 1 else ""


def split_instructions(query: str) -> tuple[str, list[str]]:
    """``(searched, left_out)``: ``query`` without its instructions about the answer's form (see
    the module doc), and those instructions. ``searched`` is ``query`` exactly as asked when
    nothing is left out, or when nothing else would be left."""
    parts = _sentences(query.strip())
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
        p, example = _cut_example(p)
        if example:
            dropped.append(example)
        trimmed.append(p.strip())
    out = " ".join(p for p in trimmed if p)
    if not dropped or not out:
        return query, []
    return out, dropped


def search_text(query: str) -> str:
    """What of ``query`` is searched (:func:`split_instructions`)."""
    return split_instructions(query)[0]
