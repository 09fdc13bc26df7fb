"""Building a library's whole graph without holding its write lock (its writer lease on a
cluster) while the work is done.

A library indexed before it had a graph gets one on first use, and ``ragspine graph rebuild``
derives every source again: both read every document's passages back from the store and match
the alias dictionary in them, minutes for a large library. Under the lock (as they once ran) no
ingest could commit meanwhile. Here the work is done first on a scratch graph in a temporary
folder, outside any lock; then, under the lock, its sources are written in one transaction and
what changed meanwhile is caught up as any commit is (metadata sources of every document, text
of the documents whose version moved): seconds at most.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

from ragspine.graph._derive import Derivation
from ragspine.graph._model import DECLARED, Contribution

logger = logging.getLogger(__name__)


def backfill(derive: Derivation, library: str) -> dict[str, int]:
    """Derive every source of ``library``'s graph (in ``derive``'s graph store) outside its
    lock, on a scratch graph, then write them under it; the graph's statistics after."""
    from ragspine.graph._networkx import NetworkXGraphStore

    t0 = time.perf_counter()
    graphs = derive.graphs
    declared = graphs.contribution(library, DECLARED) if graphs.exists(library) else None
    # The documents as the scratch will find them (at the latest): any other version is caught up.
    seen = {d: v for d, (v, _, _) in derive.active_docs(library).items()}
    with tempfile.TemporaryDirectory(prefix="ragspine-graph-") as tmp:
        scratch = Derivation(NetworkXGraphStore(Path(tmp)), derive.store, derive.libraries, derive.extractor)
        try:
            with scratch.graphs.locked(library):  # a lock of the scratch folder only
                if declared is not None:
                    scratch.graphs.replace_sources(library, {DECLARED: declared})
                scratch.sync_documents(library, force_text=True)
            sources: dict[str, Contribution | None] = {
                k: scratch.graphs.contribution(library, k) for k in scratch.graphs.source_keys(library)}
            dictionary = scratch.dictionary(library)
        finally:
            scratch.graphs.close()
    built = time.perf_counter() - t0
    with graphs.locked(library):
        # The declared relations stay as they are now (an upload may have landed meanwhile).
        sources.pop(DECLARED, None)
        changes = {k: None for k in graphs.source_keys(library) if k != DECLARED and k not in sources}
        changes.update(sources)
        graphs.replace_sources(library, changes)
        same = graphs.contribution(library, DECLARED) == declared
        # Caught up as a commit is: only what moved since the scratch read the manifest (all
        # the text again only when the declared relations changed the dictionary meanwhile).
        derive.sync_documents(library, force_text=False, before=dictionary if same else None)
        now = derive.active_docs(library)
        moved = {d for d, (v, _, _) in now.items() if seen.get(d) != v}
        if moved:  # committed meanwhile (their commits found no graph yet to write to)
            derive.rederive_text(library, derive.dictionary(library), now, {}, only=moved)
    stats = graphs.stats(library)
    logger.info("graph of library %s built in %.2fs outside its lock, written in %.2fs: %d nodes, %d edges",
                library, built, time.perf_counter() - t0 - built, stats["nodes"], stats["edges"])
    return stats
