"""Fixtures of the MCP tests: a live server with API keys and a seeded corpus."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _p in (_HERE, _HERE.parent / "client", _HERE.parent / "serving"):
    if str(_p) not in sys.path:  # ``import mcp_kit``, ``import live_kit``, ``import serving_kit``
        sys.path.insert(0, str(_p))

from live_kit import KEY_STAR, LiveServer  # noqa: E402
from mcp_kit import CANARY, KEY_FILTERED  # noqa: E402


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """liba: a three-page report whose page 2 is RESTRICTED (by page_sensitivity) and a
    relations file; libb: one document. Keys: KEY_A reads liba, KEY_STAR everything, KEY_FILTERED
    libb and liba through a filter that no document passes."""
    import pdfs

    from live_kit import KEY_A
    from ragspine.client import Client

    keys = f"{KEY_A}=liba;{KEY_STAR}=*;{KEY_FILTERED}=liba(entity eq nobody),libb"
    with LiveServer(tmp_path_factory.mktemp("mcp"), api_keys=keys) as srv:
        with Client(srv.url, api_key=KEY_STAR) as rs:
            rs.create_library("liba")
            rs.create_library("libb")
            rs.upload("liba", pdfs.make_pdf([
                "Acme Energy annual report. Revenue grew to 120 million; margin 18 percent.",
                f"Board minutes {CANARY}: the merger price is 40 million.",
                "Outlook: capacity additions of 300 megawatts, Acme Energy expects growth.",
            ]), metadata={"doc_id": "acme-2023", "title": "Acme Energy 2023", "entity": "acme-energy",
                          "period": 2023, "page_sensitivity": {"2": "RESTRICTED"}}, wait=True)
            rs.upload_relations("liba", b"source,relation,target,provenance\n"
                                b"Acme Energy,subsidiary_of,Acme Holdings,annual report 2023 p1\n"
                                b"Acme Holdings,peer_of,Globex,market study\n", filename="rel.csv")
            rs.upload("libb", pdfs.make_pdf(["Globex bulletin: bonobo revenue."]),
                      metadata={"doc_id": "globex-b"}, wait=True)
        yield srv
