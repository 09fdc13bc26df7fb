"""Every ``RAGSPINE_*`` setting, typed and validated in one place.

Library code takes a :class:`Settings` (or the values it needs) as an argument; only
:func:`load_settings` reads the environment.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Reciprocal Rank Fusion constant (Cormack et al. 2009). Stated here, not buried in code.
DEFAULT_RRF_K = 60
#: Okapi BM25 term-frequency saturation and length normalisation.
DEFAULT_BM25_K1 = 1.5
DEFAULT_BM25_B = 0.75
#: RRF weight of the whole-page BM25 channel against 1 for the passage channel (see Settings).
DEFAULT_BM25_PAGE_WEIGHT = 2.0


class Settings(BaseSettings):
    """ragspine settings; each field is read from ``RAGSPINE_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="RAGSPINE_", extra="ignore", frozen=True)

    #: Where libraries, thumbnails and the embedded Qdrant Edge shards live.
    data_dir: Path = Field(default=Path(".ragspine"))
    #: URL of a Qdrant server or cluster; unset means the embedded Qdrant Edge store.
    qdrant_url: str | None = None
    #: API key for the Qdrant server (ignored by the embedded store).
    qdrant_api_key: SecretStr | None = None
    #: Threads Qdrant Edge may use for one search (0 = engine default).
    search_threads: int = Field(default=0, ge=0, le=64)

    #: Resolution of the page thumbnails kept under the data dir.
    thumbnail_dpi: int = Field(default=72, ge=18, le=300)
    #: Largest rendered thumbnail side in pixels (protects against huge pages).
    thumbnail_max_px: int = Field(default=1600, ge=64, le=8000)
    #: Largest PDF accepted, in bytes.
    max_upload_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    #: Largest number of pages accepted in one PDF.
    max_pages: int = Field(default=3000, ge=1)
    #: Largest page side accepted, in PDF points (the PDF spec's own limit is 14,400).
    max_page_side_pt: float = Field(default=14400.0, gt=0)

    #: Classification markers that make a page RESTRICTED when found in its top/bottom band.
    restricted_markers: list[str] = Field(default_factory=lambda: ["RESTRICTED", "受限"])
    #: Height of the top and bottom bands searched for markers, as a fraction of page height.
    marker_band: float = Field(default=0.12, gt=0.0, le=0.5)

    #: Target passage length in characters, and the overlap between neighbouring passages.
    chunk_chars: int = Field(default=480, gt=0)
    chunk_overlap: int = Field(default=80, ge=0)

    #: BM25 parameters.
    bm25_k1: float = Field(default=DEFAULT_BM25_K1, gt=0)
    bm25_b: float = Field(default=DEFAULT_BM25_B, ge=0, le=1)
    #: Reciprocal Rank Fusion constant.
    rrf_k: int = Field(default=DEFAULT_RRF_K, ge=1)
    #: RRF weight of the BM25 passage channel (best passage per page) and of the BM25
    #: whole-page channel. 0 turns a channel off (it is not even queried); not both 0. Page
    #: counts double by default: on TAT-QA, Cranfield, CMRC2018 and MMLongBench pages (BM25
    #: mode) 1:2 scored nDCG@10 at least as high as 1:1 on all four (+0.000 to +0.006), the
    #: passage channel alone was the weakest on all four, and 1:1.5 to 1:3 form a plateau.
    bm25_chunk_weight: float = Field(default=1.0, ge=0)
    bm25_page_weight: float = Field(default=DEFAULT_BM25_PAGE_WEIGHT, ge=0)
    #: Query term weights: ``True`` counts a repeated query term as often as it is asked (plain
    #: BM25 over the query's token list); ``False`` weighs each distinct term once.
    bm25_query_counts: bool = True

    #: API keys and the libraries each may use: ``"KEY1=lib-a,lib-b;KEY2=*"``. Unset: no auth.
    api_keys: SecretStr | None = None
    #: Threads that run ingest jobs in the server (PDF work is CPU-bound; keep search responsive).
    ingest_workers: int = Field(default=1, ge=1, le=32)

    #: Largest ``top_k`` a search may ask for.
    max_top_k: int = Field(default=1000, ge=1)
    #: Longest query accepted, in characters.
    max_query_chars: int = Field(default=4096, ge=16)

    @field_validator("restricted_markers")
    @classmethod
    def _markers_not_blank(cls, v: list[str]) -> list[str]:
        cleaned = [m.strip() for m in v if m.strip()]
        if not cleaned:
            raise ValueError("restricted_markers needs at least one non-blank marker")
        return cleaned

    @field_validator("api_keys")
    @classmethod
    def _keys_parse(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None:
            parse_api_keys(v.get_secret_value())
        return v

    def api_key_map(self) -> dict[str, frozenset[str]] | None:
        """``key → allowed libraries`` (``"*"`` = all), or None when auth is off."""
        if self.api_keys is None or not self.api_keys.get_secret_value().strip():
            return None
        return parse_api_keys(self.api_keys.get_secret_value())

    @model_validator(mode="after")
    def _one_bm25_channel(self) -> "Settings":
        if self.bm25_chunk_weight == 0 and self.bm25_page_weight == 0:
            raise ValueError("bm25_chunk_weight and bm25_page_weight cannot both be 0")
        return self

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> "Settings":
        if self.chunk_overlap >= self.chunk_chars:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_chars "
                f"({self.chunk_chars})"
            )
        return self


def parse_api_keys(text: str) -> dict[str, frozenset[str]]:
    """Parse ``"KEY1=lib-a,lib-b;KEY2=*"``; raises ValueError naming the bad entry."""
    out: dict[str, frozenset[str]] = {}
    for n, entry in enumerate(e for e in text.split(";") if e.strip()):
        key, sep, libs = entry.partition("=")
        key = key.strip()
        names = frozenset(x.strip() for x in libs.split(",") if x.strip())
        if not sep or len(key) < 8 or not names:
            raise ValueError(
                f"api_keys entry {n + 1} is not 'KEY=lib1,lib2' with a key of 8+ characters "
                "and at least one library (or '*')"
            )
        out[key] = names
    return out


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (e.g. CLI flags) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
