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

from procsched._core import Policy
from procsched._core._units import NS
from procsched._runtime._durable._journal import Journal
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState, open_store
from tests.runtime.test_engine import FakeCarrier

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
