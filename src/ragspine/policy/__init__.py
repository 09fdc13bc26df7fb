"""The RESTRICTED policy: what a sensitivity label means, and which pages carry a
classification marker. Indexing drops what it finds here before anything is encoded, stored,
rendered or logged; every query-time exit checks :func:`is_restricted` again on each point's
own classification (defence in depth).
"""

from ragspine.policy.markers import (
    CLASSIFICATION,
    LABEL_MAX_CHARS,
    RESTRICTED,
    PageLines,
    PagePolicy,
    is_restricted,
    normalize_sensitivity,
    point_restricted,
)

__all__ = [
    "CLASSIFICATION", "LABEL_MAX_CHARS", "RESTRICTED", "PageLines", "PagePolicy", "is_restricted",
    "normalize_sensitivity", "point_restricted",
]
