"""OCR owed by a replica that stopped, resumed by the others (ragspine.catalog.claims,
ragspine.indexing.ocr_sweep): two replicas (Engines) over one Qdrant double and one data dir,
with OCR on and a stand-in engine (cluster/ocr_claims_kit.py says what it reads).

Sweeps are driven by calling ``run_once`` (no timer), and claims last ``TTL`` seconds, so a
"dead" replica's claim runs out within a test. Expected values come from the document drawn in
the kit (the scan is page 2; the stand-in reads ``WORD`` there and nowhere else) and from the
attempts counted by hand (one per claim taken for the same content).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from cluster.ocr_claims_kit import (
    DOC,
    WAIT,
    ScriptedOcr,
    Serialised,
    close_replicas,
    found,
    in_flight,
    ocr,
    ocr_replica,
    phase_one,
    report,
    settled,
    shared,
    stored_claim,
    until,
)
from cluster.replica_kit import LIB, assert_consistent
from ragspine.backup import dump
from ragspine.catalog import claims as claims_module
from ragspine.catalog.claims import KIND_OCR_CLAIM, claim_point
from ragspine.config import Settings
from ragspine.engine import Engine
from ragspine.errors import OcrClaimLostError
from ragspine.ocr import OcrError

__all__ = ["ocr", "shared"]  # fixtures

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
]


@pytest.fixture
def pair(data_dir: Path, ocr: ScriptedOcr, shared: Serialised) -> Iterator[tuple[Engine, Engine]]:
    a, b = ocr_replica(shared, data_dir), ocr_replica(shared, data_dir)
    a.create_library(LIB)
    try:
        yield a, b
    finally:
        ocr.release.set()  # a blocked "dead" run may go on (and end) before the replicas close
        close_replicas(a, b)


def test_a_dead_replicas_ocr_is_finished_by_another_replicas_sweep(pair: tuple[Engine, Engine], ocr: ScriptedOcr
                                                                   ) -> None:
    a, b = pair
    late = in_flight(a, ocr)
    assert found(b) == []  # page 2 is not live before its OCR
    a.ocr_claims.frozen = True  # type: ignore[union-attr]  # A dies: no renewal, no release; its run hangs
    assert b.document(LIB, DOC)["ocr"] == "pending"  # (as a live replica's would read)

    # B's sweeps skip the document while A's claim lasts, and take it once it ran out.
    done = until(b.ocr_sweep.run_once)  # type: ignore[union-attr]
    assert len(done) == 1
    res = done[0].result(timeout=WAIT)
    assert res is not None and (res.version, res.ocr, res.pages_indexed) == (2, "done", 2)
    for engine in (a, b):
        assert engine.document(LIB, DOC)["ocr"] == "done"
        assert found(engine) == [(DOC, 2, "ocr")]  # the scan page, read by OCR, and only it
    claim = stored_claim(b)
    assert (claim["holder"], claim["released"], claim["attempts"]) == (b.replica, True, 2)  # A's try, then B's
    assert_consistent(b, {DOC: 2})

    # A's run wakes up late: it finds its claim gone and stops, without touching the entry.
    ocr.release.set()
    assert isinstance(settled(late), OcrClaimLostError)
    assert (b.document(LIB, DOC)["ocr"], b.document(LIB, DOC)["version"]) == ("done", 2)
    assert_consistent(a, {DOC: 2})


def test_a_live_claim_keeps_other_replicas_off_the_document(pair: tuple[Engine, Engine], ocr: ScriptedOcr) -> None:
    a, b = pair
    running = in_flight(a, ocr)
    assert b.ocr_sweep.run_once() == []  # type: ignore[union-attr]
    skipped = b.resume_ocr(LIB)[(LIB, DOC)]  # even asked explicitly: A is on it
    assert skipped.done() and skipped.result() is None
    assert ocr.calls == 1  # only A's read ever started
    assert stored_claim(b)["holder"] == a.replica
    ocr.release.set()
    res = running.result(timeout=WAIT)
    assert res is not None and (res.version, res.ocr) == (2, "done")
    assert found(b) == [(DOC, 2, "ocr")]
    assert (stored_claim(b)["released"], stored_claim(b)["attempts"]) == (True, 1)
    assert b.ocr_sweep.run_once() == []  # type: ignore[union-attr]  # nothing owed any more


def test_live_claim_guard_disabled_a_second_replica_reads_the_same_document(
    pair: tuple[Engine, Engine], ocr: ScriptedOcr, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The guard firing: taken for free, A's live claim no longer keeps B off, and B reads the
    # document while A is still reading it (double work).
    a, b = pair
    running = in_flight(a, ocr)
    monkeypatch.setattr(claims_module, "is_free", lambda payload, now: True)
    queued = b.ocr_sweep.run_once()  # type: ignore[union-attr]
    assert len(queued) == 1
    res = queued[0].result(timeout=WAIT)
    assert res is not None and res.ocr == "done" and ocr.calls == 2
    ocr.release.set()
    settled(running)


def test_a_claim_on_an_older_version_does_not_hold_up_the_new_versions_ocr(
    pair: tuple[Engine, Engine], ocr: ScriptedOcr,
) -> None:
    a, b = pair
    running = in_flight(a, ocr)  # A reads v1's scan (claim for v1's content)
    first = b.ingest(LIB, report("next year"), {"doc_id": DOC}, defer_ocr=True)  # a new edition, on B
    assert (first.version, first.ocr) == (2, "pending")
    res = b.finish_ocr_later(LIB, DOC).result(timeout=WAIT)  # not skipped: A's run can only end superseded
    assert res is not None and (res.version, res.ocr) == (3, "done")
    assert (stored_claim(b)["holder"], stored_claim(b)["attempts"]) == (b.replica, 1)  # counted anew
    ocr.release.set()
    late = settled(running)
    assert late is None or isinstance(late, OcrClaimLostError)  # (None: it found itself superseded)
    assert running.exception() is not None or running.result() is None
    assert (b.document(LIB, DOC)["version"], b.document(LIB, DOC)["ocr"]) == (3, "done")
    assert found(a) == [(DOC, 2, "ocr")]
    assert_consistent(a, {DOC: 2})


def test_a_late_failure_never_marks_a_finished_ocr_failed(pair: tuple[Engine, Engine], ocr: ScriptedOcr) -> None:
    # What a run that fails after another replica finished the document does to its entry
    # (DeferredOcr._state, the one place a phase 2 sets a state): nothing.
    a, b = pair
    phase_one(a)
    key = str(a.libraries.doc_entry(LIB, DOC)["content_key"])  # type: ignore[index]
    assert b.finish_ocr_later(LIB, DOC).result(timeout=WAIT) is not None
    assert a.indexer.deferred._state(LIB, DOC, key, "failed") is False
    assert a.document(LIB, DOC)["ocr"] == "done"


def test_a_document_whose_ocr_always_fails_is_swept_at_most_max_attempts_times(
    pair: tuple[Engine, Engine], ocr: ScriptedOcr,
) -> None:
    a, b = pair
    assert a.settings.ocr_max_attempts == 3  # the default
    phase_one(a)  # A stops before its phase 2 starts: pending, never claimed
    ocr.fail = True
    failures = []
    for round_ in range(6):  # the replicas sweep in turn, as their timers would
        for fut in (a if round_ % 2 == 0 else b).ocr_sweep.run_once():  # type: ignore[union-attr]
            failures.append(settled(fut))
    assert len(failures) == 3 and all(isinstance(e, OcrError) for e in failures)
    assert ocr.calls == 3
    assert a.document(LIB, DOC)["ocr"] == "failed"
    assert stored_claim(a)["attempts"] == 3 and stored_claim(a)["released"] is True
    assert found(a) == []  # page 1 stays live, page 2 unread

    # An explicit resume still runs it (the sweep still does not), and it can succeed.
    assert isinstance(settled(b.resume_ocr(LIB)[(LIB, DOC)]), OcrError)
    assert ocr.calls == 4
    assert a.ocr_sweep.run_once() == [] and b.ocr_sweep.run_once() == []  # type: ignore[union-attr]
    ocr.fail = False
    res = a.resume_ocr(LIB)[(LIB, DOC)].result(timeout=WAIT)
    assert res is not None and (res.version, res.ocr) == (2, "done")
    assert found(b) == [(DOC, 2, "ocr")]


def _backup_points(engine: Engine) -> set[tuple[str, str]]:
    """(id, kind) of every point a backup of the library carries."""
    buf = io.BytesIO()
    engine.backup([LIB], buf)
    out = set()
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        for m in tar.getmembers():
            if "/points/" in m.name and m.name.endswith(".json.gz"):
                fh = tar.extractfile(m)
                assert fh is not None
                for row in json.loads(gzip.decompress(fh.read())):
                    out.add((str(row["id"]), str(row["payload"].get("kind"))))
    return out


def _answers(engine: Engine) -> tuple[Any, ...]:
    engine.libraries.invalidate(LIB)
    hits = engine.search({"query": "harbour terminal", "libraries": [LIB], "mode": "bm25", "top_k": 10}).hits
    return ([(h.doc_id, h.page, h.chunk_id, h.scores) for h in hits], engine.documents(LIB),
            engine.libraries.get(LIB).stats, engine.list_libraries())


def test_claim_points_change_no_search_listing_statistics_or_backup(
    pair: tuple[Engine, Engine], data_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = pair
    other = pymupdf.open()
    other.new_page().insert_text((72, 100), "Harbour terminal dredging report for the outer channel.", fontsize=11)
    a.ingest(LIB, other.tobytes(), {"doc_id": "plain"})
    before, carried = _answers(b), _backup_points(a)
    claim = a.ocr_claims.take(LIB, "plain", "some-key")  # type: ignore[union-attr]
    assert claim is not None and _claim_kind(a, "plain") == KIND_OCR_CLAIM
    fresh = ocr_replica(a.store.client, data_dir)  # type: ignore[attr-defined]  # its in-memory BM25 built now
    try:
        assert _answers(b) == before and _answers(fresh) == before
        assert _backup_points(a) == carried
        assert all(kind != KIND_OCR_CLAIM for _, kind in carried)
        assert_consistent(fresh, {"plain": 1})  # statistics equal a recount; no stray point counted
        # The guard firing: without ocr_claim in NOT_CARRIED a backup would carry the claim.
        monkeypatch.setattr(dump, "NOT_CARRIED", dump.NOT_CARRIED - {KIND_OCR_CLAIM})
        assert _backup_points(a) - carried == {(claim_point("plain"), KIND_OCR_CLAIM)}
    finally:
        close_replicas(fresh)


def _claim_kind(engine: Engine, doc_id: str) -> str:
    return str(engine.store.retrieve(LIB, [claim_point(doc_id)])[0].payload["kind"])


def test_the_embedded_store_has_no_claims_and_no_sweep(data_dir: Path) -> None:
    e = Engine(Settings(data_dir=data_dir, reranker="none", ocr="off"))
    try:
        assert e.ocr_claims is None and e.ocr_sweep is None and e.start_ocr_sweep() is False
    finally:
        e.close()
