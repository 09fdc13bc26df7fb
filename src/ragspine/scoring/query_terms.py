"""The BM25 tokens of a query: its tokens without the question words.

Why by hand: a question's interrogatives ("什么", "哪些", "为什么"; "what", "which") are rare in
the prose being searched, so BM25 gives them a high IDF, and CJK unigrams + bigrams give a
two-character one three tokens ("什", "么", "什么"). A passage that happens to contain "什么"
then outranks the one holding the question's subject: on CMRC2018 "Stam1na是什么？" put the
paragraph about Stam1na seventh, under paragraphs that say "什么" three times. Stop-word lists in
analyzers (Lucene's, jieba's) are index-side and drop far more than interrogatives; here only
the query is changed, the index and its statistics are not (docs/measured.md, "Question
words in BM25 queries").

Chinese question words are removed as phrases from the text before it is tokenised, so no
bigram spans the gap they leave ("是什么" -> "是"). Single characters that also start names
or common words (几: 几内亚, 几何; 何: a surname) are kept unless they are part of a listed
phrase. English ones are dropped as whole tokens. A query made of question words only keeps
them all: a query is never emptied. A period written as one token ("FY2018", "FY18") also
searches its year ("2018").
"""

from __future__ import annotations

import re
import unicodedata

from ragspine.scoring.tokenizer import tokenize

#: Simplified and Traditional forms; longer phrases are matched first ("为什么" before "什么").
QUESTION_PHRASES_ZH: tuple[str, ...] = tuple(
    "为什么 為什麼 为啥 為啥 什么 什麼 为何 為何 怎么样 怎麼樣 怎么 怎麼 怎样 怎樣 如何 哪里 哪裡 哪儿 哪兒 "
    "哪些 哪个 哪個 哪一 哪 谁 誰 多少 多久 是否 何时 何時 何种 何種 何处 何處 何为 何為 几个 幾個 几年 幾年 "
    "几位 幾位 几种 幾種 几次 幾次 几岁 幾歲 吗 嗎 呢".split()
)
#: Interrogatives only: "when" and "where" stay (they are common in prose, so their IDF is low
#: anyway, and they also join clauses); "how many"/"how much" keep "many"/"much".
QUESTION_WORDS_EN: frozenset[str] = frozenset("what which who whom whose why how".split())

_ZH_RE = re.compile("|".join(re.escape(p) for p in sorted(QUESTION_PHRASES_ZH, key=len, reverse=True)))
#: A fiscal or calendar period written as one token ("fy2018", "fy18", "q3", "2018q3" is left
#: alone): financial questions write "FY2018" where the filing's pages say "2018" or "fiscal 2018",
#: and the tokenizer keeps letters and digits together, so the query also searches the year.
_PERIOD_RE = re.compile(r"^(?:fy|cy)(\d{2}|\d{4})$")


def _with_years(tokens: list[str]) -> list[str]:
    out: list[str] = []
    for t in tokens:
        out.append(t)
        m = _PERIOD_RE.match(t)
        if m:
            year = m.group(1)
            out.append(year if len(year) == 4 else f"20{year}")
    return out


def query_tokens(text: str, *, drop_question_words: bool = True) -> list[str]:
    """BM25 tokens of the query ``text``; with ``drop_question_words`` (the default) its
    question words are left out, unless nothing else would be left."""
    if not drop_question_words:
        return _with_years(tokenize(text))
    # NFKC first, as tokenize() does, so a full-width or compatibility form of a phrase matches.
    stripped = _ZH_RE.sub(" ", unicodedata.normalize("NFKC", text))
    kept = [t for t in tokenize(stripped) if t not in QUESTION_WORDS_EN]
    return _with_years(kept or tokenize(text))
