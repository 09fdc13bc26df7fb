"""The query chain: glossary and alias multi-query, a bounded corrective loop that can abstain,
the post-chain (MMR, lost-in-the-middle) and the knowledge-gap log. See :mod:`ragspine.chain.query`."""

from ragspine.chain.gaps import GapLog
from ragspine.chain.glossary import Glossaries, GlossaryEntry, parse_glossary
from ragspine.chain.query import QueryChain
from ragspine.chain.rewrite import Rewriter, Variant

__all__ = ["GapLog", "Glossaries", "GlossaryEntry", "QueryChain", "Rewriter", "Variant", "parse_glossary"]
