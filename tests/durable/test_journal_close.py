"""A clean shutdown ends the runs still recorded in flight under its
registration ``cancelled`` (``SQLStore.unregister``). Once its drain wrote
every change - the end of every run it started - such a run never
started, and its slot goes to the next claim; otherwise the run may have
run, and its slot stays claimed (never twice). The fault campaign, seed
4607 (PostgreSQL): a claim written by a commit whose answer never came
was no longer known to the journal at shutdown; the unregister's cancel
kept its slot claimed, and the one-shot it was of never ran, on any
instance. A real journal on a real SQLite store; the carrier is a
recorder (the engine's, from its own tests)."""

from __future__ import annotations

import os
import time

import pytest

from procsched._core import Policy, Run
from procsched._core._units import NS
from procsched._errors import StoreError
from procsched._runtime._durable._journal import FLIGHT, Journal
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState, open_store
from tests.runtime.test_engine import FakeCarrier, FakeWorker

ONCE = {"kind": "once", "at_ns": 0}


@pytest.mark.parametrize("drained", [True, False])
def test_a_run_recorded_in_flight_that_never_started_leaves_its_slot_at_a_clean_shutdown(tmp_path, drained) -> None:
    path = str(tmp_path / "s.db")
    store = open_store(path)
    slot = time.time_ns()
    batch = store.batch()
    batch.upsert(TaskDefinition("o", "m:f", b"", ONCE), TaskState(0, slot))
    batch.commit()
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
    batch = store.batch(journal.holder)
    batch.started("o", 1, 1, slot)  # its claim, written; the journal does not know of it
    assert batch.commit().ok
    try:
        if drained:
            offset = time.time_ns() - time.monotonic_ns()
            journal.drain(engine, FakeCarrier(), offset, time.monotonic_ns())
    finally:
        journal.close(clean=True)
    assert [r.outcome for r in store.history("o")] == ["cancelled"]
    other = store.register(lease_ns=30 * NS, pid=1)
    # every change written: the slot is the next claim's (before: refused, the one-shot never ran)
    assert store.claim_run(other, "o", 2, 1, slot) is drained
    store.close()


def test_a_claim_whose_commit_failed_and_may_have_been_written_ends_recorded_when_taken_back(tmp_path) -> None:
    """A commit that claimed a run failed - its COMMIT's answer lost, so
    the store may hold the start all the same (PostgreSQL). Its keyed runs
    are taken back from their workers while the store is retried
    (``Engine.hold_back``), and the claim was dropped with its start, as if
    never written: a shutdown before the run was given again ended it
    unrecorded, and the store kept it in flight under this scheduler - the
    unregister recorded it cancelled with its slot kept claimed (the fault
    campaign, seed 4607, one way there). Such a claim stays as if in
    flight: its start goes again with the next commit, and its end is
    recorded ``cancelled``, its slot kept for the next claim."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    slot = time.time_ns()
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", {"kind": "fixed_rate", "period_ns": NS}), TaskState(2, slot))
    batch.commit()
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
    offset = time.time_ns() - time.monotonic_ns()
    journal.offset = offset
    run = Run(7, 3, slot - offset, None, None, "k")
    worker = FakeWorker(4242)
    journal.keys[7] = "k"
    try:
        assert journal.hold(worker, run)  # given ahead to its busy worker: held for its claim
        claim = journal.held.pop()
        known = journal.claims[claim]
        known[0] = FLIGHT  # its start, submitted (as Journal.turn does) ...
        submitted = journal.writer.store.batch(journal.holder)
        submitted.started("k", 3, 1, slot, slot, worker_pid=4242)
        assert submitted.commit().ok  # ... and committed, its answer lost: the commit failed
        journal._retry(engine, submitted, [(claim, known)], [], StoreError("COMMIT: no answer"), time.monotonic_ns())
        assert journal.withdraw(worker, run)  # taken back while the store is retried (Engine.hold_back)
        journal.closing = True  # a clean shutdown, before it was given again
        assert journal.unstarted(run, time.monotonic_ns(), [])  # before: False, nothing recorded
        assert journal.batch.commit().ok
    finally:
        journal.close(clean=True)
    [record] = store.history("k")
    assert (record.run, record.outcome) == (3, "cancelled")  # before: still in flight, no end
    assert store.claim_run(store.register(lease_ns=30 * NS, pid=1), "k", 4, 1, slot)  # its slot, kept
    store.close()
