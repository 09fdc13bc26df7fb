"""The settings of the query chain (:mod:`ragspine.chain`): rewrites, the corrective grade, the
knowledge-gap log and the post-chain. :class:`ragspine.config.Settings` holds them with the
rest."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ChainSettings(BaseSettings):
    """How the query chain rewrites, grades and reorders (``RAGSPINE_*`` as every setting)."""

    model_config = SettingsConfigDict(env_prefix="RAGSPINE_", extra="ignore", frozen=True)

    #: Search the glossary and alias variants of a query too, when a request does not say
    #: (``rewrite``). Off by default: each variant is one more search, and the corrective loop
    #: rewrites when the first answer is weak.
    rewrite: bool = False
    #: Most queries a rewrite searches, the original included.
    rewrite_max_queries: int = Field(default=5, ge=1, le=5)
    #: Corrective grade: the share of the query's coverage terms (content words less the frame
    #: words of chain/grade.FRAME_WORDS) the top passages must contain, when two or more are
    #: missing. On MMLongBench (economy, OCR auto) 0.4 / 0.45 / 0.5 abstain on 7.1 / 9.3 / 9.9 %
    #: of the answerable and 31.6 / 36.7 / 36.7 % of the unanswerable questions; on the text
    #: sets' unanswerable twins 0.45 keeps every set's answerable abstention under 10 %
    #: (docs/measured.md, "What the text can hold: the corrective grade's coverage").
    corrective_min_coverage: float = Field(default=0.45, ge=0.0, le=1.0)
    #: Corrective grade: a number of two digits or more, or a name no dictionary knows, that the
    #: question names and the first hit's whole document never mentions makes the answer weak
    #: ("in 2016" of a report on 2013); read from the library's in-memory BM25 index, never for
    #: a key with filters on the library (chain/grade.specifics).
    corrective_specifics: bool = True
    #: Corrective grade: passages (best first) whose terms count towards the coverage.
    corrective_depth: int = Field(default=3, ge=1, le=50)
    #: Corrective grade by meaning (when the dense channel ran): below this best dense cosine of
    #: the top passages the answer is weak; at or above ``corrective_rescue_similarity`` a low
    #: coverage is forgiven. Unset: the dense model's calibrated values
    #: (ragspine.models.registry.GRADE_SIMILARITY; a model without them, today every model,
    #: grades by words alone).
    corrective_min_similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    corrective_rescue_similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    #: Count searches that find nothing (or abstain) in the library's knowledge-gap log. The log
    #: keeps the user's query as typed, so a query naming a secret is kept; turn it off where
    #: queries themselves must not be stored.
    gap_log: bool = True
    #: MMR trade-off: 1 = relevance only, 0 = diversity only.
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0)
    #: MMR chooses ``top_k`` hits out of ``top_k * mmr_pool_factor`` fused candidates.
    mmr_pool_factor: int = Field(default=3, ge=1, le=10)
