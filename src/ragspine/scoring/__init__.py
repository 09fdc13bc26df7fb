"""How text and page images become comparable numbers: the CJK-aware tokenizer, BM25 term
weights as sparse vectors, multivector math (MaxSim, pooling, quantization) and Reciprocal Rank
Fusion. Pure functions over numpy; no I/O, no store, no models. Indexing writes with these and
retrieval scores with the same ones, so the two sides cannot drift apart.
"""

from ragspine.scoring.bm25 import BM25Params, SparseVector, document_vector, query_vector
from ragspine.scoring.fusion import rrf
from ragspine.scoring.tokenizer import TOKENIZER_VERSION, tokenize

__all__ = ["BM25Params", "SparseVector", "TOKENIZER_VERSION", "document_vector", "query_vector", "rrf", "tokenize"]
